package testutil

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricValue is the value of the first series of family in g whose labels
// include labels (every labels[k] matches; the series may have more): a
// counter's or gauge's value, a histogram's sample count. ok is false when
// no series matches.
func MetricValue(t testing.TB, g prometheus.Gatherer, family string, labels map[string]string) (v float64, ok bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, want := range labels {
				if got, found := have[k]; !found || got != want {
					continue series
				}
			}
			switch {
			case s.GetHistogram() != nil:
				return float64(s.GetHistogram().GetSampleCount()), true
			case s.GetGauge() != nil:
				return s.GetGauge().GetValue(), true
			default:
				return s.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}
