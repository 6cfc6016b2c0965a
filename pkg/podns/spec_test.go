package podns

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// acceptAll takes any marker, as an ApplyToConfig caller may (the
// wrapper's Verifier is tested apart, in marker_test.go).
func acceptAll(value string) (Paths, error) { return ParseEnv(value) }

func TestApplyToConfig(t *testing.T) {
	marker := EnvKey + "=net=/d/p.net"
	for _, tc := range []struct {
		name    string
		in      string
		accept  func(string) (Paths, error)
		changed bool
		wantNS  []ociNamespace
		wantEnv []string
		wantErr string
	}{
		{name: "no process", in: `{"ociVersion":"1.2.0"}`},
		{name: "no env", in: `{"process":{"args":["/pause"]}}`},
		{name: "env without marker", in: `{"process":{"env":["PATH=/bin"]}}`},
		{
			// What Docker writes for network mode "none": a new netns.
			name:    "docker none network",
			in:      `{"process":{"env":["PATH=/bin","` + marker + `","HOSTNAME=p"]},"linux":{"namespaces":[{"type":"mount"},{"type":"network"},{"type":"uts"},{"type":"pid"},{"type":"ipc"}]}}`,
			changed: true,
			wantNS:  []ociNamespace{{Type: "mount"}, {Type: "network", Path: "/d/p.net"}, {Type: "uts"}, {Type: "pid"}, {Type: "ipc"}},
			wantEnv: []string{"PATH=/bin", "HOSTNAME=p"},
		},
		{
			// Network mode container:<id>: Docker's path is replaced.
			name:    "joined netns replaced",
			in:      `{"process":{"env":["` + marker + `"]},"linux":{"namespaces":[{"type":"network","path":"/proc/42/ns/net"}]}}`,
			changed: true,
			wantNS:  []ociNamespace{{Type: "network", Path: "/d/p.net"}},
			wantEnv: []string{},
		},
		{
			name:    "no network entry: added",
			in:      `{"process":{"env":["` + EnvKey + `=net=/d/p.net,ipc=/d/p.ipc"]},"linux":{"namespaces":[{"type":"ipc"}]}}`,
			changed: true,
			wantNS:  []ociNamespace{{Type: "ipc", Path: "/d/p.ipc"}, {Type: "network", Path: "/d/p.net"}},
			wantEnv: []string{},
		},
		{
			name:    "no linux section",
			in:      `{"process":{"env":["` + marker + `"]}}`,
			changed: true,
			wantNS:  []ociNamespace{{Type: "network", Path: "/d/p.net"}},
			wantEnv: []string{},
		},
		{name: "accept refuses", in: `{"process":{"env":["` + EnvKey + `=net=/proc/1/ns/net"]}}`, accept: func(string) (Paths, error) { return nil, errors.New("refused: unsigned") }, wantErr: "refused: unsigned"},
		{name: "bad marker", in: `{"process":{"env":["` + EnvKey + `=pid=/x"]}}`, wantErr: "cannot be pinned"},
		{name: "bad JSON", in: `{"process":`, wantErr: "parsing the runtime config"},
		{name: "env not a list", in: `{"process":{"env":"x"}}`, wantErr: "process.env"},
		{name: "namespaces not a list", in: `{"process":{"env":["` + marker + `"]},"linux":{"namespaces":{}}}`, wantErr: "linux.namespaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			accept := tc.accept
			if accept == nil {
				accept = acceptAll
			}
			out, changed, err := ApplyToConfig([]byte(tc.in), accept)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.changed {
				t.Fatalf("changed = %v, want %v", changed, tc.changed)
			}
			if !changed {
				if string(out) != tc.in {
					t.Errorf("unchanged config rewritten: %s", out)
				}
				return
			}
			var cfg struct {
				Process struct {
					Env []string `json:"env"`
				} `json:"process"`
				Linux struct {
					Namespaces []ociNamespace `json:"namespaces"`
				} `json:"linux"`
			}
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Linux.Namespaces, tc.wantNS) {
				t.Errorf("namespaces = %+v, want %+v", cfg.Linux.Namespaces, tc.wantNS)
			}
			if !reflect.DeepEqual(cfg.Process.Env, tc.wantEnv) {
				t.Errorf("env = %q, want %q", cfg.Process.Env, tc.wantEnv)
			}
		})
	}
}

