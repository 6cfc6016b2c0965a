package daemonjson

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

var wrapper = Runtime{Path: "/usr/bin/netshim-oci", RuntimeArgs: []string{"--netshim-netns-dir=/run/netshim/netns"}}

// TestRegister: the runtime is added under "runtimes" of every file
// Docker reads, keeping every other key and their order, and replacing an
// older entry of its own; files Docker would refuse, and one whose
// default-runtime is the runtime, are refused with the reason.
func TestRegister(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		want      string // the file after, compact; "" when in must not change
		wantErr   string
		unchanged bool
	}{
		{name: "absent (empty)", in: ``, want: `{"runtimes":{"netshim-oci":{"path":"/usr/bin/netshim-oci","runtimeArgs":["--netshim-netns-dir=/run/netshim/netns"]}}}`},
		{name: "empty object", in: `{}`, want: `{"runtimes":{"netshim-oci":{"path":"/usr/bin/netshim-oci","runtimeArgs":["--netshim-netns-dir=/run/netshim/netns"]}}}`},
		{name: "other keys, order kept", in: `{"log-driver": "json-file", "storage-driver": "overlay2", "debug": true}`,
			want: `{"log-driver":"json-file","storage-driver":"overlay2","debug":true,"runtimes":{"netshim-oci":{"path":"/usr/bin/netshim-oci","runtimeArgs":["--netshim-netns-dir=/run/netshim/netns"]}}}`},
		{name: "other runtimes", in: `{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace"]}}, "debug": false}`,
			want: `{"runtimes":{"netshim-oci":{"path":"/usr/bin/netshim-oci","runtimeArgs":["--netshim-netns-dir=/run/netshim/netns"]},"runsc":{"path":"/usr/bin/runsc","runtimeArgs":["--platform=ptrace"]}},"debug":false}`},
		{name: "default-runtime of another", in: `{"default-runtime": "runc"}`,
			want: `{"default-runtime":"runc","runtimes":{"netshim-oci":{"path":"/usr/bin/netshim-oci","runtimeArgs":["--netshim-netns-dir=/run/netshim/netns"]}}}`},
		{name: "an older entry replaced", in: `{"runtimes": {"netshim-oci": {"path": "/opt/netshim-oci"}}}`,
			want: `{"runtimes":{"netshim-oci":{"path":"/usr/bin/netshim-oci","runtimeArgs":["--netshim-netns-dir=/run/netshim/netns"]}}}`},
		{name: "already registered", in: `{"runtimes": {"netshim-oci": {"path": "/usr/bin/netshim-oci", "runtimeArgs": ["--netshim-netns-dir=/run/netshim/netns"]}}}`, unchanged: true},
		{name: "null runtimes", in: `{"runtimes": null}`, want: `{"runtimes":{"netshim-oci":{"path":"/usr/bin/netshim-oci","runtimeArgs":["--netshim-netns-dir=/run/netshim/netns"]}}}`},
		{name: "default-runtime is the wrapper", in: `{"default-runtime": "netshim-oci"}`, wantErr: "would run every container"},
		{name: "comments", in: "{\n  // debug\n  \"debug\": true\n}", wantErr: "not JSON Docker reads"},
		{name: "trailing comma", in: `{"debug": true,}`, wantErr: "not JSON Docker reads"},
		{name: "not an object", in: `["debug"]`, wantErr: "not a JSON object"},
		{name: "two objects", in: `{} {}`, wantErr: "follows the top-level object"},
		{name: "duplicate key", in: `{"debug": true, "debug": false}`, wantErr: "twice"},
		{name: "runtimes not an object", in: `{"runtimes": ["runc"]}`, wantErr: "not an object of runtimes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := Register([]byte(tc.in), "netshim-oci", wrapper)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.unchanged {
				if changed || string(out) != tc.in {
					t.Errorf("changed %v, out %s: want the file as it was", changed, out)
				}
				return
			}
			if !changed {
				t.Error("changed false")
			}
			if got := compact(t, out); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if !strings.HasSuffix(string(out), "}\n") {
				t.Errorf("no final newline: %q", out)
			}
			rt, ok, err := Registered(out, "netshim-oci")
			if err != nil || !ok || rt.Path != wrapper.Path {
				t.Errorf("Registered = %+v, %v, %v", rt, ok, err)
			}
		})
	}
	if _, _, err := Register([]byte(`{}`), "netshim-oci", Runtime{}); err == nil {
		t.Error("a runtime without a path was registered")
	}
}

// TestUnregister: the runtime goes and everything else stays; "runtimes"
// stays, empty, when it was the only one (dockerd replaces its runtimes on
// reload only when the file sets the key); a file without it is unchanged.
func TestUnregister(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		changed        bool
		wantErr        string
	}{
		{name: "the only runtime", in: `{"debug": true, "runtimes": {"netshim-oci": {"path": "/usr/bin/netshim-oci"}}}`, want: `{"debug":true,"runtimes":{}}`, changed: true},
		{name: "among others", in: `{"runtimes": {"netshim-oci": {"path": "/x"}, "runsc": {"path": "/usr/bin/runsc"}}, "debug": true}`,
			want: `{"runtimes":{"runsc":{"path":"/usr/bin/runsc"}},"debug":true}`, changed: true},
		{name: "not registered", in: `{"debug": true}`, want: `{"debug":true}`},
		{name: "empty", in: ``, want: ``},
		{name: "comments", in: "// x\n{}", wantErr: "not JSON Docker reads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := Unregister([]byte(tc.in), "netshim-oci")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			if !tc.changed {
				if string(out) != tc.in {
					t.Errorf("out %q, want the file as it was", out)
				}
				return
			}
			if got := compact(t, out); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func compact(t *testing.T, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, b)
	}
	return out.String()
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "", want: []string{}},
		{in: `{}`, want: []string{}},
		{in: `{"runtimes": null}`, want: []string{}},
		{in: `{"runtimes": {"runsc": {"path": "/r"}, "netshim-oci": {"path": "/w"}}}`, want: []string{"netshim-oci", "runsc"}},
		{in: `{"runtimes": []}`, err: true},
		{in: `{// comment
}`, err: true},
	} {
		got, err := Names([]byte(tc.in))
		if (err != nil) != tc.err || (!tc.err && !slices.Equal(got, tc.want)) {
			t.Errorf("Names(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}
