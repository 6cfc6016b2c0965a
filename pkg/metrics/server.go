package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// ReadyFunc says whether the daemon is ready to serve kubelet, and if not,
// why.
type ReadyFunc func() (ready bool, reason string)

// MaxProfileDuration bounds the seconds parameter of the pprof endpoints
// that sample for a while: /debug/pprof/profile (CPU), /debug/pprof/trace
// and the delta profiles (/debug/pprof/heap?seconds=N...). A CPU profile
// or trace runs for the whole process, one at a time, and holds its
// connection as long: an unbounded one (seconds=1000000) would keep the
// profiler, and a connection, for as long as asked. A longer CPU profile
// is taken as several in a row: go tool pprof merges the files it is
// given.
const MaxProfileDuration = 60 * time.Second

// The HTTP server's timeouts. Every request is a GET without a body, so
// reading one is quick; the longest answer is a profile, written once its
// sampling is over, so the write timeout, which runs from the end of the
// request's headers, must exceed MaxProfileDuration. (pprof itself refuses
// a duration at or above the server's write timeout.)
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = MaxProfileDuration + 30*time.Second
	idleTimeout       = 2 * time.Minute
)

// Handler serves /metrics from m's registry, /healthz (200 while the
// process serves HTTP at all), /readyz (200 once ready says so, 503 with
// its reason before) and, only with profiling, the pprof endpoints under
// /debug/pprof/: they expose the process's memory (heap profiles hold
// the call stacks of every allocation, cmdline its arguments) and a CPU
// profile or trace slows it, so nobody gets them without asking
// (--enable-profiling). (Importing net/http/pprof also registers them on
// http.DefaultServeMux, which nothing in netshim serves.)
func Handler(m *Metrics, ready ReadyFunc, profiling bool) http.Handler {
	mux := http.NewServeMux()
	if m != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ready != nil {
			if ok, reason := ready(); !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: %s\n", reason)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	if profiling {
		mux.Handle("/debug/pprof/", profilingHandler())
	}
	return mux
}

// profilingHandler serves the pprof endpoints, none for longer than
// MaxProfileDuration.
func profilingHandler() http.Handler {
	mux := http.NewServeMux()
	// pprof.Index serves the named profiles (heap, goroutine, allocs...)
	// under /debug/pprof/NAME; the other four have handlers of their own.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return limitProfileSeconds(mux)
}

// limitProfileSeconds refuses, with 400 and the limit, a seconds parameter
// above MaxProfileDuration, for every pprof endpoint: each reads it as a
// number of seconds to sample for (profile as an integer, trace as a
// float, the delta profiles through Index). It reads the parameter as
// pprof does (FormValue: the first value, from the query or a form body),
// so that both see the same one. A value that is no number is left to
// pprof, which falls back to its default or answers 400 itself; one this
// parse reads as a number above the limit (Inf, NaN included) is refused
// even where pprof would not have read it, since it can only be a
// mistake.
func limitProfileSeconds(h http.Handler) http.Handler {
	limit := MaxProfileDuration.Seconds()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.FormValue("seconds"); v != "" {
			if sec, err := strconv.ParseFloat(v, 64); err == nil && !(sec <= limit) {
				http.Error(w, fmt.Sprintf("seconds=%s is above netshim's limit of %g s for one profile or trace: take several shorter ones", strconv.Quote(v), limit), http.StatusBadRequest)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// ListenAddress turns --metrics-bind-address into the address to listen
// on: a value without a host (":9090") means loopback, as the endpoint
// has no authentication (and with profiling, pprof exposes the process's
// memory).
func ListenAddress(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("want [host]:port (e.g. 127.0.0.1:9090 or :9090): %w", err)
	}
	if port == "" {
		return "", fmt.Errorf("%q: missing port", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Server is the HTTP server of Handler.
type Server struct {
	srv *http.Server
	lis net.Listener
}

// Listen binds addr (see ListenAddress) and returns the server, not yet
// serving: a bind failure is the caller's start-up error.
func Listen(addr string, h http.Handler) (*Server, error) {
	a, err := ListenAddress(addr)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", a)
	if err != nil {
		return nil, fmt.Errorf("listening for metrics on %s: %w", a, err)
	}
	return &Server{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: readHeaderTimeout,
			ReadTimeout:       readTimeout,
			WriteTimeout:      writeTimeout,
			IdleTimeout:       idleTimeout,
		},
		lis: lis,
	}, nil
}

// Addr is the address the server listens on (with the port picked for
// port 0).
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Serve serves until Shutdown; it logs, but does not return, a failure,
// since losing the metrics must not stop the runtime.
func (s *Server) Serve() {
	if err := s.srv.Serve(s.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "Metrics server failed", "address", s.lis.Addr().String())
	}
}

// Shutdown stops the server, letting requests in flight (a CPU profile
// runs for seconds) finish until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}
