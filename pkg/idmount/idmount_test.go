package idmount

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/netshim/netshim/pkg/podns"
	"github.com/netshim/netshim/pkg/procutil"
)

func TestFindOverlay(t *testing.T) {
	const (
		home   = "/var/lib/docker/overlay2"
		merged = home + "/abc/merged"
		pre    = "1234 27 0:99 / " + merged + " rw,relatime - overlay overlay "
	)
	tmpfsOn := func(dir string) string { return "1300 27 0:98 / " + dir + " rw,relatime - tmpfs tmpfs rw,size=4k\n" }
	for _, tc := range []struct {
		name, mountinfo, dir, base string
		want                       Overlay
		wantErr                    string
	}{
		{
			name:      "Docker's overlay2, absolute",
			mountinfo: pre + "rw,lowerdir=" + home + "/l/A:" + home + "/l/B,upperdir=" + home + "/abc/diff,workdir=" + home + "/abc/work,nouserxattr\n",
			dir:       merged, base: "/ignored",
			want: Overlay{Lower: []string{home + "/l/A", home + "/l/B"}, Upper: home + "/abc/diff", Work: home + "/abc/work",
				OtherOptions: []string{"nouserxattr"}, MountPoint: merged},
		},
		{
			// Docker's short form, when the absolute paths would not fit
			// in a page: relative to its home.
			name:      "relative to base",
			mountinfo: pre + "rw,lowerdir=l/A:l/B,upperdir=abc/diff,workdir=abc/work\n",
			dir:       merged, base: home,
			want: Overlay{Lower: []string{home + "/l/A", home + "/l/B"}, Upper: home + "/abc/diff", Work: home + "/abc/work", MountPoint: merged},
		},
		{
			name:      "relative, no base: left relative",
			mountinfo: pre + "rw,lowerdir=l/A,upperdir=abc/diff,workdir=abc/work\n",
			dir:       merged,
			want:      Overlay{Lower: []string{"l/A"}, Upper: "abc/diff", Work: "abc/work", MountPoint: merged},
		},
		{
			// containerd's overlayfs snapshotter compacts only the
			// image layers, relative to the snapshots directory.
			name:      "containerd's compacted layers",
			mountinfo: "77 60 0:50 / /run/b/rootfs rw - overlay overlay rw,lowerdir=3/fs:1/fs,upperdir=/s/snapshots/9/fs,workdir=/s/snapshots/9/work,index=off,uuid=on,xino=off,metacopy=off,redirect_dir=nofollow\n",
			dir:       "/run/b/rootfs", base: "/s/snapshots",
			want: Overlay{Lower: []string{"/s/snapshots/3/fs", "/s/snapshots/1/fs"}, Upper: "/s/snapshots/9/fs", Work: "/s/snapshots/9/work", MountPoint: "/run/b/rootfs"},
		},
		{
			// As Linux 6.18 shows layers mounted with "lo\,w\:1" and
			// "lo 2" (overlayfs's escapes, then mountinfo's octal ones),
			// on a mount point with a space.
			name:      "escaped commas, colons and spaces",
			mountinfo: `57 27 0:44 / /t/m\040x rw,relatime - overlay overlay rw,lowerdir=/t/lo\134\054w\134:1:/t/lo\0402,upperdir=/t/u=p\134\054x\134:y/diff,workdir=/t/u=p\134\054x\134:y/work,uuid=on` + "\n",
			dir:       "/t/m x",
			want:      Overlay{Lower: []string{"/t/lo,w:1", "/t/lo 2"}, Upper: "/t/u=p,x:y/diff", Work: "/t/u=p,x:y/work", MountPoint: "/t/m x"},
		},
		{
			name:      "read-only, no upper",
			mountinfo: "1 2 0:1 / /r ro,relatime - overlay overlay ro,lowerdir=/a:/b\n",
			dir:       "/r",
			want:      Overlay{Lower: []string{"/a", "/b"}, MountPoint: "/r", MountOptsFlag: unix.MS_RDONLY},
		},
		{
			name:      "an overlay on a tmpfs: the overlay",
			mountinfo: tmpfsOn(merged) + pre + "rw,lowerdir=/a,upperdir=/u,workdir=/w\n",
			dir:       merged,
			want:      Overlay{Lower: []string{"/a"}, Upper: "/u", Work: "/w", MountPoint: merged},
		},
		{name: "a later mount on top", mountinfo: pre + "rw,lowerdir=/a,upperdir=/u,workdir=/w\n" + tmpfsOn(merged), dir: merged, wantErr: "no overlay"},
		{name: "another directory", mountinfo: pre + "rw,lowerdir=/a\n", dir: "/elsewhere", wantErr: "no overlay"},
		{name: "a mount below", mountinfo: pre + "rw,lowerdir=/a\n", dir: home + "/abc", wantErr: "no overlay"},
		{name: "lowerdir+", mountinfo: pre + "rw,lowerdir+=/a,lowerdir+=/b,upperdir=/u,workdir=/w\n", dir: merged, wantErr: "lowerdir+"},
		{name: "data-only layers", mountinfo: pre + "rw,lowerdir=/a::/d,upperdir=/u,workdir=/w\n", dir: merged, wantErr: "data-only"},
		{name: "no lowerdir", mountinfo: pre + "rw,upperdir=/u,workdir=/w\n", dir: merged, wantErr: "no lowerdir"},
		{name: "upper without work", mountinfo: pre + "rw,lowerdir=/a,upperdir=/u\n", dir: merged, wantErr: "without a workdir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FindOverlay(tc.mountinfo, tc.dir, tc.base)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("FindOverlay = %+v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("FindOverlay = %+v, %v;\nwant %+v", got, err, tc.want)
			}
		})
	}
}