func TestApplyToConfigKeepsTheRest(t *testing.T) {
	in := `{"ociVersion":"1.0.2","hostname":"p","process":{"args":["/pause"],"oomScoreAdj":-998,"env":["` + EnvKey + `=net=/d/p.net"]},"linux":{"sysctls":{"net.ipv4.ip_forward":"1"},"namespaces":[{"type":"network"}]},"mounts":[{"destination":"/proc"}]}`
	out, changed, err := ApplyToConfig([]byte(in), acceptAll)
	if err != nil || !changed {
		t.Fatalf("ApplyToConfig = %v, %v", changed, err)
	}
	var got, want map[string]any
	_ = json.Unmarshal(out, &got)
	_ = json.Unmarshal([]byte(strings.Replace(strings.Replace(in, `"`+EnvKey+`=net=/d/p.net"`, "", 1), `{"type":"network"}`, `{"type":"network","path":"/d/p.net"}`, 1)), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config changed beyond the marker and the namespace:\n got %v\nwant %v", got, want)
	}
}

func TestApplyToConfigAcceptsTheMarkersValue(t *testing.T) {
	var got []string
	accept := func(v string) (Paths, error) { got = append(got, v); return ParseEnv(v) }
	in := `{"process":{"env":["A=1","` + EnvKey + `=net=/d/p.net,uts=/d/p.uts"]}}`
	if _, _, err := ApplyToConfig([]byte(in), accept); err != nil {
		t.Fatal(err)
	}
	if want := []string{"net=/d/p.net,uts=/d/p.uts"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("accept saw %q, want %q", got, want)
	}
}

