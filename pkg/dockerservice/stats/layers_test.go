package stats

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/storage"
	"github.com/docker/docker/api/types/system"

	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/layerusage"
)

// benchPods is the node of the benchmarks: a container each.
const benchPods = 50

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
			if got := WritableLayerDir(c); got != tt.want {
				t.Errorf("writableLayerDir = %q, want %q", got, tt.want)
			}
		})
	}
}

// On the containerd image store, inspect has no layer: it is found in
// the running container's mountinfo, for a pid that is the container's.
func TestLayerUsageFindsASnapshotterLayerInMountinfo(t *testing.T) {
	proc := t.TempDir()
	upper := t.TempDir()
	st := store.New()
	l := NewLayers(nil, st, layerusage.Options{})
	l.procRoot = proc
	const id = "3f9a6c1e0d2b4a5f8e7c6b5a4d3c2b1a0f9e8d7c6b5a4d3c2b1a0f9e8d7c6b5a"
	// The shape of a Docker 29 container's mountinfo (pkg/layerusage).
	mountinfo := "122 71 0:42 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/docker/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/5213/fs,upperdir=" + upper + ",workdir=/var/lib/docker/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/5214/work\n" +
		"123 122 0:45 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
	writeProc := func(pid int, cgroup string) {
		testutil.WriteFiles(t, map[string]string{
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

// BenchmarkLayerSync is the measured set following the index every 2 s on
// a node of benchPods pods (a container each) where nothing changes:
// "changed" is a sync after a change of the store (what every sync did
// before), "unchanged" one with nothing new in the store.
func BenchmarkLayerSync(b *testing.B) {
	st := store.New()
	for i := range benchPods {
		st.Put(&store.Record{ID: strconv.Itoa(i), Kind: store.KindContainer, State: store.StateRunning, Pid: 100 + i,
			WritableLayerDir: filepath.Join("/var/lib/docker/overlay2", strconv.Itoa(i), "diff")})
	}
	l := NewLayers(func(context.Context) (system.Info, error) { return system.Info{}, nil }, st, layerusage.Options{})
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
