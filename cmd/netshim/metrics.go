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
// (--metrics-bind-address) and returns where it listens and the function
// that stops it. An empty addr serves nothing (nil bound). A bind failure is returned: a daemon asked
// for metrics that cannot serve them must not start silently without.
func startMetricsServer(addr string, m *metrics.Metrics, ready metrics.ReadyFunc) (bound net.Addr, stop func(), err error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	s, err := metrics.Listen(addr, metrics.Handler(m, ready))
	if err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve()
	}()
	klog.InfoS("Serving metrics, health checks and pprof", "address", s.Addr().String())
	return s.Addr(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsShutdownTimeout)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			klog.ErrorS(err, "Stopping the metrics server")
		}
		<-done
	}, nil
}
