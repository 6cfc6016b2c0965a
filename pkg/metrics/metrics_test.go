package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	nstestutil "github.com/netshim/netshim/internal/testutil"
)

func TestObserveFeedsEachFamily(t *testing.T) {
	m := New()
	m.ObserveRPC("RunPodSandbox", "OK", 20*time.Millisecond)
	m.ObserveRPC("RunPodSandbox", "Unavailable", time.Millisecond)
	m.ObserveCNI("ADD", "net1", 50*time.Millisecond, nil)
	m.ObserveCNI("DEL", "net1", time.Millisecond, errors.New("plugin failed"))
	m.ObserveDockerCall("ContainerCreate", time.Millisecond, nil)
	m.ObserveDockerCall("ContainerStart", time.Millisecond, errors.New("no such image"))
	now := time.Now()
	m.IndexEventApplied(now.Add(-2*time.Millisecond), now)
	m.IndexEventApplied(now.Add(time.Second), now) // skewed: counted, no lag
	m.IndexResynced(nil)
	m.IndexResynced(errors.New("listing failed"))
	m.IndexResynced(nil)
	m.AddTeardownPending(1)
	m.AddTeardownPending(1)
	m.AddTeardownPending(-1)
	m.GCAttachmentReleased()
	m.LogFollowerRestarted()
	m.LogFollowerRestarted()

	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"cni errors DEL", testutil.ToFloat64(m.cniErrors.WithLabelValues("DEL", "net1")), 1},
		{"cni errors ADD", testutil.ToFloat64(m.cniErrors.WithLabelValues("ADD", "net1")), 0},
		{"docker errors start", testutil.ToFloat64(m.dockerErrors.WithLabelValues("ContainerStart")), 1},
		{"index events", testutil.ToFloat64(m.indexEvents), 2},
		{"resyncs ok", testutil.ToFloat64(m.indexResyncs.WithLabelValues("ok")), 2},
		{"resyncs error", testutil.ToFloat64(m.indexResyncs.WithLabelValues("error")), 1},
		{"teardown pending", testutil.ToFloat64(m.teardownPending), 1},
		{"gc attachments", testutil.ToFloat64(m.gcAttachments), 1},
		{"follower restarts", testutil.ToFloat64(m.followerRestarts), 2},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	for _, tc := range []struct {
		family string
		series int
	}{
		{"netshim_rpc_duration_seconds", 2},
		{"netshim_cni_operation_duration_seconds", 2},
		{"netshim_docker_call_duration_seconds", 2},
		{"netshim_index_loop_lag_seconds", 1},
	} {
		if n := testutil.CollectAndCount(m.reg, tc.family); n != tc.series {
			t.Errorf("%s has %d series, want %d", tc.family, n, tc.series)
		}
	}
	// The lag histogram saw only the event with a sane timestamp.
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(`
# HELP netshim_index_loop_lag_seconds Time from a Docker event (its timestamp) to its application to the container index.
# TYPE netshim_index_loop_lag_seconds histogram
netshim_index_loop_lag_seconds_bucket{le="0.001"} 0
netshim_index_loop_lag_seconds_bucket{le="0.005"} 1
netshim_index_loop_lag_seconds_bucket{le="0.01"} 1
netshim_index_loop_lag_seconds_bucket{le="0.05"} 1
netshim_index_loop_lag_seconds_bucket{le="0.1"} 1
netshim_index_loop_lag_seconds_bucket{le="0.5"} 1
netshim_index_loop_lag_seconds_bucket{le="1"} 1
netshim_index_loop_lag_seconds_bucket{le="5"} 1
netshim_index_loop_lag_seconds_bucket{le="10"} 1
netshim_index_loop_lag_seconds_bucket{le="30"} 1
netshim_index_loop_lag_seconds_bucket{le="+Inf"} 1
netshim_index_loop_lag_seconds_sum 0.002
netshim_index_loop_lag_seconds_count 1
`), "netshim_index_loop_lag_seconds"); err != nil {
		t.Error(err)
	}
}

func TestStateCountsReadAtScrape(t *testing.T) {
	m := New()
	if n := testutil.CollectAndCount(m.reg, "netshim_sandboxes", "netshim_containers"); n != 0 {
		t.Fatalf("without a source: %d series, want 0", n)
	}
	calls := 0
	m.SetStateCounts(func() (map[string]int, map[string]int) {
		calls++
		return map[string]int{"running": 2, "exited": 1}, map[string]int{"running": 3}
	})
	if calls != 0 {
		t.Fatalf("source called %d times before any scrape", calls)
	}
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(`
# HELP netshim_containers Workload containers netshim knows, by state (created, running, exited, unknown).
# TYPE netshim_containers gauge
netshim_containers{state="running"} 3
# HELP netshim_sandboxes Pod sandboxes netshim knows, by the state of their infra container (created, running, exited, unknown).
# TYPE netshim_sandboxes gauge
netshim_sandboxes{state="exited"} 1
netshim_sandboxes{state="running"} 2
`), "netshim_sandboxes", "netshim_containers"); err != nil {
		t.Error(err)
	}
	if calls != 1 {
		t.Errorf("source called %d times for one scrape, want 1", calls)
	}
}

