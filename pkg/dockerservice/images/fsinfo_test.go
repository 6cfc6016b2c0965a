package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/system"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
)

func (e *testEnv) imageFsInfo(t *testing.T) *runtimeapi.ImageFsInfoResponse {
	t.Helper()
	resp, err := e.svc.ImageFsInfo(context.Background(), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatalf("ImageFsInfo: %v", err)
	}
	if len(resp.ImageFilesystems) != 1 || len(resp.ContainerFilesystems) != 1 {
		t.Fatalf("ImageFsInfo = %v, want one image and one container filesystem", resp)
	}
	return resp
}

// freshImageFsInfo is the answer of a measurement begun after the call
// (what the test changed before is in it), with no refresh left running
// into the test's next step; the TTL is left at an hour.
func (e *testEnv) freshImageFsInfo(t *testing.T) *runtimeapi.ImageFsInfoResponse {
	t.Helper()
	start := time.Now().UnixNano()
	e.setFsTTL(time.Nanosecond)
	testutil.Eventually(t, "a measurement begun after the change", func() bool {
		return e.imageFsInfo(t).ImageFilesystems[0].Timestamp >= start
	})
	e.setFsTTL(time.Hour)
	c := &e.svc.fs
	testutil.Eventually(t, "no refresh running", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.inflight == nil
	})
	return e.imageFsInfo(t)
}

// ageWritableLayers makes the remembered walks of writable layers d older.
func (e *testEnv) ageWritableLayers(d time.Duration) {
	c := &e.svc.fs
	c.mu.Lock()
	defer c.mu.Unlock()
	// A copy: a refresh under way reads the memo it started with.
	memo := *c.memo
	memo.writable = map[string]timedUsage{}
	for name, w := range c.memo.writable {
		w.at = w.at.Add(-d)
		memo.writable[name] = w
	}
	c.memo = &memo
}

func (e *testEnv) setFsTTL(ttl time.Duration) {
	c := &e.svc.fs
	c.mu.Lock()
	c.ttl = ttl
	c.mu.Unlock()
}