func TestEscapeOpt(t *testing.T) {
	for _, p := range []string{"/plain", `/a,b:c\d`, "/sp ace"} {
		if got := unescapeBackslash(escapeOpt(p)); got != p {
			t.Errorf("unescape(escape(%q)) = %q", p, got)
		}
		if strings.ContainsAny(strings.NewReplacer(`\\`, "", `\,`, "", `\:`, "").Replace(escapeOpt(p)), ",:") {
			t.Errorf("escapeOpt(%q) = %q: a separator left bare", p, escapeOpt(p))
		}
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root (CAP_SYS_ADMIN)")
	}
}

func owner(t *testing.T, path string) (uint32, uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

func mkfile(t *testing.T, path string, uid, gid int, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(filepath.Base(path)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func mountsUnder(t *testing.T, dir string) []procutil.Mount {
	t.Helper()
	ms, err := procutil.ReadMountinfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []procutil.Mount
	for _, m := range ms {
		if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
			out = append(out, m)
		}
	}
	return out
}

// unmountAllOnCleanup unmounts what a test (a failed one too) left
// mounted under dir, latest first.
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
	})
}

func TestShiftUpper(t *testing.T) {
	requireRoot(t)
	upper := t.TempDir()
	uids := []Map{{0, 100000, 65536}}
	gids := []Map{{0, 200000, 65536}}
	mkfile(t, filepath.Join(upper, "root"), 0, 0, 0o644)
	mkfile(t, filepath.Join(upper, "dir", "user"), 1000, 1001, 0o640)
	mkfile(t, filepath.Join(upper, "setuid"), 0, 0, 0o4755|os.ModeSetuid)
	mkfile(t, filepath.Join(upper, "shifted"), 100005, 200005, 0o644) // a second start's
	mkfile(t, filepath.Join(upper, "outside"), 70000, 0, 0o644)       // not mapped: left
	if err := os.Symlink("/nowhere", filepath.Join(upper, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(upper, "setuid"), 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if err := ShiftUpper(upper, uids, gids); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][2]uint32{
		".": {100000, 200000}, "root": {100000, 200000}, "dir": {100000, 200000}, "dir/user": {101000, 201001},
		"setuid": {100000, 200000}, "shifted": {100005, 200005}, "outside": {70000, 200000}, "link": {100000, 200000},
	} {
		if u, g := owner(t, filepath.Join(upper, name)); u != want[0] || g != want[1] {
			t.Errorf("%s owned by %d:%d, want %d:%d", name, u, g, want[0], want[1])
		}
	}
	if fi, err := os.Stat(filepath.Join(upper, "setuid")); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("the setuid bit after the chown: %v, %v", fi.Mode(), err)
	}
	// Again: nothing changes.
	if err := ShiftUpper(upper, uids, gids); err != nil {
		t.Fatal(err)
	}
	if u, _ := owner(t, filepath.Join(upper, "dir/user")); u != 101000 {
		t.Errorf("a second ShiftUpper moved dir/user to %d", u)
	}
}