func TestSandboxModesReadAtScrape(t *testing.T) {
	m := New()
	m.SetStateCounts(func() (map[string]int, map[string]int) { return nil, nil })
	if n := testutil.CollectAndCount(m.reg, "netshim_sandbox_modes"); n != 0 {
		t.Fatalf("without a source: %d series, want 0", n)
	}
	calls := 0
	m.SetModeCounts(func() map[SandboxMode]int {
		calls++
		return map[SandboxMode]int{{"pauseless", "no-pause-needed"}: 4, {"pinned", "shared-pid-namespace"}: 1}
	})
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(`
# HELP netshim_sandbox_modes Pod sandboxes netshim knows, by the sandbox mode each was made in (docker, pinned, pauseless) and why it got that mode (--sandbox-netns=auto picks per pod).
# TYPE netshim_sandbox_modes gauge
netshim_sandbox_modes{mode="pauseless",reason="no-pause-needed"} 4
netshim_sandbox_modes{mode="pinned",reason="shared-pid-namespace"} 1
`), "netshim_sandbox_modes"); err != nil {
		t.Error(err)
	}
	if calls != 1 {
		t.Errorf("source called %d times for one scrape, want 1", calls)
	}
}

func TestRuntimeAndProcessCollectorsRegistered(t *testing.T) {
	m := New()
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if n := testutil.CollectAndCount(m.reg, name); n != 1 {
			t.Errorf("%s: %d series, want 1", name, n)
		}
	}
}

func TestNilMetricsIsNoOp(t *testing.T) {
	var m *Metrics
	m.ObserveRPC("Version", "OK", time.Second)
	m.ObserveCNI("ADD", "n", time.Second, errors.New("x"))
	m.ObserveDockerCall("Ping", time.Second, nil)
	m.IndexEventApplied(time.Now(), time.Now())
	m.IndexResynced(nil)
	m.AddTeardownPending(1)
	m.GCAttachmentReleased()
	m.LogFollowerRestarted()
	m.SetStateCounts(func() (map[string]int, map[string]int) { return nil, nil })
	m.SetModeCounts(func() map[SandboxMode]int { return nil })
	if m.Registry() != nil {
		t.Error("nil Metrics has a registry")
	}
	resp, err := m.UnaryInterceptor(context.Background(), "req", &grpc.UnaryServerInfo{FullMethod: "/x/Version"},
		func(context.Context, any) (any, error) { return "resp", nil })
	if resp != "resp" || err != nil {
		t.Errorf("nil interceptor: %v, %v", resp, err)
	}
	if err := m.StreamInterceptor(nil, nil, &grpc.StreamServerInfo{FullMethod: "/x/S"}, func(any, grpc.ServerStream) error { return nil }); err != nil {
		t.Errorf("nil stream interceptor: %v", err)
	}
}

func TestInterceptorsRecordMethodAndCode(t *testing.T) {
	m := New()
	unary := func(err error) {
		_, _ = m.UnaryInterceptor(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/RunPodSandbox"},
			func(context.Context, any) (any, error) { return nil, err })
	}
	unary(nil)
	unary(status.Error(codes.InvalidArgument, "bad"))
	unary(status.Error(codes.InvalidArgument, "bad"))
	_ = m.StreamInterceptor(nil, nil, &grpc.StreamServerInfo{FullMethod: "/runtime.v1.RuntimeService/GetContainerEvents"},
		func(any, grpc.ServerStream) error { return status.Error(codes.Canceled, "gone") })

	for _, tc := range []struct {
		rpc, code string
		count     uint64
	}{
		{"RunPodSandbox", "OK", 1},
		{"RunPodSandbox", "InvalidArgument", 2},
		{"GetContainerEvents", "Canceled", 1},
	} {
		if got := histogramCount(t, m, "netshim_rpc_duration_seconds", map[string]string{"rpc": tc.rpc, "code": tc.code}); got != tc.count {
			t.Errorf("%s %s: count %d, want %d", tc.rpc, tc.code, got, tc.count)
		}
	}
}

// histogramCount is the sample count of the series of family with labels,
// or 0 if there is none.
func histogramCount(t *testing.T, m *Metrics, family string, labels map[string]string) uint64 {
	t.Helper()
	v, _ := nstestutil.MetricValue(t, m.reg, family, labels)
	return uint64(v)
}
