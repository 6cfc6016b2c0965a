package podns

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/netshim/netshim/pkg/procutil"
)

func mounts(t *testing.T) []procutil.Mount {
	t.Helper()
	m, err := procutil.ReadMountinfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mountsUnder are the mounts at or below dir, latest last.
func mountsUnder(t *testing.T, dir string) []procutil.Mount {
	t.Helper()
	var out []procutil.Mount
	for _, m := range mounts(t) {
		if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
			out = append(out, m)
		}
	}
	return out
}

// unmountAllOnCleanup unmounts, when the test ends, whatever it left
// mounted at or below dir (a failed test too), latest first.
func unmountAllOnCleanup(t *testing.T, dir string) {
	t.Cleanup(func() {
		for range 100 {
			ms := mountsUnder(t, dir)
			if len(ms) == 0 {
				return
			}
			if err := unix.Unmount(ms[len(ms)-1].MountPoint, unix.MNT_DETACH); err != nil {
				t.Errorf("cleanup: unmounting %s: %v", ms[len(ms)-1].MountPoint, err)
				return
			}
		}
		t.Errorf("cleanup: mounts are left under %s", dir)
	})
}

// requireUnbindableMount checks that dir is a mount point, once, and
// unbindable; it returns its mount ID.
func requireUnbindableMount(t *testing.T, dir string) int {
	t.Helper()
	var at []procutil.Mount
	for _, m := range mounts(t) {
		if m.MountPoint == dir {
			at = append(at, m)
		}
	}
	if len(at) != 1 {
		t.Fatalf("%d mounts at %s, want 1: %+v", len(at), dir, at)
	}
	if !slices.Contains(at[0].Optional, "unbindable") {
		t.Errorf("the mount at %s is not unbindable: optional fields %q", dir, at[0].Optional)
	}
	return at[0].ID
}

// requireVisibleUnbindableMount is requireUnbindableMount for a path
// where mountinfo also lists mounts that others hide: it checks the mount
// the path reaches.
func requireVisibleUnbindableMount(t *testing.T, dir string) int {
	t.Helper()
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_MNT_ID, &stx); err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts(t) {
		if uint64(m.ID) != stx.Mnt_id {
			continue
		}
		if m.MountPoint != dir {
			t.Fatalf("%s is no mount point: it is on the mount at %s", dir, m.MountPoint)
		}
		if !slices.Contains(m.Optional, "unbindable") {
			t.Errorf("the mount at %s is not unbindable: optional fields %q", dir, m.Optional)
		}
		return m.ID
	}
	t.Fatalf("no mount %d (that of %s) in mountinfo", stx.Mnt_id, dir)
	return 0
}

