package dockerservice

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/storage"
	"github.com/docker/docker/api/types/system"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/dockerservice/stats"
	"github.com/netshim/netshim/pkg/layerusage"
)

// startWithLayer creates and starts a container whose inspect reports
// layer as its writable layer (overlay2's UpperDir).
func (e *podEnv) startWithLayer(t *testing.T, name, layer string) string {
	t.Helper()
	id := e.create(t, ctrConfig(name))
	e.docker.Do(func(s *fakedocker.State) {
		s.Containers[id].GraphDriver = storage.DriverData{Name: "overlay2", Data: map[string]string{"UpperDir": layer}}
	})
	e.start(t, id)
	e.ds.containers.layers.SyncNow()
	if rec, _ := e.ds.store().Get(id); rec.WritableLayerDir != layer {
		t.Fatalf("record's layer %q, want %q", rec.WritableLayerDir, layer)
	}
	return id
}

func (e *podEnv) containerStats(t *testing.T, id string) *runtimeapi.ContainerStats {
	t.Helper()
	resp, err := e.ds.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatalf("ContainerStats: %v", err)
	}
	return resp.Stats
}

func TestContainerStatsReportsTheMeasuredWritableLayer(t *testing.T) {
	e := newPodEnv(t)
	r := fakedocker.NewRoot(t)
	e.docker.Do(func(s *fakedocker.State) {
		s.Info = system.Info{DockerRootDir: r.Dir, Driver: "overlay2"}
	})
	layer := filepath.Join(r.DriverDir, r.ContainerLayer, "diff")
	fakedocker.WriteSizedFile(t, filepath.Join(layer, "data", "1mib"), 1<<20)
	id := e.startWithLayer(t, "writer", layer)
	idle := e.create(t, ctrConfig("idle")) // no layer known

	var wl *runtimeapi.FilesystemUsage
	testutil.Eventually(t, "the writable layer to be measured and its filesystem known", func() bool {
		wl = e.containerStats(t, id).GetWritableLayer()
		return wl.GetFsId() != nil
	})
	// diff, tmp, out (from the fake root), data, 1mib.
	if wl.GetUsedBytes().GetValue() < 1<<20 || wl.GetInodesUsed().GetValue() != 5 {
		t.Errorf("writable layer %v, want >= 1 MiB and 5 inodes", wl)
	}
	if ts := time.Unix(0, wl.Timestamp); time.Since(ts) > time.Minute || ts.After(time.Now()) {
		t.Errorf("timestamp %v is not when it was measured", ts)
	}
	// The filesystem ImageFsInfo reports for containers.
	if mp, want := wl.FsId.GetMountpoint(), e.imageFsInfo(t).ContainerFilesystems[0].FsId.GetMountpoint(); mp != want || mp != r.DriverDir {
		t.Errorf("fs_id %q, want ImageFsInfo's container filesystem %q (the driver dir %q)", mp, want, r.DriverDir)
	}

	list, err := e.ds.ListContainerStats(context.Background(), &runtimeapi.ListContainerStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range list.Stats {
		switch st.Attributes.Id {
		case id:
			if st.WritableLayer.GetUsedBytes().GetValue() != wl.GetUsedBytes().GetValue() {
				t.Errorf("listed writable layer %v, want %v", st.WritableLayer, wl)
			}
		case idle:
			if st.WritableLayer != nil {
				t.Errorf("a container with no known layer reports %v", st.WritableLayer)
			}
		}
	}

	// Removed: no longer measured.
	if _, err := e.ds.RemoveContainer(context.Background(), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	e.ds.containers.layers.SyncNow()
	testutil.Eventually(t, "the removed container's layer to be forgotten", func() bool {
		_, ok := e.ds.containers.layers.Tracked(id)
		return !ok
	})
}

// ContainerStats answers at once while the layer's walk is stuck.
func TestContainerStatsNeverWaitsForALayerWalk(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	e := newPodEnv(t, func(cfg *Config) {
		cfg.LayerUsage.Step = func(ctx context.Context, _ *layerusage.Walk, _ layerusage.Budget) (bool, error) {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return false, ctx.Err()
		}
	})
	defer close(release)
	id := e.startWithLayer(t, "stuck", t.TempDir())
	select {
	case <-entered:
	case <-time.After(testutil.EventuallyTimeout):
		t.Fatal("the layer's walk never started")
	}
	done := make(chan *runtimeapi.ContainerStats, 1)
	go func() {
		resp, err := e.ds.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			t.Error(err)
		}
		done <- resp.GetStats()
	}()
	select {
	case st := <-done:
		if st.GetWritableLayer() != nil {
			t.Errorf("writable layer %v before any measurement", st.GetWritableLayer())
		}
	case <-time.After(testutil.EventuallyTimeout):
		t.Fatal("ContainerStats waited for a walk")
	}
}

// The container filesystem's mountpoint is the same string for
// ImageFsInfo and for every writable layer, whichever the image store,
// as kubelet tells image and container filesystems apart by it.
func TestContainerFsMountpointMatchesImageFsInfo(t *testing.T) {
	r := fakedocker.NewRoot(t)
	for _, tt := range []struct {
		name string
		info system.Info
		want string
	}{
		{"overlay2", system.Info{DockerRootDir: r.Dir, Driver: "overlay2"}, r.DriverDir},
		{"containerd store", system.Info{DockerRootDir: r.Dir, Driver: "overlayfs", DriverStatus: [][2]string{{"driver-type", "io.containerd.snapshotter.v1"}}}, r.Dir},
		{"driver without dir", system.Info{DockerRootDir: r.Dir, Driver: "btrfs"}, r.Dir},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t)
			e.docker.Do(func(s *fakedocker.State) { s.Info = tt.info })
			got := stats.ContainerFsMountpoint(tt.info)
			if fs := e.imageFsInfo(t).ContainerFilesystems[0].FsId.GetMountpoint(); got != fs || got != tt.want {
				t.Errorf("containerFsMountpoint %q, ImageFsInfo %q, want both %q", got, fs, tt.want)
			}
		})
	}
}

// On the containerd image store, ImageFsInfo's container filesystem is
// the sum of the measured writable layers.
func TestImageFsInfoSumsMeasuredLayersOnTheContainerdStore(t *testing.T) {
	e := newPodEnv(t)
	root := t.TempDir()
	e.docker.Do(func(s *fakedocker.State) {
		s.Info = system.Info{DockerRootDir: root, Driver: "overlayfs", DriverStatus: [][2]string{{"driver-type", "io.containerd.snapshotter.v1"}}}
	})
	a, b := t.TempDir(), t.TempDir()
	fakedocker.WriteSizedFile(t, filepath.Join(a, "f"), 256<<10)
	fakedocker.WriteSizedFile(t, filepath.Join(b, "f"), 512<<10)
	ids := []string{e.startWithLayer(t, "a", a), e.startWithLayer(t, "b", b)}
	var sum uint64
	testutil.Eventually(t, "both layers measured", func() bool {
		sum = 0
		for _, id := range ids {
			wl := e.containerStats(t, id).GetWritableLayer()
			if wl == nil {
				return false
			}
			sum += wl.GetUsedBytes().GetValue()
		}
		return true
	})
	c := e.imageFsInfo(t).ContainerFilesystems[0]
	if got := c.GetUsedBytes().GetValue(); got != sum || got < 768<<10 {
		t.Errorf("container filesystem %d bytes, want the layers' sum %d", got, sum)
	}
	if c.InodesUsed != nil {
		t.Errorf("container filesystem inodes %v, want unknown like the image filesystem's", c.InodesUsed)
	}
}
