package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// SandboxMode is one label pair of netshim_sandbox_modes: the sandbox
// mode a sandbox was made in (docker, pinned, pauseless) and the code of
// why it got it.
type SandboxMode struct {
	Mode, Reason string
}

// stateCollector reports sandboxes and containers by state, and sandboxes
// by mode, counted at scrape time by functions the runtime provides:
// keeping gauges current would cost every state change an update, for a
// number read once per scrape interval.
type stateCollector struct {
	sandboxes, containers, modes *prometheus.Desc

	mu        sync.Mutex
	count     func() (sandboxes, containers map[string]int)
	countMode func() map[SandboxMode]int
}

func newStateCollector() *stateCollector {
	return &stateCollector{
		sandboxes:  prometheus.NewDesc(namespace+"_sandboxes", "Pod sandboxes netshim knows, by the state of their infra container (created, running, exited, unknown).", []string{"state"}, nil),
		containers: prometheus.NewDesc(namespace+"_containers", "Workload containers netshim knows, by state (created, running, exited, unknown).", []string{"state"}, nil),
		modes:      prometheus.NewDesc(namespace+"_sandbox_modes", "Pod sandboxes netshim knows, by the sandbox mode each was made in (docker, pinned, pauseless) and why it got that mode (--sandbox-netns=auto picks per pod).", []string{"mode", "reason"}, nil),
	}
}

func (c *stateCollector) set(fn func() (sandboxes, containers map[string]int)) {
	c.mu.Lock()
	c.count = fn
	c.mu.Unlock()
}

func (c *stateCollector) setModes(fn func() map[SandboxMode]int) {
	c.mu.Lock()
	c.countMode = fn
	c.mu.Unlock()
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sandboxes
	ch <- c.containers
	ch <- c.modes
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	fn, modeFn := c.count, c.countMode
	c.mu.Unlock()
	if fn != nil {
		sandboxes, containers := fn()
		for state, n := range sandboxes {
			ch <- prometheus.MustNewConstMetric(c.sandboxes, prometheus.GaugeValue, float64(n), state)
		}
		for state, n := range containers {
			ch <- prometheus.MustNewConstMetric(c.containers, prometheus.GaugeValue, float64(n), state)
		}
	}
	if modeFn != nil {
		for m, n := range modeFn() {
			ch <- prometheus.MustNewConstMetric(c.modes, prometheus.GaugeValue, float64(n), m.Mode, m.Reason)
		}
	}
}