// TestEnsureUnbindable: a directory holding pins and a pod /dev/shm of an
// earlier netshim becomes an unbindable mount of its own; the pins are
// still there at the same paths (the same namespaces), on the new mount,
// and nothing else; a recursive bind of the directory's parent (a
// container's hostPath of /run) holds none of them; a second call (a
// restart) changes nothing; Remove leaves nothing mounted.
func TestEnsureUnbindable(t *testing.T) {
	requireRoot(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "netns")
	unmountAllOnCleanup(t, parent)
	p := NewPinner(dir)
	paths, err := p.Pin("pod-a", Net, IPC)
	if err != nil {
		t.Fatal(err)
	}
	shm, err := p.MountShm("pod-a", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shm, "x"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	inodes := map[Kind]uint64{}
	for k, path := range paths {
		inodes[k] = inode(t, path)
	}

	if err := EnsureUnbindable(dir); err != nil {
		t.Fatal(err)
	}
	id := requireUnbindableMount(t, dir)
	for k, path := range paths {
		if err := Verify(path, k); err != nil {
			t.Errorf("after EnsureUnbindable: %v", err)
		} else if got := inode(t, path); got != inodes[k] {
			t.Errorf("%s is namespace %d, want the pinned %d", path, got, inodes[k])
		}
	}
	if b, err := os.ReadFile(filepath.Join(shm, "x")); err != nil || string(b) != "kept" {
		t.Errorf("the pod's /dev/shm after EnsureUnbindable: %q, %v; want its file", b, err)
	}
	want := []string{dir, paths[Net], paths[IPC], shm}
	slices.Sort(want)
	var got []string
	for _, m := range mountsUnder(t, parent) {
		got = append(got, m.MountPoint)
		if m.MountPoint != dir && m.Parent != id {
			t.Errorf("%s is mounted on mount %d, want the directory's own (%d): a copy of it is left under it", m.MountPoint, m.Parent, id)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("mounts under %s: %q, want %q", parent, got, want)
	}

	// What Docker does with a container's hostPath of the parent.
	copyDir := t.TempDir()
	unmountAllOnCleanup(t, copyDir)
	if err := unix.Mount(parent, copyDir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	if ms := mountsUnder(t, copyDir); len(ms) != 1 {
		t.Errorf("a recursive bind of %s holds %+v, want only its own mount", parent, ms)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(copyDir, "netns", "pod-a.net"), &st); err != nil || st.Type == unix.NSFS_MAGIC {
		t.Errorf("pod-a.net in a recursive bind of %s: filesystem %#x (%v), want the plain file under the pin", parent, st.Type, err)
	}
	if err := unix.Unmount(copyDir, 0); err != nil {
		t.Fatal(err)
	}

	if err := EnsureUnbindable(dir); err != nil {
		t.Fatalf("a second EnsureUnbindable: %v", err)
	}
	if again := requireUnbindableMount(t, dir); again != id {
		t.Errorf("a second EnsureUnbindable made mount %d, want %d kept", again, id)
	}
	// Held open, the namespaces outlive their files: their inode numbers
	// cannot be reused by someone else's namespace mounted meanwhile.
	for _, path := range paths {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
	}
	for _, path := range []string{paths[Net], paths[IPC], shm} {
		if err := p.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	if ms := mountsUnder(t, parent); len(ms) != 1 || ms[0].MountPoint != dir {
		t.Errorf("after Remove: mounts under %s: %+v, want only the directory's", parent, ms)
	}
	for _, m := range mounts(t) {
		for k, ino := range inodes {
			if m.FSType == "nsfs" && m.Root == fmt.Sprintf("%s:[%d]", k, ino) {
				t.Errorf("pinned %s namespace still mounted at %s", k, m.MountPoint)
			}
		}
		if filepath.Base(m.MountPoint) == "pod-a.shm" {
			t.Errorf("the pod's /dev/shm still mounted at %s", m.MountPoint)
		}
	}
	// What test harnesses do once netshim is gone: nothing is under the
	// mount, so a plain unmount works.
	if err := unix.Unmount(dir, 0); err != nil {
		t.Errorf("unmounting the emptied directory: %v", err)
	}
	if ms := mountsUnder(t, parent); len(ms) != 0 {
		t.Errorf("mounts left: %+v", ms)
	}
}

// TestEnsureUnbindableOnMountPoint: a directory an operator mounted
// something on keeps that mount, now unbindable.
func TestEnsureUnbindableOnMountPoint(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "netns")
	unmountAllOnCleanup(t, filepath.Dir(dir))
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("netns", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	before := mountsUnder(t, dir)
	if err := EnsureUnbindable(dir); err != nil {
		t.Fatal(err)
	}
	if id := requireUnbindableMount(t, dir); len(before) != 1 || id != before[0].ID {
		t.Errorf("mount %d at %s, want the operator's %+v", id, dir, before)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Errorf("%s: filesystem %#x (%v), want the operator's tmpfs", dir, st.Type, err)
	}
}

// TestEnsureUnbindableUnderHiddenMount: mountinfo lists a mount at the
// directory's path, but a mount on a parent hides it (a node whose /run
// is its own, over the host's /run which held a netshim's netns dir): the
// directory the path reaches is no mount point, and gets its self-bind.
func TestEnsureUnbindableUnderHiddenMount(t *testing.T) {
	requireRoot(t)
	top := t.TempDir()
	unmountAllOnCleanup(t, top)
	run := filepath.Join(top, "run")
	dir := filepath.Join(run, "netns")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("old", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	hidden := mountsUnder(t, dir)
	if err := unix.Mount("run", run, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := EnsureUnbindable(dir); err != nil {
		t.Fatal(err)
	}
	if id := requireVisibleUnbindableMount(t, dir); len(hidden) != 1 || id == hidden[0].ID {
		t.Errorf("mount %d at %s, want a self-bind, not the hidden %+v", id, dir, hidden)
	}
	// A restart: the self-bind is a mount point now, nothing is added.
	if err := EnsureUnbindable(dir); err != nil {
		t.Fatal(err)
	}
	if ms := mountsUnder(t, dir); len(ms) != 2 {
		t.Errorf("after a second call, mounts at %s: %+v, want the hidden one and the self-bind", dir, ms)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Errorf("%s: filesystem %#x (%v), want the new /run's tmpfs", dir, st.Type, err)
	}
}

// TestEnsureUnbindableSharedParent: on a node the directory's parent
// mount (/run) is shared, and has peers in other mount namespaces. The
// pins of an earlier netshim stay reachable; the peers' copies of them
// go (the detach propagates) and no pin made afterwards reaches them.
func TestEnsureUnbindableSharedParent(t *testing.T) {
	requireRoot(t)
	top := t.TempDir()
	unmountAllOnCleanup(t, top)
	base, peer := filepath.Join(top, "base"), filepath.Join(top, "peer")
	for _, d := range []string{base, peer} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("run", base, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", base, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(base, peer, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "netns")
	p := NewPinner(dir)
	old, err := p.Pin("pod-old", Net)
	if err != nil {
		t.Fatal(err)
	}
	oldShm, err := p.MountShm("pod-old", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if ms := mountsUnder(t, filepath.Join(peer, "netns")); len(ms) != 2 {
		t.Fatalf("the peer holds %+v, want copies of the 2 pins", ms)
	}
	ino := inode(t, old[Net])
	if err := EnsureUnbindable(dir); err != nil {
		t.Fatal(err)
	}
	requireUnbindableMount(t, dir)
	if err := Verify(old[Net], Net); err != nil || inode(t, old[Net]) != ino {
		t.Errorf("the earlier pin after EnsureUnbindable: %v", err)
	}
	newer, err := p.Pin("pod-new", Net)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mountsUnder(t, peer) {
		if strings.HasPrefix(filepath.Base(m.MountPoint), "pod-") {
			t.Errorf("the peer mount holds %s (%s)", m.MountPoint, m.FSType)
		}
	}
	for _, path := range []string{old[Net], oldShm, newer[Net]} {
		if err := p.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range mountsUnder(t, top) {
		if strings.HasPrefix(filepath.Base(m.MountPoint), "pod-") {
			t.Errorf("after Remove: %s (%s) still mounted", m.MountPoint, m.FSType)
		}
	}
}