func TestImageFsInfoMeasuresImageAndContainerLayers(t *testing.T) {
	e := newTestEnv(t)
	r := fakedocker.NewRoot(t)
	e.docker.Do(func(s *fakedocker.State) {
		s.Info = system.Info{DockerRootDir: r.Dir, Driver: "overlay2"}
	})
	e.setFsTTL(time.Hour)

	before := time.Now()
	resp := e.imageFsInfo(t)
	img, ctr := resp.ImageFilesystems[0], resp.ContainerFilesystems[0]
	for _, u := range []*runtimeapi.FilesystemUsage{img, ctr} {
		if u.FsId.GetMountpoint() != r.DriverDir {
			t.Errorf("mountpoint %q, want the driver dir %q (image and container layers share it)", u.FsId.GetMountpoint(), r.DriverDir)
		}
		if ts := time.Unix(0, u.Timestamp); ts.Before(before.Add(-time.Second)) || ts.After(time.Now()) {
			t.Errorf("timestamp %v is not the time of the measurement (~%v)", ts, before)
		}
	}
	// Image: layer dir, diff, bin, busybox (its hard link sh once) = 4;
	// layer being pulled: dir, diff, partial = 3; l and its link = 2.
	if got := img.InodesUsed.GetValue(); got != 9 {
		t.Errorf("image fs inodes %d, want 9", got)
	}
	// Container: layer dir, diff, tmp, out = 4; init layer dir = 1.
	if got := ctr.InodesUsed.GetValue(); got != 5 {
		t.Errorf("container fs inodes %d, want 5", got)
	}
	if got := img.UsedBytes.GetValue(); got < (64+16)<<10 || got > 4<<20 {
		t.Errorf("image fs bytes %d, want ~80KiB (64KiB busybox counted once, 16KiB partial)", got)
	}
	if got := ctr.UsedBytes.GetValue(); got < 32<<10 || got > 1<<20 {
		t.Errorf("container fs bytes %d, want ~32KiB", got)
	}

	// Within the TTL: the same answer, no Docker call, no walk.
	e.docker.ResetCalls()
	fakedocker.WriteSizedFile(t, filepath.Join(r.DriverDir, r.ContainerLayer, "diff", "tmp", "more"), 256<<10)
	if again := e.imageFsInfo(t); again.ContainerFilesystems[0].Timestamp != ctr.Timestamp || e.docker.Count("Info") != 0 {
		t.Errorf("second call within the TTL measured again (Info calls %d)", e.docker.Count("Info"))
	}

	// Stale: answered at once from the cache, refreshed in the background.
	// Image layers registered in the layer database are not walked again;
	// the layer being pulled is, and the writable layer once its last
	// walk is old (TestImageFsInfoRemembersInitLayers: not before).
	fakedocker.WriteSizedFile(t, filepath.Join(r.DriverDir, r.ImageLayer, "diff", "unseen"), 128<<10)
	fakedocker.WriteSizedFile(t, filepath.Join(r.DriverDir, r.Pulling, "diff", "more"), 8<<10)
	e.ageWritableLayers(writableRemeasure)
	e.setFsTTL(time.Nanosecond)
	if stale := e.imageFsInfo(t); stale.ContainerFilesystems[0].Timestamp != ctr.Timestamp {
		t.Errorf("a stale measurement was not served while refreshing")
	}
	var fresh *runtimeapi.ImageFsInfoResponse
	testutil.Eventually(t, "a refreshed measurement", func() bool {
		fresh = e.imageFsInfo(t)
		return fresh.ContainerFilesystems[0].Timestamp != ctr.Timestamp
	})
	e.setFsTTL(time.Hour)
	fresh = e.imageFsInfo(t)
	if got := fresh.ContainerFilesystems[0].InodesUsed.GetValue(); got != 6 {
		t.Errorf("container fs inodes after a write %d, want 6", got)
	}
	if got := fresh.ContainerFilesystems[0].UsedBytes.GetValue(); got < (32+256)<<10 {
		t.Errorf("container fs bytes after a write %d, want ≥ 288KiB", got)
	}
	if got := fresh.ImageFilesystems[0].InodesUsed.GetValue(); got != 10 {
		t.Errorf("image fs inodes %d, want 10 (the pulling layer grew; the registered layer is cached)", got)
	}
}

func TestImageFsInfoWithoutDriverDir(t *testing.T) {
	e := newTestEnv(t)
	root := t.TempDir()
	e.docker.Do(func(s *fakedocker.State) {
		s.Info = system.Info{DockerRootDir: root, Driver: "overlayfs"} // containerd image store: no <root>/overlayfs
	})
	resp := e.imageFsInfo(t)
	if mp := resp.ImageFilesystems[0].FsId.GetMountpoint(); mp != root {
		t.Errorf("mountpoint %q, want the root dir %q", mp, root)
	}
}

// On the containerd image store (Docker 29's default) there is no driver
// directory to walk: image usage comes from Docker's disk usage API, the
// mountpoint is Docker's root dir, and inodes are reported unknown rather
// than zero.
func TestImageFsInfoOnTheContainerdImageStore(t *testing.T) {
	e := newTestEnv(t)
	root := t.TempDir()
	e.docker.Do(func(s *fakedocker.State) {
		s.Info = system.Info{DockerRootDir: root, Driver: "overlayfs", DriverStatus: [][2]string{{"driver-type", "io.containerd.snapshotter.v1"}}}
		s.LayersSize = 47606330
	})
	resp := e.imageFsInfo(t)
	img := resp.ImageFilesystems[0]
	if mp := img.FsId.GetMountpoint(); mp != root {
		t.Errorf("mountpoint %q, want the root dir %q", mp, root)
	}
	if got := img.GetUsedBytes().GetValue(); got != 47606330 {
		t.Errorf("image fs used bytes %d, want Docker's layers size 47606330", got)
	}
	if img.InodesUsed != nil {
		t.Errorf("image fs inodes %v, want unknown (nil)", img.InodesUsed)
	}
	if c := resp.ContainerFilesystems[0]; c.FsId.GetMountpoint() != root || c.UsedBytes == nil {
		t.Errorf("container fs %v, want mountpoint %q and a used-bytes value", c, root)
	}
}

