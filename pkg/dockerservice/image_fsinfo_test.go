package dockerservice

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/system"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/testutil"
)

// fakeDockerRoot lays out a Docker root dir with overlay2: one image
// layer (registered in the layer database), one layer still being pulled
// (not registered yet), one container's writable and init layers, and
// overlay2's "l" directory.
type fakeDockerRoot struct {
	root, driverDir                 string
	imageLayer, pulling, containerL string
}

// writeSizedFile writes size bytes to path, making its directory.
func writeSizedFile(t *testing.T, path string, size int) {
	t.Helper()
	writeTextFile(t, path, strings.Repeat("x", size))
}

func writeTextFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newFakeDockerRoot(t *testing.T) *fakeDockerRoot {
	t.Helper()
	r := &fakeDockerRoot{root: t.TempDir()}
	r.driverDir = filepath.Join(r.root, "overlay2")
	r.imageLayer = strings.Repeat("a", 64)
	r.pulling = strings.Repeat("b", 64)
	r.containerL = strings.Repeat("c", 64)
	layerdb := filepath.Join(r.root, "image", "overlay2", "layerdb")

	writeSizedFile(t, filepath.Join(r.driverDir, r.imageLayer, "diff", "bin", "busybox"), 64<<10)
	// A hard link is counted once.
	if err := os.Link(filepath.Join(r.driverDir, r.imageLayer, "diff", "bin", "busybox"), filepath.Join(r.driverDir, r.imageLayer, "diff", "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	writeTextFile(t, filepath.Join(layerdb, "sha256", strings.Repeat("1", 64), "cache-id"), r.imageLayer)
	writeSizedFile(t, filepath.Join(r.driverDir, r.pulling, "diff", "partial"), 16<<10)

	writeSizedFile(t, filepath.Join(r.driverDir, r.containerL, "diff", "tmp", "out"), 32<<10)
	if err := os.MkdirAll(filepath.Join(r.driverDir, r.containerL+"-init"), 0o755); err != nil {
		t.Fatal(err)
	}
	mount := filepath.Join(layerdb, "mounts", strings.Repeat("d", 64))
	writeTextFile(t, filepath.Join(mount, "mount-id"), r.containerL)
	writeTextFile(t, filepath.Join(mount, "init-id"), r.containerL+"-init")

	if err := os.MkdirAll(filepath.Join(r.driverDir, "l"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../"+r.imageLayer+"/diff", filepath.Join(r.driverDir, "l", "SHORTLINK")); err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *testEnv) imageFsInfo(t *testing.T) *runtimeapi.ImageFsInfoResponse {
	t.Helper()
	resp, err := e.ds.ImageFsInfo(context.Background(), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatalf("ImageFsInfo: %v", err)
	}
	if len(resp.ImageFilesystems) != 1 || len(resp.ContainerFilesystems) != 1 {
		t.Fatalf("ImageFsInfo = %v, want one image and one container filesystem", resp)
	}
	return resp
}

func (e *testEnv) setFsTTL(ttl time.Duration) {
	c := &e.ds.imageState().fs
	c.mu.Lock()
	c.ttl = ttl
	c.mu.Unlock()
}

func TestImageFsInfoMeasuresImageAndContainerLayers(t *testing.T) {
	e := newTestEnv(t)
	r := newFakeDockerRoot(t)
	e.docker.mu.Lock()
	e.docker.info = system.Info{DockerRootDir: r.root, Driver: "overlay2"}
	e.docker.mu.Unlock()
	e.setFsTTL(time.Hour)

	before := time.Now()
	resp := e.imageFsInfo(t)
	img, ctr := resp.ImageFilesystems[0], resp.ContainerFilesystems[0]
	for _, u := range []*runtimeapi.FilesystemUsage{img, ctr} {
		if u.FsId.GetMountpoint() != r.driverDir {
			t.Errorf("mountpoint %q, want the driver dir %q (image and container layers share it)", u.FsId.GetMountpoint(), r.driverDir)
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
	e.docker.resetCalls()
	writeSizedFile(t, filepath.Join(r.driverDir, r.containerL, "diff", "tmp", "more"), 256<<10)
	if again := e.imageFsInfo(t); again.ContainerFilesystems[0].Timestamp != ctr.Timestamp || e.docker.count("Info") != 0 {
		t.Errorf("second call within the TTL measured again (Info calls %d)", e.docker.count("Info"))
	}

	// Stale: answered at once from the cache, refreshed in the background.
	// Image layers registered in the layer database are not walked again;
	// the writable layer and the layer being pulled are.
	writeSizedFile(t, filepath.Join(r.driverDir, r.imageLayer, "diff", "unseen"), 128<<10)
	writeSizedFile(t, filepath.Join(r.driverDir, r.pulling, "diff", "more"), 8<<10)
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
	e.docker.mu.Lock()
	e.docker.info = system.Info{DockerRootDir: root, Driver: "overlayfs"} // containerd image store: no <root>/overlayfs
	e.docker.mu.Unlock()
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
	e.docker.mu.Lock()
	e.docker.info = system.Info{DockerRootDir: root, Driver: "overlayfs", DriverStatus: [][2]string{{"driver-type", "io.containerd.snapshotter.v1"}}}
	e.docker.layersSize = 47606330
	e.docker.mu.Unlock()
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
	if _, err := e.ds.ImageFsInfo(context.Background(), &runtimeapi.ImageFsInfoRequest{}); err == nil {
		t.Errorf("ImageFsInfo with no Docker root dir: no error")
	}
}
