package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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

// run starts the wrapper with args; it returns the wrapper's output and
// exit code.
func (w *world) run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
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