func TestImageFsInfoFailsWithoutDockerInfo(t *testing.T) {
	e := newTestEnv(t) // the fake reports no root dir
	if _, err := e.svc.ImageFsInfo(context.Background(), &runtimeapi.ImageFsInfoRequest{}); err == nil {
		t.Errorf("ImageFsInfo with no Docker root dir: no error")
	}
}

// An init layer is written once at create: it is walked once, like an
// image layer, while the writable layer is walked every time; a new
// container's layers are measured at once, a removed one's forgotten.
func TestImageFsInfoRemembersInitLayers(t *testing.T) {
	e := newTestEnv(t)
	r := fakedocker.NewRoot(t)
	e.docker.Do(func(s *fakedocker.State) {
		s.Info = system.Info{DockerRootDir: r.Dir, Driver: "overlay2"}
	})
	e.setFsTTL(time.Hour)
	first := e.imageFsInfo(t).ContainerFilesystems[0].InodesUsed.GetValue()
	if first != 5 {
		t.Fatalf("container fs inodes %d, want 5 (see TestImageFsInfoMeasuresImageAndContainerLayers)", first)
	}

	refresh := func() uint64 {
		t.Helper()
		return e.freshImageFsInfo(t).ContainerFilesystems[0].InodesUsed.GetValue()
	}

	// Nothing writes to an init layer after create; were it walked
	// again, this file would count. The writable layer's new file counts
	// once its last walk is writableRemeasure old.
	fakedocker.WriteTextFile(t, filepath.Join(r.DriverDir, r.ContainerLayer+"-init", "never-written-by-docker"), "x")
	fakedocker.WriteTextFile(t, filepath.Join(r.DriverDir, r.ContainerLayer, "diff", "tmp", "new"), "x")
	if got := refresh(); got != first {
		t.Errorf("container fs inodes %d, want %d (the writable layer walked %v ago, remembered)", got, first, writableRemeasure)
	}
	e.ageWritableLayers(writableRemeasure)
	if got := refresh(); got != first+1 {
		t.Errorf("container fs inodes %d, want %d (the writable layer's new file; the init layer remembered)", got, first+1)
	}

	// A new container: layer dir, diff, work, work/work = 4; init layer
	// dir, diff, etc, 3 files in etc, dev, dev/console, .dockerenv = 9.
	r.AddContainerLayers(t, strings.Repeat("e", 64), strings.Repeat("f", 64))
	if got := refresh(); got != first+1+4+9 {
		t.Errorf("container fs inodes with a second container %d, want %d", got, first+1+4+9)
	}

	// The first container removed: its layers and layer database entry go.
	for _, p := range []string{
		filepath.Join(r.DriverDir, r.ContainerLayer), filepath.Join(r.DriverDir, r.ContainerLayer+"-init"),
		filepath.Join(r.Dir, "image", "overlay2", "layerdb", "mounts", strings.Repeat("d", 64)),
	} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	if got := refresh(); got != 4+9 {
		t.Errorf("container fs inodes after a removal %d, want %d", got, 4+9)
	}
	c := &e.svc.fs
	c.mu.Lock()
	_, kept := c.memo.layers[r.ContainerLayer+"-init"]
	nIDs := len(c.memo.ids)
	_, walkedKept := c.memo.writable[r.ContainerLayer]
	nWritable := len(c.memo.writable)
	c.mu.Unlock()
	if walkedKept || nWritable != 1 {
		t.Errorf("writable layer walks remembered: %d (the removed container's: %v), want 1 (the second container's)", nWritable, walkedKept)
	}
	if kept {
		t.Errorf("the removed container's init layer is still remembered")
	}
	if nIDs != 2 {
		t.Errorf("layer database entries remembered: %d, want 2 (one image layer, one container)", nIDs)
	}
}

