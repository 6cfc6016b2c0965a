package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/netshim/netshim/pkg/podns"
)

// TestMain runs main instead of the tests when the test binary is started
// as the wrapper.
func TestMain(m *testing.M) {
	if os.Getenv("NETSHIM_OCI_TEST_AS_WRAPPER") == "1" {
		main()
		return // not reached: main execs or exits
	}
	os.Exit(m.Run())
}

// world is a bundle and a fake runc that records its arguments and the
// bundle's config.json as it saw them, then exits 3.
type world struct {
	dir, bundle, record, fake string
}

func newWorld(t *testing.T, config string) *world {
	t.Helper()
	w := &world{dir: t.TempDir()}
	w.bundle = filepath.Join(w.dir, "bundle")
	w.record = filepath.Join(w.dir, "record")
	w.fake = filepath.Join(w.dir, "runc")
	if err := os.Mkdir(w.bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.bundle, "config.json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\n{ echo \"$@\"; cat " + w.bundle + "/config.json; } >" + w.record + "\nexit 3\n"
	if err := os.WriteFile(w.fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

// fakeRunc replaces the fake runc's script with body (sh).
func (w *world) fakeRunc(t *testing.T, body string) {
	t.Helper()
	if err := os.WriteFile(w.fake, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// run starts the wrapper with args; it returns the wrapper's output and
// exit code.
func (w *world) run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return w.runIn(t, "", args...)
}

// runIn runs the wrapper in the working directory dir ("" for the
// test's).
func (w *world) runIn(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NETSHIM_OCI_TEST_AS_WRAPPER=1")
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

func (w *world) recorded(t *testing.T) string {
	t.Helper()
	got, err := os.ReadFile(w.record)
	if err != nil {
		t.Fatalf("the real runc did not run: %v", err)
	}
	return string(got)
}

func TestPassesThroughUnmarked(t *testing.T) {
	config := `{"process":{"env":["PATH=/bin"]},"linux":{"namespaces":[{"type":"network"}]}}`
	w := newWorld(t, config)
	out, code := w.run(t, "--netshim-runc="+w.fake, "--root", "/r", "create", "--bundle", w.bundle, "id1")
	if code != 3 {
		t.Fatalf("exit code %d, want the real runc's 3; output:\n%s", code, out)
	}
	if want := "--root /r create --bundle " + w.bundle + " id1\n" + config; w.recorded(t) != want {
		t.Errorf("the real runc saw:\n%s\nwant:\n%s", w.recorded(t), want)
	}
}

func TestRefusesAProcessNamespace(t *testing.T) {
	w := newWorld(t, `{"process":{"env":["`+podns.EnvKey+`=net=/proc/1/ns/net"]}}`)
	out, code := w.run(t, "--netshim-runc="+w.fake, "create", "--bundle", w.bundle, "id1")
	if code != 1 || !strings.Contains(out, "netshim-oci: container id1: ") || !strings.Contains(out, "no netshim signature") {
		t.Fatalf("exit %d, output %q; want a refusal naming the container and why", code, out)
	}
	if _, err := os.Stat(w.record); err == nil {
		t.Error("runc ran with a refused config")
	}
}

// pin makes a pinned netns in a new directory of netshim's (with its key).
func pin(t *testing.T) (string, podns.Paths, *podns.Key) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("pinning a netns needs root (the unit tests run as root)")
	}
	dir := filepath.Join(t.TempDir(), "netns")
	key, err := podns.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := podns.NewPinner(dir)
	paths, err := p.Pin("pod", podns.Net)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove(paths[podns.Net]) })
	return dir, paths, key
}

func TestJoinsThePinnedNetns(t *testing.T) {
	dir, paths, key := pin(t)
	config := `{"process":{"env":["A=1",` + `"` + paths.Env(key) + `"]},"linux":{"namespaces":[{"type":"pid"},{"type":"network"}]}}`
	for _, flags := range [][]string{nil, {"--netshim-netns-dir=/elsewhere", "--netshim-netns-dir=" + dir}} {
		w := newWorld(t, config)
		args := append(append([]string{"--netshim-runc=" + w.fake}, flags...), "create", "--bundle", w.bundle, "id1")
		out, code := w.run(t, args...)
		if code != 3 {
			t.Fatalf("%q: exit code %d, want the real runc's 3; output:\n%s", flags, code, out)
		}
		got := w.recorded(t)
		if !strings.Contains(got, `{"type":"network","path":"`+paths[podns.Net]+`"}`) || strings.Contains(got, podns.EnvKey) || !strings.Contains(got, `"A=1"`) {
			t.Errorf("%q: the real runc saw %s; want the pinned path in linux.namespaces and no marker", flags, got)
		}
	}

	// exec: the marker leaves the process file.
	w := newWorld(t, config)
	proc := filepath.Join(w.dir, "process.json")
	if err := os.WriteFile(proc, []byte(`{"env":["`+paths.Env(key)+`","B=2"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := w.run(t, "--netshim-runc="+w.fake, "exec", "--process", proc, "--detach", "id1"); code != 3 {
		t.Fatalf("exec: exit code %d; output:\n%s", code, out)
	}
	b, _ := os.ReadFile(proc)
	if strings.Contains(string(b), podns.EnvKey) || !strings.Contains(string(b), `"B=2"`) {
		t.Errorf("process file after exec: %s", b)
	}
}

// TestRefusesMarkersNetshimDidNotSign: what an image's ENV can put in a
// container's environment. Each names a real namespace file; none may be
// applied, and runc never runs.
func TestRefusesMarkersNetshimDidNotSign(t *testing.T) {
	_, paths, key := pin(t)
	// A bind mount of a netns outside any directory of netshim's: what
	// /var/run/docker/netns/default or /run/netns/<name> is on a node.
	foreign := podns.NewPinner(filepath.Join(t.TempDir(), "run-netns"))
	fp, err := foreign.Pin("node", podns.Net)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = foreign.Remove(fp[podns.Net]) })
	otherDir := filepath.Join(t.TempDir(), "other")
	otherKey, err := podns.LoadOrCreateKey(otherDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, marker string
		flags        []string
		wantErr      string
	}{
		{name: "unsigned foreign netns", marker: podns.EnvKey + "=net=" + fp[podns.Net], wantErr: "no netshim signature"},
		{name: "unsigned pod netns", marker: podns.EnvKey + "=net=" + paths[podns.Net], wantErr: "no netshim signature"},
		{name: "foreign netns signed with a key from elsewhere", marker: fp.Env(key), wantErr: "holds no usable key"},
		{name: "pod netns signed with another directory's key", marker: paths.Env(otherKey), wantErr: "does not match"},
		{name: "signed, outside the wrapper's dirs", marker: paths.Env(key), flags: []string{"--netshim-netns-dir=" + otherDir}, wantErr: "not a netns directory this wrapper accepts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, `{"process":{"env":["`+tc.marker+`"]},"linux":{"namespaces":[{"type":"network"}]}}`)
			// As containerd's shim runs runc: its error is read back from --log.
			log := filepath.Join(w.dir, "log.json")
			args := append(append([]string{"--netshim-runc=" + w.fake}, tc.flags...), "--log", log, "--log-format", "json", "create", "--bundle", w.bundle, "c1")
			out, code := w.run(t, args...)
			if code != 1 || !strings.Contains(out, "netshim-oci: container c1: ") || !strings.Contains(out, tc.wantErr) {
				t.Fatalf("exit %d, output %q; want a refusal containing %q", code, out, tc.wantErr)
			}
			if b, err := os.ReadFile(log); err != nil || !strings.Contains(string(b), `"level":"error"`) || !strings.Contains(string(b), tc.wantErr) {
				t.Errorf("runc's log: %q, %v; want the refusal as an error line (what Docker reports)", b, err)
			}
			if _, err := os.Stat(w.record); err == nil {
				t.Error("runc ran with a refused config")
			}
		})
	}
}

func TestOwnFlags(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		runc     string
		dirs     []string
		rest     []string
		wantFail bool
	}{
		{args: []string{"--root", "/r", "create"}, rest: []string{"--root", "/r", "create"}},
		{args: []string{"--netshim-runc=/x/runc", "--netshim-netns-dir=/run/netshim/netns/", "--netshim-netns-dir=/b", "start", "id"},
			runc: "/x/runc", dirs: []string{"/run/netshim/netns", "/b"}, rest: []string{"start", "id"}},
		{args: []string{"--netshim-netns-dir=rel"}, wantFail: true},
		// After runc's first argument nothing is the wrapper's.
		{args: []string{"create", "--netshim-runc=/y"}, rest: []string{"create", "--netshim-runc=/y"}},
	} {
		runcPath, dirs, rest, err := ownFlags(tc.args)
		if (err != nil) != tc.wantFail {
			t.Errorf("ownFlags(%q) error = %v, want failure %v", tc.args, err, tc.wantFail)
			continue
		}
		if err == nil && (runcPath != tc.runc || !slices.Equal(dirs, tc.dirs) || !slices.Equal(rest, tc.rest)) {
			t.Errorf("ownFlags(%q) = %q, %q, %q; want %q, %q, %q", tc.args, runcPath, dirs, rest, tc.runc, tc.dirs, tc.rest)
		}
	}
}

func TestRefusesItselfAsRunc(t *testing.T) {
	w := newWorld(t, `{}`)
	self, _ := os.Executable()
	out, code := w.run(t, "--netshim-runc="+self, "start", "id1")
	if code != 1 || !strings.Contains(out, "is this wrapper") {
		t.Errorf("exit %d, output %q; want a refusal", code, out)
	}
}

// keyDir is a directory of netshim's with its key, for markers that name
// no namespace (no root needed).
func keyDir(t *testing.T) (string, *podns.Key) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "netns")
	key, err := podns.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, key
}

// TestStrictGroups: a container of a pod with SupplementalGroupsPolicy
// Strict gets only its gid and the pod's groups, not the ones the image's
// /etc/group gave it; its execs too.
func TestStrictGroups(t *testing.T) {
	dir, key := keyDir(t)
	marker := podns.Marker{Paths: podns.Paths{}, Dir: dir, StrictGroups: true, Groups: []uint32{1000, 2000}}.Env(key)
	config := `{"process":{"user":{"uid":0,"gid":0,"additionalGids":[0,1,10,1000]},"env":["A=1","` + marker + `"]}}`
	w := newWorld(t, config)
	if out, code := w.run(t, "--netshim-runc="+w.fake, "create", "--bundle", w.bundle, "c1"); code != 3 {
		t.Fatalf("exit code %d, want the real runc's 3; output:\n%s", code, out)
	}
	got := w.recorded(t)
	if !strings.Contains(got, `"additionalGids":[0,1000,2000]`) || strings.Contains(got, podns.EnvKey) || !strings.Contains(got, `"A=1"`) {
		t.Errorf("the real runc saw %s; want the groups 0, 1000 and 2000 only, and no marker", got)
	}

	for _, tc := range []struct {
		name, marker string
		wantCode     int
		wantGroups   string
		wantErr      string
	}{
		{name: "signed", marker: marker, wantCode: 3, wantGroups: `"additionalGids":[0,1000,2000]`},
		{name: "empty", marker: podns.EnvKey + "=", wantCode: 3, wantGroups: `"additionalGids":[0,1,10,1000]`},
		// An exec applies no namespace: a file gone meanwhile (or never
		// there) does not fail it.
		{name: "signed, not Strict", marker: podns.Paths{podns.Net: dir + "/gone.net"}.Env(key), wantCode: 3, wantGroups: `"additionalGids":[0,1,10,1000]`},
		// What an image's ENV could carry: an exec of a container that
		// the wrapper would not have created.
		{name: "unsigned", marker: podns.EnvKey + "=dir=" + dir + ",groups=0", wantCode: 1, wantErr: "no netshim signature"},
	} {
		t.Run("exec "+tc.name, func(t *testing.T) {
			w := newWorld(t, config)
			proc := filepath.Join(w.dir, "process.json")
			in := `{"user":{"uid":0,"gid":0,"additionalGids":[0,1,10,1000]},"env":["` + tc.marker + `","B=2"]}`
			if err := os.WriteFile(proc, []byte(in), 0o600); err != nil {
				t.Fatal(err)
			}
			out, code := w.run(t, "--netshim-runc="+w.fake, "exec", "--process", proc, "--detach", "c1")
			if code != tc.wantCode || !strings.Contains(out, tc.wantErr) {
				t.Fatalf("exit code %d, output %q; want %d and %q", code, out, tc.wantCode, tc.wantErr)
			}
			b, _ := os.ReadFile(proc)
			if tc.wantErr != "" {
				if string(b) != in {
					t.Errorf("a refused process file was changed: %s", b)
				}
				if _, err := os.Stat(w.record); err == nil {
					t.Error("runc ran with a refused process")
				}
				return
			}
			if strings.Contains(string(b), podns.EnvKey) || !strings.Contains(string(b), `"B=2"`) || !strings.Contains(string(b), tc.wantGroups) {
				t.Errorf("process file after exec: %s; want no marker and %s", b, tc.wantGroups)
			}
		})
	}
}

// overlayRootfs mounts an overlay on <bundle>/rootfs, as the engine's
// containerd shim does with the snapshotter: an image layer with a
// root-owned etc/passwd, and an upper layer the engine made as root.
func overlayRootfs(t *testing.T, w *world) string {
	t.Helper()
	lower, upper, work := filepath.Join(w.dir, "layer"), filepath.Join(w.dir, "snapshots", "9", "fs"), filepath.Join(w.dir, "snapshots", "9", "work")
	rootfs := filepath.Join(w.bundle, "rootfs")
	for _, d := range []string{filepath.Join(lower, "etc"), upper, work, rootfs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "etc", "passwd"), []byte("root:x:0:0::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("overlay", rootfs, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(rootfs, unix.MNT_DETACH) })
	return rootfs
}

// mountedAt says whether something is mounted on path (which has no
// character mountinfo escapes).
func mountedAt(t *testing.T, path string) bool {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(mi), " "+path+" ")
}

// TestUserNamespaceRootfs: a container of a pod with hostUsers: false
// gets an idmapped overlay of its image as its rootfs while runc runs,
// which is gone once the wrapper exits with runc's status.
func TestUserNamespaceRootfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("mounting needs root (the unit tests run as root)")
	}
	dir := filepath.Join(t.TempDir(), "netns")
	key, err := podns.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := podns.NewPinner(dir)
	uids := []podns.IDMap{{ContainerID: 0, HostID: 100000, Size: 65536}}
	gids := []podns.IDMap{{ContainerID: 0, HostID: 200000, Size: 65536}}
	paths, err := p.PinUser("pod", uids, gids, podns.Net)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, path := range paths {
			_ = p.Remove(path)
		}
	})
	marker := podns.Marker{Paths: paths, UIDs: uids, GIDs: gids}.Env(key)
	config := `{"root":{"path":"rootfs"},"process":{"env":["` + marker + `"]},"linux":{"uidMappings":[{"containerID":0,"hostID":1,"size":1}],"namespaces":[{"type":"mount"},{"type":"network"}]}}`
	// What runc would see: its root.path, who owns the image's files
	// there, and whether it is mounted.
	script := `root=$(sed -n 's/.*"root":{[^}]*"path":"\([^"]*\)".*/\1/p' config.json)
{ echo "$root"; stat -c %u:%g "$root" "$root/etc/passwd"; grep -q " $root " /proc/self/mountinfo && echo mounted; cat config.json; } >RECORD
`
	for _, tc := range []struct {
		name     string
		exit     string // how the fake runc ends
		wantCode int
		wantDir  bool // the empty mount point stays, for runc exec
	}{
		{name: "created", exit: "exit 0", wantCode: 0, wantDir: true},
		{name: "exit status", exit: "exit 3", wantCode: 3},
		{name: "killed", exit: "kill -TERM $$", wantCode: 128 + 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, config)
			overlayRootfs(t, w)
			w.fakeRunc(t, "cd "+w.bundle+"\n"+strings.ReplaceAll(script, "RECORD", w.record)+tc.exit+"\n")
			out, code := w.run(t, "--netshim-runc="+w.fake, "create", "--bundle", w.bundle, "c1")
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want runc's %d; output:\n%s", code, tc.wantCode, out)
			}
			// Beside the pinned user namespace, which the container's
			// root can reach, not in the bundle.
			base := filepath.Join(dir, ".rootfs", "bundle")
			target := filepath.Join(base, "netshim-rootfs")
			lines := strings.SplitN(w.recorded(t), "\n", 5)
			if len(lines) < 5 {
				t.Fatalf("the fake runc recorded %q", lines)
			}
			if lines[0] != target {
				t.Errorf("runc's root.path: %s, want %s", lines[0], target)
			}
			// The upper layer's root (the engine's, shifted) and the
			// image's file are the namespace's root's.
			if lines[1] != "100000:200000" || lines[2] != "100000:200000" {
				t.Errorf("owners seen by runc: %q, %q; want the namespace's root, 100000:200000", lines[1], lines[2])
			}
			if lines[3] != "mounted" {
				t.Errorf("the rootfs was not mounted while runc ran (%q)", lines[3])
			}
			cfg := lines[4]
			if !strings.Contains(cfg, `{"type":"user","path":"`+paths[podns.User]+`"}`) || strings.Contains(cfg, "uidMappings") || strings.Contains(cfg, podns.EnvKey) {
				t.Errorf("the config runc saw: %s; want the pinned user namespace, no linux maps, no marker", cfg)
			}
			if mountedAt(t, target) {
				t.Error("the idmapped rootfs is still mounted after the wrapper exited")
			}
			if _, err := os.Stat(filepath.Join(base, ".netshim-idmap")); !os.IsNotExist(err) {
				t.Errorf("the layers' scratch directory is left: %v", err)
			}
			for _, d := range []string{filepath.Dir(base), base} {
				if st, err := os.Stat(d); err == nil && st.Mode().Perm() != 0o711 {
					t.Errorf("%s has mode %o, want 0711: the container's root must reach its rootfs", d, st.Mode().Perm())
				}
			}
			if !mountedAt(t, filepath.Join(w.bundle, "rootfs")) {
				t.Error("the engine's rootfs was unmounted")
			}
			entries, err := os.ReadDir(target)
			if !tc.wantDir {
				if _, berr := os.Stat(base); !os.IsNotExist(err) || !os.IsNotExist(berr) {
					t.Errorf("%s is left: %v, %v", target, err, berr)
				}
				return
			}
			if err != nil || len(entries) != 0 {
				t.Fatalf("%s: %d entries, %v; want it there, empty", target, len(entries), err)
			}
			// containerd's shim deletes the container in its bundle.
			w.fakeRunc(t, "exit 0\n")
			if out, code := w.runIn(t, w.bundle, "--netshim-runc="+w.fake, "delete", "c1"); code != 0 {
				t.Fatalf("delete: exit code %d; output:\n%s", code, out)
			}
			for _, d := range []string{target, base} {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Errorf("%s is left after delete: %v", d, err)
				}
			}
		})
	}

	t.Run("not an overlay", func(t *testing.T) {
		w := newWorld(t, config)
		if err := os.Mkdir(filepath.Join(w.bundle, "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
		out, code := w.run(t, "--netshim-runc="+w.fake, "create", "--bundle", w.bundle, "c1")
		if code != 1 || !strings.Contains(out, "container c1: ") || !strings.Contains(out, "no overlay filesystem is mounted") {
			t.Fatalf("exit %d, output %q; want a refusal saying the rootfs is no overlay", code, out)
		}
		if _, err := os.Stat(w.record); err == nil {
			t.Error("runc ran")
		}
		if _, err := os.Stat(filepath.Join(dir, ".rootfs", "bundle")); !os.IsNotExist(err) {
			t.Errorf("the rootfs directory is left: %v", err)
		}
	})
}

// TestDeleteDetachesALeftRootfs: a wrapper killed while runc created the
// container leaves the idmapped rootfs mounted (the bundle's config.json
// names it as root.path); `delete`, which containerd's shim runs in the
// bundle, detaches it and removes its directory before runc.
func TestDeleteDetachesALeftRootfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("mounting needs root (the unit tests run as root)")
	}
	netns := filepath.Join(t.TempDir(), "netns")
	base := filepath.Join(netns, ".rootfs", "bundle")
	target := filepath.Join(base, "netshim-rootfs")
	w := newWorld(t, `{"root":{"path":"`+target+`"}}`)
	view := filepath.Join(base, ".netshim-idmap", "0")
	for _, d := range []string{target, view} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", 0, "size=4k"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(d, unix.MNT_DETACH) })
	}
	out, code := w.runIn(t, w.bundle, "--netshim-runc="+w.fake, "--root", "/r", "delete", "--force", "c1")
	if code != 3 {
		t.Fatalf("exit code %d, want runc's 3; output:\n%s", code, out)
	}
	if got := w.recorded(t); !strings.HasPrefix(got, "--root /r delete --force c1\n") {
		t.Errorf("runc saw %q", got)
	}
	for _, d := range []string{target, view} {
		if mountedAt(t, d) {
			t.Errorf("%s still mounted", d)
		}
	}
	for _, d := range []string{target, filepath.Join(base, ".netshim-idmap"), base} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s is left: %v", d, err)
		}
	}
}
