package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// ReadyFunc says whether the daemon is ready to serve kubelet, and if not,
// why.
type ReadyFunc func() (ready bool, reason string)

// Handler serves /metrics from m's registry, /healthz (200 while the
// process serves HTTP at all), /readyz (200 once ready says so, 503 with
// its reason before) and the pprof endpoints under /debug/pprof/.
// (Importing net/http/pprof also registers them on http.DefaultServeMux,
// which nothing in netshim serves.)
func Handler(m *Metrics, ready ReadyFunc) http.Handler {
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
	// pprof.Index serves the named profiles (heap, goroutine, allocs...)
	// under /debug/pprof/NAME; the other four have handlers of their own.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// ListenAddress turns --metrics-bind-address into the address to listen
// on: a value without a host (":9090") means loopback, as the endpoint
// has no authentication and pprof exposes the process's memory.
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
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
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
