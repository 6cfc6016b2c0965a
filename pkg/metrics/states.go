package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// stateCollector reports sandboxes and containers by state, counted at
// scrape time by a function the runtime provides: keeping gauges current
// would cost every state change an update, for a number read once per
// scrape interval.
type stateCollector struct {
	sandboxes, containers *prometheus.Desc

	mu    sync.Mutex
	count func() (sandboxes, containers map[string]int)
}

func newStateCollector() *stateCollector {
	return &stateCollector{
		sandboxes:  prometheus.NewDesc(namespace+"_sandboxes", "Pod sandboxes netshim knows, by the state of their infra container (created, running, exited, unknown).", []string{"state"}, nil),
		containers: prometheus.NewDesc(namespace+"_containers", "Workload containers netshim knows, by state (created, running, exited, unknown).", []string{"state"}, nil),
	}
}

func (c *stateCollector) set(fn func() (sandboxes, containers map[string]int)) {
	c.mu.Lock()
	c.count = fn
	c.mu.Unlock()
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sandboxes
	ch <- c.containers
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	fn := c.count
	c.mu.Unlock()
	if fn == nil {
		return
	}
	sandboxes, containers := fn()
	for state, n := range sandboxes {
		ch <- prometheus.MustNewConstMetric(c.sandboxes, prometheus.GaugeValue, float64(n), state)
	}
	for state, n := range containers {
		ch <- prometheus.MustNewConstMetric(c.containers, prometheus.GaugeValue, float64(n), state)
	}
}
