package fakedocker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Root is a Docker root dir laid out on disk as overlay2 keeps it, for the
// code that walks it (ImageFsInfo, the writable layers' usage): one image
// layer (registered in the layer database), one layer still being pulled
// (not registered yet), one container's writable and init layers, and
// overlay2's "l" directory. State.Info points the engine at it:
// Info{DockerRootDir: r.Dir, Driver: "overlay2"}.
type Root struct {
	// Dir is the root dir, DriverDir its overlay2 directory.
	Dir, DriverDir string
	// ImageLayer, Pulling and ContainerLayer are the names of the layer
	// directories under DriverDir (the container's init layer is
	// ContainerLayer+"-init").
	ImageLayer, Pulling, ContainerLayer string
}

// WriteSizedFile writes size bytes to path, making its directory.
func WriteSizedFile(t testing.TB, path string, size int) {
	t.Helper()
	WriteTextFile(t, path, strings.Repeat("x", size))
}

// WriteTextFile writes text to path, making its directory.
func WriteTextFile(t testing.TB, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// NewRoot lays out a root dir in a test's temporary directory.
func NewRoot(t testing.TB) *Root {
	t.Helper()
	r := &Root{Dir: t.TempDir()}
	r.DriverDir = filepath.Join(r.Dir, "overlay2")
	r.ImageLayer = strings.Repeat("a", 64)
	r.Pulling = strings.Repeat("b", 64)
	r.ContainerLayer = strings.Repeat("c", 64)
	layerdb := filepath.Join(r.Dir, "image", "overlay2", "layerdb")

	WriteSizedFile(t, filepath.Join(r.DriverDir, r.ImageLayer, "diff", "bin", "busybox"), 64<<10)
	// A hard link is counted once.
	if err := os.Link(filepath.Join(r.DriverDir, r.ImageLayer, "diff", "bin", "busybox"), filepath.Join(r.DriverDir, r.ImageLayer, "diff", "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	WriteTextFile(t, filepath.Join(layerdb, "sha256", strings.Repeat("1", 64), "cache-id"), r.ImageLayer)
	WriteSizedFile(t, filepath.Join(r.DriverDir, r.Pulling, "diff", "partial"), 16<<10)

	WriteSizedFile(t, filepath.Join(r.DriverDir, r.ContainerLayer, "diff", "tmp", "out"), 32<<10)
	if err := os.MkdirAll(filepath.Join(r.DriverDir, r.ContainerLayer+"-init"), 0o755); err != nil {
		t.Fatal(err)
	}
	mount := filepath.Join(layerdb, "mounts", strings.Repeat("d", 64))
	WriteTextFile(t, filepath.Join(mount, "mount-id"), r.ContainerLayer)
	WriteTextFile(t, filepath.Join(mount, "init-id"), r.ContainerLayer+"-init")

	if err := os.MkdirAll(filepath.Join(r.DriverDir, "l"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../"+r.ImageLayer+"/diff", filepath.Join(r.DriverDir, "l", "SHORTLINK")); err != nil {
		t.Fatal(err)
	}
	return r
}

// AddContainerLayers adds a container's writable and init layers, and its
// entry in the layer database, the way Docker's create does; the init
// layer holds the files Docker puts in every container.
func (r *Root) AddContainerLayers(t testing.TB, container, mountID string) {
	t.Helper()
	for _, f := range []string{"etc/hosts", "etc/hostname", "etc/resolv.conf", ".dockerenv", "dev/console"} {
		WriteTextFile(t, filepath.Join(r.DriverDir, mountID+"-init", "diff", f), "x")
	}
	for _, d := range []string{filepath.Join(mountID, "diff"), filepath.Join(mountID, "work", "work")} {
		if err := os.MkdirAll(filepath.Join(r.DriverDir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mount := filepath.Join(r.Dir, "image", "overlay2", "layerdb", "mounts", container)
	WriteTextFile(t, filepath.Join(mount, "mount-id"), mountID)
	WriteTextFile(t, filepath.Join(mount, "init-id"), mountID+"-init")
}