func TestApplyToConfigDropsLibnetworkHook(t *testing.T) {
	setkey := `{"path":"/proc/27153/exe","args":["libnetwork-setkey","-exec-root=/var/run/docker","d1c1","f5ec"]}`
	other := `{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}`
	for _, tc := range []struct {
		name, hooks, want string
		marker            string
	}{
		{name: "only setkey", hooks: `{"prestart":[` + setkey + `]}`, marker: "net=/d/p.net", want: ``},
		{name: "setkey and another", hooks: `{"prestart":[` + setkey + `,` + other + `],"poststop":[` + other + `]}`, marker: "net=/d/p.net",
			want: `{"poststop":[` + other + `],"prestart":[` + other + `]}`},
		{name: "createRuntime", hooks: `{"createRuntime":[` + setkey + `]}`, marker: "net=/d/p.net", want: ``},
		{name: "no net pinned: kept", hooks: `{"prestart":[` + setkey + `]}`, marker: "ipc=/d/p.ipc", want: `{"prestart":[` + setkey + `]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := `{"process":{"env":["` + EnvKey + `=` + tc.marker + `"]},"hooks":` + tc.hooks + `}`
			out, _, err := ApplyToConfig([]byte(in), acceptAll)
			if err != nil {
				t.Fatal(err)
			}
			var cfg map[string]json.RawMessage
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			var got, want any
			if tc.want != "" {
				_ = json.Unmarshal(cfg["hooks"], &got)
				_ = json.Unmarshal([]byte(tc.want), &want)
			} else if _, ok := cfg["hooks"]; ok {
				t.Fatalf("hooks = %s, want none", cfg["hooks"])
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("hooks = %s, want %s", cfg["hooks"], tc.want)
			}
		})
	}
	if _, _, err := ApplyToConfig([]byte(`{"process":{"env":["`+EnvKey+`=net=/d/p.net"]},"hooks":{"prestart":{}}}`), acceptAll); err == nil {
		t.Error("hooks of the wrong shape: no error")
	}
}

func TestStripFromProcess(t *testing.T) {
	in := `{"args":["sh"],"env":["A=1","` + EnvKey + `=net=/d/p.net","B=2"],"cwd":"/"}`
	out, changed, err := StripFromProcess([]byte(in))
	if err != nil || !changed {
		t.Fatalf("StripFromProcess = %v, %v", changed, err)
	}
	var p struct {
		Args []string `json:"args"`
		Env  []string `json:"env"`
		Cwd  string   `json:"cwd"`
	}
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Env, []string{"A=1", "B=2"}) || p.Cwd != "/" || len(p.Args) != 1 {
		t.Errorf("process after strip = %+v", p)
	}
	same := `{"env":["A=1"]}`
	if out, changed, err := StripFromProcess([]byte(same)); err != nil || changed || string(out) != same {
		t.Errorf("process without marker: %s, %v, %v", out, changed, err)
	}
	if _, _, err := StripFromProcess([]byte(`[`)); err == nil {
		t.Error("bad JSON: no error")
	}
}

// Docker gives a container with a network namespace of its own its default
// net sysctls; in a pod's pinned namespaces netshim wrote the pod's before
// the ADD, and runc must not write any again.
func TestApplyToConfigDropsSysctlsOfPinnedNamespaces(t *testing.T) {
	docker := `"net.ipv4.ip_unprivileged_port_start":"0","net.ipv4.ping_group_range":"0 2147483647","kernel.shm_rmid_forced":"1","net/ipv4/conf/default/rp_filter":"2"`
	for _, tc := range []struct {
		name   string
		marker string
		in     string // linux.sysctl's members
		want   map[string]string
	}{
		{name: "net pinned: net ones dropped, IPC kept", marker: "net=/d/p.net", in: docker, want: map[string]string{"kernel.shm_rmid_forced": "1"}},
		{name: "net and IPC pinned: all dropped", marker: "net=/d/p.net,ipc=/d/p.ipc,uts=/d/p.uts", in: docker, want: nil},
		{name: "IPC pinned only: net ones kept", marker: "ipc=/d/p.ipc", in: docker, want: map[string]string{
			"net.ipv4.ip_unprivileged_port_start": "0", "net.ipv4.ping_group_range": "0 2147483647", "net/ipv4/conf/default/rp_filter": "2"}},
		{name: "a name runc refuses is left to it", marker: "net=/d/p.net", in: `"net..x":"1","fs.file-max":"9"`, want: map[string]string{"net..x": "1", "fs.file-max": "9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := `{"process":{"env":["` + EnvKey + `=` + tc.marker + `"]},"linux":{"sysctl":{` + tc.in + `}}}`
			out, changed, err := ApplyToConfig([]byte(in), acceptAll)
			if err != nil || !changed {
				t.Fatalf("ApplyToConfig: changed %v, %v", changed, err)
			}
			var cfg struct {
				Linux map[string]json.RawMessage `json:"linux"`
			}
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			var got map[string]string
			if raw, ok := cfg.Linux["sysctl"]; ok {
				if err := json.Unmarshal(raw, &got); err != nil {
					t.Fatal(err)
				}
				if len(got) == 0 {
					t.Errorf("an empty linux.sysctl is left: %s", raw)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("linux.sysctl = %v, want %v", got, tc.want)
			}
		})
	}
	if _, _, err := ApplyToConfig([]byte(`{"process":{"env":["`+EnvKey+`=net=/d/p.net"]},"linux":{"sysctl":["x"]}}`), acceptAll); err == nil || !strings.Contains(err.Error(), "linux.sysctl") {
		t.Errorf("a malformed linux.sysctl: error %v, want one naming it", err)
	}
}
