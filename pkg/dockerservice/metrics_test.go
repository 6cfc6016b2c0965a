package dockerservice

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/metrics"
)

// gaugeValue is the value of the gauge series of family whose labels
// include labels, or -1 if there is none.
func gaugeValue(t *testing.T, m *metrics.Metrics, family string, labels map[string]string) float64 {
	t.Helper()
	if v, ok := testutil.MetricValue(t, m.Registry(), family, labels); ok {
		return v
	}
	return -1
}

func TestMetricsCountSandboxesAndContainersByState(t *testing.T) {
	m := metrics.New()
	e := newTestEnv(t, func(c *Config) { c.Metrics = m })
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	cfg := podConfig("p")
	cfg.LogDirectory = filepath.Join(t.TempDir(), "pods", "p")
	sb := e.run(t, cfg)
	var ids []string
	for _, name := range []string{"a", "b"} {
		c := ctrConfig(name)
		c.LogPath = ""
		r, err := e.ds.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: c, SandboxConfig: cfg})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ContainerId)
	}
	if _, err := e.ds.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: ids[0]}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		family, state string
		want          float64
	}{
		{"netshim_sandboxes", "running", 1},
		{"netshim_containers", "running", 1},
		{"netshim_containers", "created", 1},
		{"netshim_containers", "exited", -1}, // no series for an empty state
	} {
		if got := gaugeValue(t, m, tc.family, map[string]string{"state": tc.state}); got != tc.want {
			t.Errorf("%s{state=%q} = %v, want %v", tc.family, tc.state, got, tc.want)
		}
	}
}

func TestReadyOnceSynced(t *testing.T) {
	ds := newUnsyncedService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ds.Start(ctx)
	if ready, reason := ds.Ready(); ready || !strings.Contains(reason, "not been read yet") {
		t.Errorf("unsynced: Ready() = %v, %q; want false with the reason", ready, reason)
	}
	e := newTestEnv(t)
	if ready, reason := e.ds.Ready(); !ready {
		t.Errorf("synced: Ready() = false (%s)", reason)
	}
}
