package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestClampConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		changed bool
		adj     any // process.oomScoreAdj after; nil: absent
		wantErr bool
	}{
		{name: "no process", in: `{"ociVersion":"1.0.2"}`},
		{name: "null process", in: `{"process":null}`},
		{name: "no oomScoreAdj", in: `{"process":{"args":["sh"]}}`},
		{name: "null oomScoreAdj", in: `{"process":{"oomScoreAdj":null}}`, adj: nil},
		{name: "sandbox -998", in: `{"process":{"args":["/pause"],"oomScoreAdj":-998}}`, changed: true, adj: 0.0},
		{name: "guaranteed -997", in: `{"process":{"oomScoreAdj":-997}}`, changed: true, adj: 0.0},
		{name: "-1", in: `{"process":{"oomScoreAdj":-1}}`, changed: true, adj: 0.0},
		{name: "zero", in: `{"process":{"oomScoreAdj":0}}`, adj: 0.0},
		{name: "burstable 500", in: `{"process":{"oomScoreAdj":500}}`, adj: 500.0},
		{name: "bad JSON", in: `{"process":`, wantErr: true},
		{name: "process not an object", in: `{"process":[]}`, wantErr: true},
		{name: "oomScoreAdj not a number", in: `{"process":{"oomScoreAdj":"-998"}}`, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := clampConfig([]byte(tc.in))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("clampConfig(%s) = %s, want an error", tc.in, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			if !changed && string(out) != tc.in {
				t.Errorf("unchanged config rewritten: %s -> %s", tc.in, out)
			}
			var cfg struct {
				Process map[string]any `json:"process"`
			}
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatalf("output %s: %v", out, err)
			}
			if got := cfg.Process["oomScoreAdj"]; got != tc.adj {
				t.Errorf("oomScoreAdj = %v, want %v (output %s)", got, tc.adj, out)
			}
		})
	}
}

// TestClampConfigKeepsTheRest: every other member comes back byte for
// byte (a wrapper must not change what it does not mean to).
func TestClampConfigKeepsTheRest(t *testing.T) {
	in := `{"ociVersion":"1.0.2-dev","process":{"user":{"uid":0,"gid":0},"args":["/pause"],"env":["A=1"],"oomScoreAdj":-998,"capabilities":{"bounding":["CAP_CHOWN"]}},"root":{"path":"/x","readonly":true},"linux":{"resources":{"memory":{"limit":1048576}}}}`
	out, changed, err := clampConfig([]byte(in))
	if err != nil || !changed {
		t.Fatalf("clampConfig: changed=%v err=%v", changed, err)
	}
	var a, b map[string]any
	if err := json.Unmarshal([]byte(in), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatal(err)
	}
	a["process"].(map[string]any)["oomScoreAdj"] = 0.0
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("config changed beyond oomScoreAdj:\n in: %s\nout: %s", ja, jb)
	}
}

func TestClampBundle(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte(`{"process":{"oomScoreAdj":-998}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := clampBundle(dir); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != `{"process":{"oomScoreAdj":0}}` {
		t.Errorf("config.json = %s", data)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after the rewrite: %v, %v; want 0600", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("bundle holds %d entries after the rewrite, want config.json only", len(entries))
	}

	// Nothing to clamp: the file is not rewritten.
	if err := os.WriteFile(path, []byte(`{"process":{"oomScoreAdj":5}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	if err := clampBundle(dir); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if !os.SameFile(before, after) {
		t.Error("a config with nothing to clamp was replaced")
	}

	// No config: left to runc.
	if err := clampBundle(t.TempDir()); err != nil {
		t.Errorf("bundle without config.json: %v", err)
	}
	// A broken config is an error, not silently passed on.
	if err := os.WriteFile(path, []byte(`{`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := clampBundle(dir); err == nil {
		t.Error("broken config.json: no error")
	}
}

// TestMain runs main instead of the tests when the test binary is started
// as the wrapper by TestExecsRealRunc.
func TestMain(m *testing.M) {
	if os.Getenv("OOMCLAMP_TEST_AS_WRAPPER") == "1" {
		main()
		return // not reached: main execs or exits
	}
	os.Exit(m.Run())
}

// TestExecsRealRunc: the wrapper clamps the bundle, then execs the real
// runc with the same arguments (a script standing in for runc records
// them and the config it saw).
func TestExecsRealRunc(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"process":{"oomScoreAdj":-998}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(dir, "record")
	fake := filepath.Join(dir, "runc")
	script := "#!/bin/sh\n{ echo \"$@\"; cat " + bundle + "/config.json; } >" + record + "\nexit 3\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "--root", "/r", "create", "--bundle", bundle, "id1")
	cmd.Env = append(os.Environ(), "OOMCLAMP_TEST_AS_WRAPPER=1", "OOMCLAMP_RUNC="+fake)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
		t.Fatalf("wrapper: %v (want the fake runc's exit status 3)\n%s", err, out)
	}
	got, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	want := "--root /r create --bundle " + bundle + " id1\n" + `{"process":{"oomScoreAdj":0}}`
	if string(got) != want {
		t.Errorf("the real runc saw:\n%s\nwant:\n%s", got, want)
	}
}
