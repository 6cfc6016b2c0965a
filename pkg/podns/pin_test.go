package podns

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("pinning namespaces needs root (CAP_SYS_ADMIN)")
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestPinAndRemove(t *testing.T) {
	requireRoot(t)
	p := NewPinner(filepath.Join(t.TempDir(), "netns"))
	paths, err := p.Pin("pod-a", Net, IPC, UTS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, path := range paths {
			_ = p.Remove(path)
		}
	})
	for kind, path := range paths {
		if path != p.Path("pod-a", kind) || !p.Owns(path) {
			t.Errorf("%s pinned at %s, want %s", kind, path, p.Path("pod-a", kind))
		}
		if err := Verify(path, kind); err != nil {
			t.Errorf("Verify(%s, %s): %v", path, kind, err)
		}
		// A new namespace, not this process's.
		if inode(t, path) == inode(t, "/proc/self/ns/"+string(kind)) {
			t.Errorf("%s: the pinned namespace is this process's own", kind)
		}
	}
	if err := Verify(paths[Net], UTS); err == nil || !strings.Contains(err.Error(), "not a uts namespace") {
		t.Errorf("Verify(net file, uts) = %v, want a type mismatch", err)
	}
	// The pinning thread is gone; this goroutine's namespace is unchanged.
	if _, err := p.Pin("pod-a", Net); err == nil {
		t.Error("pinning over an existing name succeeded")
	}
	list, err := p.List()
	if err != nil || len(list) != 3 {
		t.Errorf("List = %v, %v; want the 3 files", list, err)
	}
	for _, path := range paths {
		if err := p.Remove(path); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after Remove: %v", path, err)
		}
		// Idempotent.
		if err := p.Remove(path); err != nil {
			t.Errorf("second Remove(%s): %v", path, err)
		}
	}
}

func TestPinRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "netns")
	p := NewPinner(dir)
	for _, name := range []string{"", "a/b", "a,b", "a=b", ".."} {
		if _, err := p.Pin(name, Net); err == nil {
			t.Errorf("Pin(%q) succeeded", name)
		}
	}
	if _, err := p.Pin("x", Kind("pid")); err == nil {
		t.Error("Pin(pid) succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused Pins left %d files", len(entries))
	}
	for _, path := range []string{"/etc/passwd", dir, filepath.Join(dir, "sub", "x"), filepath.Join(dir, "..", "x"), "rel"} {
		if err := p.Remove(path); err == nil {
			t.Errorf("Remove(%q) accepted a path outside the directory", path)
		}
	}
}

func TestVerifyRefuses(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"/proc/1/ns/net", "a process's namespace"},
		{"/proc/self/ns/net", "a process's namespace"},
		{"relative/x", "absolute, clean"},
		{"/run/../proc/1/ns/net", "absolute, clean"},
		{file, "not a namespace file"},
		{filepath.Join(t.TempDir(), "missing"), "no such file"},
	} {
		if err := Verify(tc.path, Net); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Verify(%q) = %v, want an error containing %q", tc.path, err, tc.want)
		}
	}
}

// TestPinnedNetnsIsUsable: a namespace no process ever lived in can be
// entered, and holds only its loopback device, as CNI finds it.
func TestPinnedNetnsIsUsable(t *testing.T) {
	requireRoot(t)
	p := NewPinner(t.TempDir())
	paths, err := p.Pin("pod-b", Net)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove(paths[Net])
	type answer struct {
		names []string
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread leaves its netns
		fd, err := unix.Open(paths[Net], unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- answer{err: err}
			return
		}
		ifs, err := net.Interfaces()
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		done <- answer{names, err}
	}()
	a := <-done
	if a.err != nil {
		t.Fatalf("entering the pinned netns: %v", a.err)
	}
	if len(a.names) != 1 || a.names[0] != "lo" {
		t.Errorf("links in a new pinned netns = %q, want only lo", a.names)
	}
}

func TestMountShmAndRemove(t *testing.T) {
	requireRoot(t)
	p := NewPinner(filepath.Join(t.TempDir(), "netns"))
	path, err := p.MountShm("pod-s", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove(path) })
	if path != p.ShmPath("pod-s") || !p.Owns(path) {
		t.Errorf("path %s: want %s, owned", path, p.ShmPath("pod-s"))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		t.Errorf("filesystem type %#x, want tmpfs", st.Type)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("mode %v (%v): want 1777, as /dev/shm", fi.Mode(), err)
	}
	if got, err := p.List(); err != nil || len(got) != 1 || got[0] != path {
		t.Errorf("List = %v, %v; want the shm directory", got, err)
	}
	if _, err := p.MountShm("pod-s", 1<<20); err == nil {
		t.Error("a second mount on an existing pod's /dev/shm was accepted")
	}
	if err := p.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Remove: %v", err)
	}
	if err := p.Remove(path); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, err := p.MountShm("a/b", 1); err == nil {
		t.Error("a name with a slash was accepted")
	}
}
