package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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
	if code != 1 || !strings.Contains(out, "netshim-oci: ") || !strings.Contains(out, "a process's namespace") {
		t.Fatalf("exit %d, output %q; want a refusal naming the path", code, out)
	}
	if _, err := os.Stat(w.record); err == nil {
		t.Error("runc ran with a refused config")
	}
}

func TestJoinsThePinnedNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pinning a netns needs root")
	}
	p := podns.NewPinner(filepath.Join(t.TempDir(), "netns"))
	paths, err := p.Pin("pod", podns.Net)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove(paths[podns.Net])
	w := newWorld(t, `{"process":{"env":["A=1",`+`"`+paths.Env()+`"]},"linux":{"namespaces":[{"type":"pid"},{"type":"network"}]}}`)
	out, code := w.run(t, "--netshim-runc="+w.fake, "create", "--bundle", w.bundle, "id1")
	if code != 3 {
		t.Fatalf("exit code %d, want the real runc's 3; output:\n%s", code, out)
	}
	got := w.recorded(t)
	if !strings.Contains(got, `{"type":"network","path":"`+paths[podns.Net]+`"}`) || strings.Contains(got, podns.EnvKey) || !strings.Contains(got, `"A=1"`) {
		t.Errorf("the real runc saw %s; want the pinned path in linux.namespaces and no marker", got)
	}

	// exec: the marker leaves the process file.
	proc := filepath.Join(w.dir, "process.json")
	if err := os.WriteFile(proc, []byte(`{"env":["`+paths.Env()+`","B=2"]}`), 0o600); err != nil {
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

func TestRefusesItselfAsRunc(t *testing.T) {
	w := newWorld(t, `{}`)
	self, _ := os.Executable()
	out, code := w.run(t, "--netshim-runc="+self, "start", "id1")
	if code != 1 || !strings.Contains(out, "is this wrapper") {
		t.Errorf("exit %d, output %q; want a refusal", code, out)
	}
}