// TestMountIDMapped: the engine's overlay of an image, rebuilt on
// idmapped views of its layers through a pinned user namespace, as the
// OCI wrapper does for a container of a pod with hostUsers: false.
func TestMountIDMapped(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	unmountAllOnCleanup(t, dir)
	// The namespace's root is no root of the node's: it must get to the
	// mount through the test's directories (a container starts there).
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l1, l2 := filepath.Join(dir, "layers", "l1"), filepath.Join(dir, "layers", "l2")
	mkfile(t, filepath.Join(l1, "etc", "passwd"), 0, 0, 0o644)
	mkfile(t, filepath.Join(l1, "home", "user", "file"), 1000, 1000, 0o644)
	mkfile(t, filepath.Join(l2, "bin", "sh"), 0, 0, 0o755)
	c := filepath.Join(dir, "c")
	upper, work, merged := filepath.Join(c, "diff"), filepath.Join(c, "work"), filepath.Join(c, "merged")
	mkfile(t, filepath.Join(upper, "engine"), 0, 0, 0o644) // what the engine made
	for _, d := range []string{work, merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+l1+":"+l2+",upperdir="+upper+",workdir="+work); err != nil {
		t.Fatal(err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	o, err := FindOverlay(string(mi), merged, "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.Lower, []string{l1, l2}) || o.Upper != upper || o.Work != work {
		t.Fatalf("FindOverlay = %+v", o)
	}

	uids := []podns.IDMap{{ContainerID: 0, HostID: 100000, Size: 65536}}
	gids := []podns.IDMap{{ContainerID: 0, HostID: 200000, Size: 65536}}
	p := podns.NewPinner(filepath.Join(dir, "netns"))
	paths, err := p.PinUser("pod", uids, gids)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove(paths[podns.User]) })
	ns, err := os.Open(paths[podns.User])
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()

	maps := func(ms []podns.IDMap) []Map {
		out := make([]Map, len(ms))
		for i, m := range ms {
			out[i] = Map(m)
		}
		return out
	}
	if err := ShiftUpper(o.Upper, maps(uids), maps(gids)); err != nil {
		t.Fatal(err)
	}
	target, scratch := filepath.Join(c, "rootfs"), filepath.Join(c, "scratch")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if err := MountIDMapped(o, target, scratch, int(ns.Fd())); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.Getwd(); now != wd {
		t.Errorf("the working directory is %s after MountIDMapped, want %s back", now, wd)
	}
	if _, err := os.Stat(scratch); !os.IsNotExist(err) {
		t.Errorf("the layers' scratch directory is left: %v", err)
	}
	if ms := mountsUnder(t, scratch); len(ms) != 0 {
		t.Errorf("the layers' views are left mounted: %+v", ms)
	}
	if fi, err := os.Stat(WorkDir(o)); err != nil || !fi.IsDir() {
		t.Errorf("the work directory %s: %v", WorkDir(o), err)
	}

	// The image's files are the namespace's root's and user's; the
	// engine's (shifted) too; on disk nothing changed.
	for name, want := range map[string][2]uint32{
		".": {100000, 200000}, "etc/passwd": {100000, 200000}, "bin/sh": {100000, 200000},
		"home/user/file": {101000, 201000}, "engine": {100000, 200000},
	} {
		if u, g := owner(t, filepath.Join(target, name)); u != want[0] || g != want[1] {
			t.Errorf("%s owned by %d:%d through the idmapped overlay, want %d:%d", name, u, g, want[0], want[1])
		}
	}
	if u, _ := owner(t, filepath.Join(l1, "etc", "passwd")); u != 0 {
		t.Errorf("the layer's etc/passwd is owned by %d on disk, want 0 still", u)
	}

	// Writes land in the upper layer.
	if err := os.WriteFile(filepath.Join(target, "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(upper, "new")); err != nil {
		t.Errorf("a file written through the idmapped overlay is not in the upper layer: %v", err)
	}
	// As the container's root (node uid 100000): a new file and a copy
	// up of the image's are owned by it on disk.
	if nsenter, err := exec.LookPath("nsenter"); err == nil {
		script := "echo hi > " + filepath.Join(target, "etc", "new") + " && echo x >> " + filepath.Join(target, "etc", "passwd")
		cmd := exec.Command(nsenter, "--user="+paths[podns.User], "sh", "-c", script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("writing as the namespace's root: %v: %s", err, out)
		}
		for _, name := range []string{"etc/new", "etc/passwd"} {
			if u, g := owner(t, filepath.Join(upper, name)); u != 100000 || g != 200000 {
				t.Errorf("upper %s owned by %d:%d on disk, want 100000:200000", name, u, g)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(l1, "etc", "passwd")); string(b) != "passwd" {
			t.Errorf("the layer's etc/passwd changed: %q", b)
		}
	} else {
		t.Log("no nsenter: writes as the namespace's root are not checked")
	}

	if err := Unmount(target); err != nil {
		t.Fatal(err)
	}
	if err := Unmount(target); err != nil {
		t.Errorf("a second Unmount: %v", err)
	}
	if ms := mountsUnder(t, target); len(ms) != 0 {
		t.Errorf("mounted after Unmount: %+v", ms)
	}
	if err := unix.Unmount(merged, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(paths[podns.User]); err != nil {
		t.Fatal(err)
	}
	if ms := mountsUnder(t, dir); len(ms) != 0 {
		t.Errorf("left mounted under the test's directory: %+v", ms)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(upper, "new"), &st); err != nil {
		t.Errorf("the upper layer lost what was written: %v", err)
	}
}
