package engine

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/metrics"
)

func TestInstrumentNilMetricsIsTheClient(t *testing.T) {
	f := fakedocker.New()
	if got := Instrument(f, nil); got != Client(f) {
		t.Errorf("with nil metrics: got a %T, want the client itself", got)
	}
}

func TestInstrumentTimesEveryCall(t *testing.T) {
	f := fakedocker.New()
	f.Do(func(s *fakedocker.State) { s.PingErr = errors.New("engine down") })
	m := metrics.New()
	c := Instrument(f, m)
	ctx := context.Background()

	calls := map[string]func(){
		"Ping":          func() { _, _ = c.Ping(ctx) },
		"ServerVersion": func() { _, _ = c.ServerVersion(ctx) },
		"Info":          func() { _, _ = c.Info(ctx) },
		"DiskUsage":     func() { _, _ = c.DiskUsage(ctx, types.DiskUsageOptions{}) },
		"ImageInspect":  func() { _, _ = c.ImageInspect(ctx, "busybox") },
		"ImagePull": func() {
			if rc, err := c.ImagePull(ctx, "busybox", image.PullOptions{}); err == nil {
				rc.Close()
			}
		},
		"ImageList":   func() { _, _ = c.ImageList(ctx, image.ListOptions{}) },
		"ImageRemove": func() { _, _ = c.ImageRemove(ctx, "busybox", image.RemoveOptions{}) },
		"ContainerCreate": func() {
			_, _ = c.ContainerCreate(ctx, &container.Config{Image: "busybox"}, &container.HostConfig{}, nil, nil, "c1")
		},
		"ContainerStart":   func() { _ = c.ContainerStart(ctx, "c1", container.StartOptions{}) },
		"ContainerStop":    func() { _ = c.ContainerStop(ctx, "c1", container.StopOptions{}) },
		"ContainerInspect": func() { _, _ = c.ContainerInspect(ctx, "c1") },
		"ContainerList":    func() { _, _ = c.ContainerList(ctx, container.ListOptions{}) },
		"ContainerUpdate":  func() { _, _ = c.ContainerUpdate(ctx, "c1", container.UpdateConfig{}) },
		"ContainerLogs": func() {
			if rc, err := c.ContainerLogs(ctx, "c1", container.LogsOptions{}); err == nil {
				rc.Close()
			}
		},
		"ContainerExecCreate": func() { _, _ = c.ContainerExecCreate(ctx, "c1", container.ExecOptions{Cmd: []string{"true"}}) },
		"ContainerExecAttach": func() {
			if r, err := c.ContainerExecAttach(ctx, "no-such-exec", container.ExecAttachOptions{}); err == nil {
				r.Close()
			}
		},
		"ContainerExecInspect": func() { _, _ = c.ContainerExecInspect(ctx, "no-such-exec") },
		"ContainerRemove":      func() { _ = c.ContainerRemove(ctx, "c1", container.RemoveOptions{Force: true}) },
	}
	// Every method of Client that calls the engine is in the table:
	// all but ClientVersion and NegotiateAPIVersionPing (no call) and
	// Events (a stream as long as the daemon).
	if want := reflect.TypeFor[Client]().NumMethod() - 3; len(calls) != want {
		t.Fatalf("table has %d calls, Client has %d timed methods", len(calls), want)
	}
	for name, call := range calls {
		call()
		if n := testutil.CollectAndCount(m.Registry(), "netshim_docker_call_duration_seconds"); n == 0 {
			t.Fatalf("%s: no series", name)
		}
	}
	if n := testutil.CollectAndCount(m.Registry(), "netshim_docker_call_duration_seconds"); n != len(calls) {
		t.Errorf("%d call series, want one per call (%d)", n, len(calls))
	}
	if got := dockerErrors(t, m, "Ping"); got != 1 {
		t.Errorf("Ping errors = %v, want 1 (pingErr)", got)
	}
	inspectErrs := dockerErrors(t, m, "ContainerInspect")
	before := f.Count("ContainerInspect")
	// Not "c1": the table runs in map order, so c1 may have been created
	// after its removal.
	if _, err := c.ContainerInspect(ctx, "no-such-container"); err == nil {
		t.Fatal("inspect of a missing container succeeded")
	}
	if f.Count("ContainerInspect") != before+1 {
		t.Error("the wrapper did not reach the client")
	}
	if got := dockerErrors(t, m, "ContainerInspect"); got != inspectErrs+1 {
		t.Errorf("ContainerInspect errors = %v, want %v", got, inspectErrs+1)
	}
}

// dockerErrors is netshim_docker_call_errors_total{call=call}.
func dockerErrors(t *testing.T, m *metrics.Metrics, call string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "netshim_docker_call_errors_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			if s.GetLabel()[0].GetValue() == call {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}
