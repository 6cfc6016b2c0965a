package runcwrap

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want Command
	}{
		// What containerd's runc shim runs (go-runc).
		{name: "shim create", args: []string{"--root", "/run/containerd/runc/moby", "--log", "/run/x/log.json", "--log-format", "json",
			"create", "--bundle", "/run/x/bundle", "--pid-file", "/run/x/init.pid", "abc"}, want: Command{Name: "create", Bundle: "/run/x/bundle", ID: "abc", Log: "/run/x/log.json", LogFormat: "json"}},
		{name: "run -b", args: []string{"run", "-b", "/b", "id"}, want: Command{Name: "run", Bundle: "/b", ID: "id"}},
		{name: "inline", args: []string{"--root=/r", "--log=/l.json", "create", "--bundle=/b", "id"}, want: Command{Name: "create", Bundle: "/b", ID: "id", Log: "/l.json"}},
		{name: "single dash", args: []string{"-root", "/r", "create", "-bundle", "/b", "id"}, want: Command{Name: "create", Bundle: "/b", ID: "id"}},
		{name: "systemd cgroup bool flag", args: []string{"--systemd-cgroup", "create", "--bundle", "/b", "id"}, want: Command{Name: "create", Bundle: "/b", ID: "id"}},
		{name: "value that looks like -b", args: []string{"create", "--pid-file", "-b", "--bundle", "/b", "id"}, want: Command{Name: "create", Bundle: "/b", ID: "id"}},
		{name: "no bundle: the working directory", args: []string{"create", "id"}, want: Command{Name: "create", ID: "id"}},
		{name: "root named create", args: []string{"--root", "create", "start", "id"}, want: Command{Name: "start", ID: "id"}},
		{name: "start", args: []string{"--root", "/r", "start", "id"}, want: Command{Name: "start", ID: "id"}},
		{name: "delete", args: []string{"delete", "--force", "id"}, want: Command{Name: "delete", ID: "id"}},
		{name: "exec with -b is no bundle", args: []string{"exec", "-b", "/b", "id"}, want: Command{Name: "exec", ID: "id"}},
		// What the shim runs for an exec (docker exec, CRI ExecSync).
		{name: "shim exec", args: []string{"--root", "/r", "--log", "/l", "--log-format", "json", "exec", "--process", "/tmp/runc-process1", "--detach", "--pid-file", "/p", "abc"},
			want: Command{Name: "exec", Process: "/tmp/runc-process1", ID: "abc", Log: "/l", LogFormat: "json"}},
		{name: "exec -p inline", args: []string{"exec", "-p=/p.json", "id"}, want: Command{Name: "exec", Process: "/p.json", ID: "id"}},
		{name: "exec env value like -p", args: []string{"exec", "-e", "-p", "--process", "/q", "id"}, want: Command{Name: "exec", Process: "/q", ID: "id"}},
		{name: "create has no process", args: []string{"create", "--process", "/p", "id"}, want: Command{Name: "create", ID: "id"}},
		{name: "version", args: []string{"--version"}, want: Command{}},
		{name: "nothing", args: nil, want: Command{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Parse(tc.args); got != tc.want {
				t.Errorf("Parse(%q) = %+v, want %+v", tc.args, got, tc.want)
			}
		})
	}
}

func TestBundleDir(t *testing.T) {
	if got, err := (Command{Name: "create", Bundle: "/b"}).BundleDir(); err != nil || got != "/b" {
		t.Errorf("BundleDir = %q, %v; want /b", got, err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := (Command{Name: "create"}).BundleDir(); err != nil || got != wd {
		t.Errorf("BundleDir without --bundle = %q, %v; want the working directory %q", got, err, wd)
	}
}

func TestEditFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	upper := func(b []byte) ([]byte, bool, error) {
		if string(b) == "same" {
			return b, false, nil
		}
		return append([]byte("edited:"), b...), true, nil
	}

	// A missing file is runc's to report.
	if err := EditFile(path, upper); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file was created: %v", err)
	}

	if err := os.WriteFile(path, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := EditFile(path, upper); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "edited:x" {
		t.Errorf("file = %q, want %q", got, "edited:x")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after edit = %v, %v; want 0640 kept", fi.Mode(), err)
	}

	// No change: the file is not rewritten (same inode).
	if err := os.WriteFile(path, []byte("same"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	if err := EditFile(path, upper); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if !os.SameFile(before, after) {
		t.Error("unchanged file was replaced")
	}

	// An edit error names the file and leaves it alone.
	boom := errors.New("boom")
	err = EditFile(path, func([]byte) ([]byte, bool, error) { return nil, false, boom })
	if !errors.Is(err, boom) {
		t.Errorf("edit error = %v, want it wrapped", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory after edits has %d entries, want only config.json (no temp file left)", len(entries))
	}
}

func TestRealRunc(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "runc")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := RealRunc(fake); err != nil || got != fake {
		t.Errorf("RealRunc(%q) = %q, %v", fake, got, err)
	}
	t.Setenv("PATH", dir)
	if got, err := RealRunc(""); err != nil || got != fake {
		t.Errorf("RealRunc from PATH = %q, %v; want %q", got, err, fake)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RealRunc(self); err == nil {
		t.Error("RealRunc(the running binary) = nil error, want a refusal (it would exec itself)")
	}
	if _, err := RealRunc(filepath.Join(dir, "missing")); err == nil {
		t.Error("RealRunc(missing file) = nil error")
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := RealRunc(""); err == nil {
		t.Error("RealRunc with no runc on PATH = nil error")
	}
}

// TestLogError: the wrapper's error goes to runc's log file in runc's
// format, where containerd's shim reads the runtime's error from.
func TestLogError(t *testing.T) {
	for _, format := range []string{"json", "text", ""} {
		t.Run("format "+format, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "log.json")
			if err := os.WriteFile(log, []byte(`{"level":"info","msg":"earlier"}`+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			msg := `netshim-oci: container c1: refused "x"`
			if err := LogError(Command{Log: log, LogFormat: format}, msg); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(log)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) != 2 || lines[0] != `{"level":"info","msg":"earlier"}` {
				t.Fatalf("log %q: want the earlier line kept and one appended", b)
			}
			if format == "json" {
				var e struct{ Level, Msg, Time string }
				if err := json.Unmarshal([]byte(lines[1]), &e); err != nil || e.Level != "error" || e.Msg != msg || e.Time == "" {
					t.Fatalf("json line %q: %+v, %v", lines[1], e, err)
				}
				return
			}
			if !strings.Contains(lines[1], "level=error") || !strings.Contains(lines[1], `msg="netshim-oci: container c1: refused \"x\""`) {
				t.Fatalf("text line %q", lines[1])
			}
		})
	}
	if err := LogError(Command{}, "x"); err != nil {
		t.Errorf("no --log: %v, want nothing done", err)
	}
}
