package critest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeFile creates path, and its directory, with "{}" in it.
func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRunSandboxes(t *testing.T) {
	dir := t.TempDir()
	sb := filepath.Join(dir, "root", "sandbox")
	id1, id2 := strings.Repeat("a", 64), strings.Repeat("0", 63)+"f"
	for _, name := range []string{id1 + ".json", id2 + ".json", "abc.json", strings.Repeat("A", 64) + ".json", id1 + ".json.tmp"} {
		writeFile(t, filepath.Join(sb, name))
	}
	got := runSandboxes(dir)
	slices.Sort(got)
	if want := []string{id2, id1}; !slices.Equal(got, want) {
		t.Errorf("sandboxes %q, want %q", got, want)
	}
	if got := runSandboxes(t.TempDir()); len(got) != 0 {
		t.Errorf("a dir without checkpoints: %q", got)
	}
}

// psDocker answers container inspect and ps from a table and records rm.
type psDocker struct {
	pause    map[string]bool
	labelled map[string]string
	calls    []string
	rmFails  bool
}

func (d *psDocker) Docker(args ...string) (string, error) {
	switch args[0] {
	case "container":
		if d.pause[args[len(args)-1]] {
			return args[len(args)-1], nil
		}
		return "Error: No such container", errors.New("exit status 1")
	case "ps":
		return d.labelled[strings.TrimPrefix(args[len(args)-1], "label=netshim.io/sandbox-id=")], nil
	}
	d.calls = append(d.calls, strings.Join(args, " "))
	if d.rmFails {
		return "Error response from daemon: removal in progress", errors.New("exit status 1")
	}
	return "", nil
}

func TestRemoveLeftoverContainers(t *testing.T) {
	dir := t.TempDir()
	sb := filepath.Join(dir, "root", "sandbox")
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	for _, id := range []string{a, b} {
		writeFile(t, filepath.Join(sb, id+".json"))
	}
	cli := &psDocker{pause: map[string]bool{a: true}, labelled: map[string]string{a: "c1\nc2\n", b: "c3\n"}}
	var logged []string
	logf := func(f string, args ...any) { logged = append(logged, f) }
	if err := removeLeftoverContainers(cli, dir, logf); err != nil {
		t.Fatal(err)
	}
	if want := []string{"rm -f " + a + " c1 c2 c3"}; !slices.Equal(cli.calls, want) || len(logged) != 1 {
		t.Errorf("calls %q (want %q), logged %q", cli.calls, want, logged)
	}
	cli.rmFails = true
	if err := removeLeftoverContainers(cli, dir, logf); err == nil || !strings.Contains(err.Error(), "removal in progress") {
		t.Errorf("failed rm: %v", err)
	}
	clean := &psDocker{}
	if err := removeLeftoverContainers(clean, t.TempDir(), logf); err != nil || len(clean.calls) != 0 {
		t.Errorf("nothing to remove: %v, calls %q", err, clean.calls)
	}
}

func TestStaleRunDirs(t *testing.T) {
	tmp := t.TempDir()
	for _, d := range []string{"nsconf.1", "nsconf.2", "other"} {
		writeFile(t, filepath.Join(tmp, d, "x"))
	}
	writeFile(t, filepath.Join(tmp, "nsconf.file"))
	got := staleRunDirs(tmp, filepath.Join(tmp, "nsconf.2"))
	if want := []string{filepath.Join(tmp, "nsconf.1")}; !slices.Equal(got, want) {
		t.Errorf("stale %q, want %q", got, want)
	}
}
