package index

import (
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/metrics"
)

// gathered is the value of a counter, or the sample count of a histogram,
// of family in m (the first series whose labels include labels).
func gathered(t *testing.T, m *metrics.Metrics, family string, labels map[string]string) float64 {
	t.Helper()
	v, _ := testutil.MetricValue(t, m.Registry(), family, labels)
	return v
}

func TestLoopCountsEventsLagAndResyncs(t *testing.T) {
	m := metrics.New()
	f := newFakeEngine()
	add(f, "sb", "sandbox", "running")
	x := startIndex(t, f, Options{Metrics: m})
	testutil.Eventually(t, "the first resync counted", func() bool {
		return gathered(t, m, "netshim_index_resyncs_total", map[string]string{"result": "ok"}) == 1
	})

	add(f, "c", "container", "running")
	f.Emit(events.ActionStart, "c", nil)
	f.Emit(events.ActionDie, "c", map[string]string{"exitCode": "0"})
	testutil.Eventually(t, "two events counted", func() bool {
		return gathered(t, m, "netshim_index_events_total", nil) == 2
	})
	if n := gathered(t, m, "netshim_index_loop_lag_seconds", nil); n != 2 {
		t.Errorf("lag observed %v times, want 2 (the fake stamps its events)", n)
	}
	testutil.Eventually(t, "the container indexed", func() bool { return x.has("c") })
	if n := gathered(t, m, "netshim_index_resyncs_total", map[string]string{"result": "error"}); n != 0 {
		t.Errorf("%v failed resyncs, want 0", n)
	}
	if n := promtestutil.CollectAndCount(m.Registry(), "netshim_index_resyncs_total"); n != 2 {
		t.Errorf("%d resync series, want ok and error", n)
	}
}

func TestEventTime(t *testing.T) {
	at := time.Unix(1700000000, 123)
	for _, tc := range []struct {
		name string
		m    events.Message
		want time.Time
	}{
		{"nanoseconds", events.Message{TimeNano: at.UnixNano(), Time: at.Unix()}, at},
		{"seconds only", events.Message{Time: at.Unix()}, time.Unix(at.Unix(), 0)},
		{"none", events.Message{}, time.Time{}},
	} {
		if got := eventTime(tc.m); !got.Equal(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
