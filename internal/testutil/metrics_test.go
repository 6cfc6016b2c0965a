package testutil

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total"}, []string{"verb", "network"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h_seconds"}, []string{"rpc"})
	reg.MustRegister(c, g, h)
	c.WithLabelValues("ADD", "net1").Add(3)
	c.WithLabelValues("DEL", "net1").Add(1)
	g.Set(7)
	h.WithLabelValues("RunPodSandbox").Observe(0.1)
	h.WithLabelValues("RunPodSandbox").Observe(0.2)

	for _, tc := range []struct {
		family string
		labels map[string]string
		want   float64
		ok     bool
	}{
		{"c_total", map[string]string{"verb": "ADD", "network": "net1"}, 3, true},
		{"c_total", map[string]string{"verb": "DEL"}, 1, true}, // a subset of the labels
		{"c_total", map[string]string{"verb": "GC"}, 0, false},
		{"c_total", map[string]string{"nope": "x"}, 0, false},
		{"g", nil, 7, true},
		{"h_seconds", map[string]string{"rpc": "RunPodSandbox"}, 2, true}, // sample count
		{"missing", nil, 0, false},
	} {
		if v, ok := MetricValue(t, reg, tc.family, tc.labels); v != tc.want || ok != tc.ok {
			t.Errorf("MetricValue(%s, %v) = %v, %v; want %v, %v", tc.family, tc.labels, v, ok, tc.want, tc.ok)
		}
	}
}
