package main

import (
	"context"
	"net"
	"time"

	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/metrics"
)

// metricsShutdownTimeout bounds how long requests in flight on the metrics
// endpoint (a CPU profile runs for seconds) may delay the daemon's exit.
const metricsShutdownTimeout = 2 * time.Second

// startMetricsServer serves the metrics endpoint on addr
// (--metrics-bind-address), with the pprof endpoints if profiling
// (--enable-profiling), and returns where it listens and the function that
// stops it. An empty addr serves nothing (nil bound). A bind failure is
// returned: a daemon asked for metrics that cannot serve them must not
// start silently without.
func startMetricsServer(addr string, profiling bool, m *metrics.Metrics, ready metrics.ReadyFunc) (bound net.Addr, stop func(), err error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	s, err := metrics.Listen(addr, metrics.Handler(m, ready, profiling))
	if err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve()
	}()
	what := "Serving metrics and health checks"
	if profiling {
		what = "Serving metrics, health checks and pprof"
	}
	klog.InfoS(what, "address", s.Addr().String())
	if w := exposureWarning(s.Addr(), profiling); w != "" {
		klog.InfoS(w, "address", s.Addr().String())
	}
	return s.Addr(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsShutdownTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			klog.ErrorS(err, "Stopping the metrics server")
		}
		<-done
	}, nil
}

// exposureWarning is the line logged when the metrics endpoint listens
// where other hosts may reach it ("" on loopback): it has no
// authentication, so an operator who meant loopback (or forgot what
// 0.0.0.0 means) should read so at start-up, not in an audit. The bound
// address is what counts: a host name given to the flag resolves to it.
func exposureWarning(bound net.Addr, profiling bool) string {
	if tcp, ok := bound.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return ""
	}
	if profiling {
		return "WARNING: the metrics endpoint listens on a non-loopback address with --enable-profiling: anyone who reaches it can, without authentication, read netshim's metrics and its pprof profiles, which expose the process's memory and command line, and load it with CPU profiles and traces; keep it on loopback or behind a firewall"
	}
	return "WARNING: the metrics endpoint listens on a non-loopback address: anyone who reaches it can read netshim's metrics and health without authentication; keep it on loopback or behind a firewall"
}