// A layer database entry read while Docker is still writing it (its
// init-id not there yet) is used as far as it goes and read again next
// time, not remembered half.
func TestReadLayerIDsRemembersOnlyWholeEntries(t *testing.T) {
	dir := t.TempDir()
	fakedocker.WriteTextFile(t, filepath.Join(dir, "c1", "mount-id"), "m1")
	fakedocker.WriteTextFile(t, filepath.Join(dir, "c1", "init-id"), "m1-init")
	fakedocker.WriteTextFile(t, filepath.Join(dir, "c2", "mount-id"), "m2")
	learned := map[string][]string{}
	got := readLayerIDs(dir, nil, learned, "mount-id", "init-id")
	want := map[string]string{"m1": "mount-id", "m1-init": "init-id", "m2": "mount-id"}
	if len(got) != len(want) {
		t.Errorf("ids = %v, want %v", got, want)
	}
	for id, f := range want {
		if got[id] != f {
			t.Errorf("ids[%s] = %q, want %q", id, got[id], f)
		}
	}
	if _, ok := learned[filepath.Join(dir, "c2")]; ok || len(learned) != 1 {
		t.Errorf("learned %v, want c1 only", learned)
	}

	// Next time: c1 comes from what was learned (its files are not read:
	// changing them changes nothing), c2 is read again, now whole.
	fakedocker.WriteTextFile(t, filepath.Join(dir, "c1", "mount-id"), "changed")
	fakedocker.WriteTextFile(t, filepath.Join(dir, "c2", "init-id"), "m2-init")
	again := map[string][]string{}
	got = readLayerIDs(dir, learned, again, "mount-id", "init-id")
	if got["m1"] != "mount-id" || got["changed"] != "" || got["m2-init"] != "init-id" || len(again) != 2 {
		t.Errorf("second read: ids %v, learned %v", got, again)
	}
}

// BenchmarkImageFsMeasure is one refresh of ImageFsInfo's measurement on a
// node running benchPods pods (a pause and an app container each):
// "first" walks every layer, as a measurement without a memo does (and as
// every refresh walked the init layers before they were remembered),
// "next" is a refresh with the previous measurement's memo, which kubelet's
// polling (every 10 s) causes, within writableRemeasure of the last walk of
// the writable layers (2026-11-29: 3.3 ms when they were walked at every
// refresh, 0.42 ms now).
func BenchmarkImageFsMeasure(b *testing.B) {
	e := newTestEnv(b)
	r := fakedocker.NewRoot(b)
	for i := range 2 * benchPods {
		r.AddContainerLayers(b, fmt.Sprintf("%064d", i), fmt.Sprintf("%063dm", i))
	}
	e.docker.Do(func(s *fakedocker.State) {
		s.Info = system.Info{DockerRootDir: r.Dir, Driver: "overlay2"}
	})
	ctx := context.Background()
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := e.svc.measureFsUsage(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("next", func(b *testing.B) {
		_, memo, err := e.svc.measureFsUsage(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, _, err := e.svc.measureFsUsage(ctx, memo); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Docker's storage settings change only with a dockerd restart, which
// starts a new events stream: they are read once per stream, not at every
// refresh.
func TestImageFsInfoReadsStorageSettingsOncePerEngineSession(t *testing.T) {
	e := newTestEnv(t)
	r := fakedocker.NewRoot(t)
	e.docker.Do(func(s *fakedocker.State) {
		s.Info = system.Info{DockerRootDir: r.Dir, Driver: "overlay2"}
	})
	refresh := func() *runtimeapi.ImageFsInfoResponse {
		t.Helper()
		return e.freshImageFsInfo(t)
	}
	e.setFsTTL(time.Hour)
	e.docker.ResetCalls()
	e.imageFsInfo(t)
	refresh()
	refresh()
	if n := e.docker.Count("Info"); n != 1 {
		t.Errorf("three measurements in one engine session asked Info %d times, want 1", n)
	}

	// dockerd restarted with another root: the new stream's sync makes
	// the next measurement read the settings again.
	moved := fakedocker.NewRoot(t)
	e.docker.Do(func(s *fakedocker.State) {
		s.Info = system.Info{DockerRootDir: moved.Dir, Driver: "overlay2"}
	})
	e.engine.NextSession() // what the runtime side's onIndexSync does
	if mp := refresh().ImageFilesystems[0].FsId.GetMountpoint(); mp != moved.DriverDir {
		t.Errorf("after a new engine session: mountpoint %q, want the new root's %q", mp, moved.DriverDir)
	}
	if n := e.docker.Count("Info"); n != 2 {
		t.Errorf("Info asked %d times, want 2", n)
	}
}
