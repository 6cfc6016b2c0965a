package dockerservice

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/storage"
	"github.com/docker/docker/api/types/system"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/layerusage"
)

func TestWritableLayerDirFromInspect(t *testing.T) {
	const upper = "/var/lib/docker/overlay2/8f3a0d95b1b4/diff"
	for _, tt := range []struct {
		name   string
		driver storage.DriverData
		want   string
	}{
		{"overlay2", storage.DriverData{Name: "overlay2", Data: map[string]string{
			"LowerDir":  "/var/lib/docker/overlay2/8f3a0d95b1b4-init/diff:/var/lib/docker/overlay2/0c1e/diff",
			"MergedDir": "/var/lib/docker/overlay2/8f3a0d95b1b4/merged",
			"UpperDir":  upper,
			"WorkDir":   "/var/lib/docker/overlay2/8f3a0d95b1b4/work",
		}}, upper},
		// Docker 29 on the containerd image store: no GraphDriver data.
		{"containerd snapshotter", storage.DriverData{Name: "overlayfs"}, ""},
		{"relative", storage.DriverData{Name: "overlay2", Data: map[string]string{"UpperDir": "8f3a/diff"}}, ""},
		{"unclean", storage.DriverData{Name: "overlay2", Data: map[string]string{"UpperDir": "/var/lib/docker/overlay2/x/../y/diff/"}}, "/var/lib/docker/overlay2/y/diff"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{GraphDriver: tt.driver}}
			if got := writableLayerDir(c); got != tt.want {
				t.Errorf("writableLayerDir = %q, want %q", got, tt.want)
			}
		})
	}
}

// startWithLayer creates and starts a container whose inspect reports
// layer as its writable layer (overlay2's UpperDir).
func (e *podEnv) startWithLayer(t *testing.T, name, layer string) string {
	t.Helper()
	id := e.create(t, ctrConfig(name))
	e.docker.Do(func(s *fakedocker.State) {
		s.Containers[id].GraphDriver = storage.DriverData{Name: "overlay2", Data: map[string]string{"UpperDir": layer}}
	})
	e.start(t, id)
	e.ds.containers.layers.syncNow()
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
	e.ds.containers.layers.syncNow()
	testutil.Eventually(t, "the removed container's layer to be forgotten", func() bool {
		_, ok := e.ds.containers.layers.m.Tracked(id)
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

// On the containerd image store, inspect has no layer: it is found in
// the running container's mountinfo, for a pid that is the container's.
func TestLayerUsageFindsASnapshotterLayerInMountinfo(t *testing.T) {
	proc := t.TempDir()
	upper := t.TempDir()
	st := store.New()
	l := newLayerUsage(nil, st, layerusage.Options{})
	l.procRoot = proc
	const id = "3f9a6c1e0d2b4a5f8e7c6b5a4d3c2b1a0f9e8d7c6b5a4d3c2b1a0f9e8d7c6b5a"
	// The shape of a Docker 29 container's mountinfo (pkg/layerusage).
	mountinfo := "122 71 0:42 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/docker/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/5213/fs,upperdir=" + upper + ",workdir=/var/lib/docker/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/5214/work\n" +
		"123 122 0:45 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
	writeProc := func(pid int, cgroup string) {
		writeFiles(t, map[string]string{
			filepath.Join(proc, strconv.Itoa(pid), "cgroup"):    "12:memory:" + cgroup + "\n0::/\n",
			filepath.Join(proc, strconv.Itoa(pid), "mountinfo"): mountinfo,
		})
	}
	put := func(pid int) {
		st.Put(&store.Record{ID: id, Kind: store.KindContainer, State: store.StateRunning, Pid: pid})
	}

	// A pid now used by a process of another container: not read.
	writeProc(100, "/kubepods/pod1/someotherid")
	put(100)
	l.sync()
	if dir, ok := l.m.Tracked(id); ok {
		t.Fatalf("tracked %q from a process outside the container", dir)
	}
	if l.unresolved[id] != 100 {
		t.Errorf("unresolved %v, want the pid remembered", l.unresolved)
	}

	writeProc(200, "/kubepods/pod1/"+id)
	put(200)
	l.sync()
	if dir, _ := l.m.Tracked(id); dir != upper {
		t.Fatalf("tracked %q, want the root overlay's upperdir %q", dir, upper)
	}
	if _, ok := l.unresolved[id]; ok {
		t.Error("still marked unresolved")
	}
	// Exited: the snapshot is still there and still measured.
	st.Put(&store.Record{ID: id, Kind: store.KindContainer, State: store.StateExited})
	l.sync()
	if dir, _ := l.m.Tracked(id); dir != upper {
		t.Errorf("exited container: tracked %q, want %q", dir, upper)
	}
	// Sandboxes are not measured; removed containers are forgotten.
	st.Put(&store.Record{ID: "sandbox", Kind: store.KindSandbox, State: store.StateRunning, WritableLayerDir: upper})
	st.Delete(id)
	l.sync()
	if ids := l.m.IDs(); len(ids) != 0 {
		t.Errorf("tracked %v, want nothing", ids)
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
			got := containerFsMountpoint(tt.info)
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

// BenchmarkLayerSync is the measured set following the index every 2 s on
// a node of statsBenchPods pods (a container each) where nothing changes:
// "changed" is a sync after a change of the store (what every sync did
// before), "unchanged" one with nothing new in the store.
func BenchmarkLayerSync(b *testing.B) {
	st := store.New()
	for i := range statsBenchPods {
		st.Put(&store.Record{ID: strconv.Itoa(i), Kind: store.KindContainer, State: store.StateRunning, Pid: 100 + i,
			WritableLayerDir: filepath.Join("/var/lib/docker/overlay2", strconv.Itoa(i), "diff")})
	}
	l := newLayerUsage(func(context.Context) (system.Info, error) { return system.Info{}, nil }, st, layerusage.Options{})
	b.Run("changed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.synced = false
			l.sync()
		}
	})
	b.Run("unchanged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.sync()
		}
	})
}
