package podns

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// acceptAll takes any marker, as an ApplyToConfig caller may (the
// wrapper's Verifier is tested apart, in marker_test.go).
func acceptAll(value string) (Marker, error) { return ParseMarker(value) }

func TestApplyToConfig(t *testing.T) {
	marker := EnvKey + "=net=/d/p.net"
	for _, tc := range []struct {
		name    string
		in      string
		accept  func(string) (Marker, error)
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
		{name: "accept refuses", in: `{"process":{"env":["` + EnvKey + `=net=/proc/1/ns/net"]}}`, accept: func(string) (Marker, error) { return Marker{}, errors.New("refused: unsigned") }, wantErr: "refused: unsigned"},
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
			out, _, changed, err := ApplyToConfig([]byte(tc.in), accept)
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
	out, _, changed, err := ApplyToConfig([]byte(in), acceptAll)
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
	accept := func(v string) (Marker, error) { got = append(got, v); return ParseMarker(v) }
	in := `{"process":{"env":["A=1","` + EnvKey + `=net=/d/p.net,uts=/d/p.uts"]}}`
	if _, _, _, err := ApplyToConfig([]byte(in), accept); err != nil {
		t.Fatal(err)
	}
	if want := []string{"net=/d/p.net,uts=/d/p.uts"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("accept saw %q, want %q", got, want)
	}
	// The marker accept returned comes back, for the wrapper.
	want := Marker{Paths: Paths{Net: "/d/p.net"}, StrictGroups: true, Groups: []uint32{7}}
	_, m, _, err := ApplyToConfig([]byte(in), func(string) (Marker, error) { return want, nil })
	if err != nil || !reflect.DeepEqual(m, want) {
		t.Errorf("ApplyToConfig returned the marker %+v, %v; want %+v", m, err, want)
	}
	if _, m, changed, err := ApplyToConfig([]byte(`{"process":{"env":["A=1"]}}`), acceptAll); err != nil || changed || !reflect.DeepEqual(m, Marker{}) {
		t.Errorf("no marker: %+v, %v, %v; want nothing asked, unchanged", m, changed, err)
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
			out, _, _, err := ApplyToConfig([]byte(in), acceptAll)
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
	if _, _, _, err := ApplyToConfig([]byte(`{"process":{"env":["`+EnvKey+`=net=/d/p.net"]},"hooks":{"prestart":{}}}`), acceptAll); err == nil {
		t.Error("hooks of the wrong shape: no error")
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
			out, _, changed, err := ApplyToConfig([]byte(in), acceptAll)
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
	if _, _, _, err := ApplyToConfig([]byte(`{"process":{"env":["`+EnvKey+`=net=/d/p.net"]},"linux":{"sysctl":["x"]}}`), acceptAll); err == nil || !strings.Contains(err.Error(), "linux.sysctl") {
		t.Errorf("a malformed linux.sysctl: error %v, want one naming it", err)
	}
}

// userMarker is the marker of a pod in its own user namespace, as netshim
// writes it (unsigned here: acceptAll takes it).
const userMarker = "gidmap=0:200000:65536,net=/d/p.net,uidmap=0:100000:65536+65536:300000:1,user=/d/p.user"

func TestApplyToConfigUserNamespace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		linux     string
		wantNS    []ociNamespace
		wantLinux []string // the members linux keeps
	}{
		{
			name:      "Docker's namespaces, no user entry: added",
			linux:     `{"namespaces":[{"type":"mount"},{"type":"network"},{"type":"pid"}],"maskedPaths":["/proc/kcore"]}`,
			wantNS:    []ociNamespace{{Type: "mount"}, {Type: "network", Path: "/d/p.net"}, {Type: "pid"}, {Type: "user", Path: "/d/p.user"}},
			wantLinux: []string{"maskedPaths", "namespaces"},
		},
		{
			// Docker with userns-remap: a new user namespace and its maps,
			// which runc would check against the pinned one's.
			name:      "userns-remap: entry replaced, maps removed",
			linux:     `{"uidMappings":[{"containerID":0,"hostID":1000,"size":1}],"gidMappings":[{"containerID":0,"hostID":1000,"size":1}],"namespaces":[{"type":"user"},{"type":"network"}]}`,
			wantNS:    []ociNamespace{{Type: "user", Path: "/d/p.user"}, {Type: "network", Path: "/d/p.net"}},
			wantLinux: []string{"namespaces"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := `{"process":{"env":["` + EnvKey + `=` + userMarker + `"]},"linux":` + tc.linux + `}`
			out, m, changed, err := ApplyToConfig([]byte(in), acceptAll)
			if err != nil || !changed {
				t.Fatalf("ApplyToConfig: changed %v, %v", changed, err)
			}
			if m.Paths[User] != "/d/p.user" || len(m.UIDs) != 2 {
				t.Errorf("marker returned: %+v", m)
			}
			var cfg struct {
				Linux map[string]json.RawMessage `json:"linux"`
			}
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			var nss []ociNamespace
			if err := json.Unmarshal(cfg.Linux["namespaces"], &nss); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(nss, tc.wantNS) {
				t.Errorf("namespaces = %+v, want %+v", nss, tc.wantNS)
			}
			var keys []string
			for k := range cfg.Linux {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if !reflect.DeepEqual(keys, tc.wantLinux) {
				t.Errorf("linux has %q, want %q", keys, tc.wantLinux)
			}
		})
	}
}

func TestApplyToConfigIDMapMounts(t *testing.T) {
	proc := `{"destination":"/proc","type":"proc","source":"proc","options":["nosuid","noexec","nodev"]}`
	data := `{"destination":"/data","type":"bind","source":"/var/lib/kubelet/pods/u/volumes/v","options":["rbind","rprivate"]}`
	// Docker 20.10 writes a volume's type "bind"; runc also takes a
	// mount with the bind option and another type.
	spaced := `{"destination":"/a, b+c","type":"none","source":"/s","options":["rbind","rw"]}`
	plain := `{"destination":"/etc/hosts","type":"bind","source":"/h","options":["rbind","rprivate"]}`
	tmpfs := `{"destination":"/scratch","type":"tmpfs","source":"tmpfs","options":["nosuid"]}`
	wantMaps := `"uidMappings":[{"containerID":0,"hostID":100000,"size":65536},{"containerID":65536,"hostID":300000,"size":1}],` +
		`"gidMappings":[{"containerID":0,"hostID":200000,"size":65536}]`
	config := func(dests ...string) string {
		esc := make([]string, len(dests))
		for i, d := range dests {
			esc[i] = escapeDest(d)
		}
		marker := userMarker + ",idmap=" + strings.Join(esc, "+")
		return `{"process":{"env":["` + EnvKey + `=` + marker + `"]},"mounts":[` + strings.Join([]string{proc, data, spaced, plain, tmpfs}, ",") + `]}`
	}
	for _, tc := range []struct {
		name    string
		dests   []string
		mapped  []int // the mounts that get the maps
		wantErr string
	}{
		{name: "one", dests: []string{"/data"}, mapped: []int{1}},
		{name: "a destination with a comma, a space and a plus; one not clean", dests: []string{"/a, b+c", "/data/"}, mapped: []int{1, 2}},
		{name: "no such mount", dests: []string{"/data", "/nowhere"}, wantErr: "/nowhere"},
		{name: "not a bind mount", dests: []string{"/scratch"}, wantErr: "/scratch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, _, err := ApplyToConfig([]byte(config(tc.dests...)), acceptAll)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "no bind mount") {
					t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				Mounts []json.RawMessage `json:"mounts"`
			}
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			for i, in := range []string{proc, data, spaced, plain, tmpfs} {
				want := in
				if slices.Contains(tc.mapped, i) {
					want = in[:len(in)-1] + "," + wantMaps + "}"
				}
				if !slices.Contains(tc.mapped, i) && string(cfg.Mounts[i]) != in {
					t.Errorf("mounts[%d] = %s, want it untouched: %s", i, cfg.Mounts[i], in)
				}
				var got, wantV any
				_ = json.Unmarshal(cfg.Mounts[i], &got)
				_ = json.Unmarshal([]byte(want), &wantV)
				if !reflect.DeepEqual(got, wantV) {
					t.Errorf("mounts[%d] = %s, want %s", i, cfg.Mounts[i], want)
				}
			}
		})
	}
}

func TestApplyToConfigStrictGroups(t *testing.T) {
	for _, tc := range []struct {
		name   string
		user   string // process.user; "" for none
		groups string // the marker's item's value
		want   string // process.user after: a changed one is re-encoded, keys sorted
	}{
		{
			// The image's /etc/group makes root a member of 1 (bin) and
			// 10 (wheel); the pod asked for 1000 and 3000.
			name: "image groups dropped", user: `{"uid":0,"gid":0,"additionalGids":[0,1,10,1000,3000]}`, groups: "1000+3000",
			want: `{"additionalGids":[0,1000,3000],"gid":0,"uid":0}`,
		},
		{name: "no groups asked: the gid only", user: `{"uid":1000,"gid":1000,"additionalGids":[1000,27,4]}`, groups: "", want: `{"additionalGids":[1000],"gid":1000,"uid":1000}`},
		{name: "a group Docker left out is added", user: `{"uid":5,"gid":5,"additionalGids":[44]}`, groups: "7+44", want: `{"additionalGids":[44,7],"gid":5,"uid":5}`},
		{name: "duplicates once", user: `{"uid":5,"gid":5,"additionalGids":[7,7,5]}`, groups: "7+7", want: `{"additionalGids":[7,5],"gid":5,"uid":5}`},
		{name: "all dropped", user: `{"uid":5,"gid":5,"additionalGids":[9]}`, groups: "", want: `{"additionalGids":[],"gid":5,"uid":5}`},
		{name: "nothing to drop: untouched", user: `{"gid":0,"uid":0,"additionalGids":[0,1000]}`, groups: "1000", want: `{"gid":0,"uid":0,"additionalGids":[0,1000]}`},
		{name: "no list, none asked: untouched", user: `{"uid":1,"gid":1}`, groups: "", want: `{"uid":1,"gid":1}`},
		{name: "no user", groups: "8", want: `{"additionalGids":[8]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user := ""
			if tc.user != "" {
				user = `"user":` + tc.user + `,`
			}
			in := `{"process":{` + user + `"env":["` + EnvKey + `=dir=/d,groups=` + tc.groups + `"]}}`
			out, m, changed, err := ApplyToConfig([]byte(in), acceptAll)
			if err != nil || !changed || !m.StrictGroups {
				t.Fatalf("ApplyToConfig: %+v, changed %v, %v", m, changed, err)
			}
			var cfg struct {
				Process map[string]json.RawMessage `json:"process"`
			}
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			if got := string(cfg.Process["user"]); got != tc.want {
				t.Errorf("process.user = %s, want %s", got, tc.want)
			}
		})
	}
	if _, _, _, err := ApplyToConfig([]byte(`{"process":{"user":{"additionalGids":"x"},"env":["`+EnvKey+`=dir=/d,groups="]}}`), acceptAll); err == nil || !strings.Contains(err.Error(), "process.user") {
		t.Errorf("a malformed process.user: error %v, want one naming it", err)
	}
}

func TestApplyToProcess(t *testing.T) {
	dir := t.TempDir()
	key := testKey(t, dir)
	v := Verifier{ReadKey: ReadKey, Check: func(string, Kind) error { return nil }}
	strict := Marker{Paths: Paths{Net: dir + "/p.net"}, StrictGroups: true, Groups: []uint32{1000}}.Env(key)
	netOnly := Paths{Net: dir + "/p.net"}.Env(key)
	otherKey := testKey(t, t.TempDir())
	for _, tc := range []struct {
		name     string
		in       string
		changed  bool
		wantUser string
		wantErr  string
	}{
		{name: "no marker", in: `{"user":{"uid":0,"gid":0,"additionalGids":[0,10]},"env":["A=1"]}`, wantUser: `{"uid":0,"gid":0,"additionalGids":[0,10]}`},
		{name: "no env", in: `{"args":["sh"]}`},
		{name: "empty marker: stripped", in: `{"user":{"uid":0,"gid":0,"additionalGids":[0,10]},"env":["A=1","` + EnvKey + `="]}`, changed: true, wantUser: `{"uid":0,"gid":0,"additionalGids":[0,10]}`},
		{name: "signed, no Strict: stripped", in: `{"user":{"uid":0,"gid":0,"additionalGids":[0,10]},"env":["A=1","` + netOnly + `"]}`, changed: true, wantUser: `{"uid":0,"gid":0,"additionalGids":[0,10]}`},
		{name: "signed Strict: filtered", in: `{"user":{"uid":0,"gid":0,"additionalGids":[0,10]},"env":["A=1","` + strict + `"]}`, changed: true, wantUser: `{"additionalGids":[0,1000],"gid":0,"uid":0}`},
		{name: "unsigned", in: `{"env":["A=1","` + EnvKey + `=dir=` + dir + `,groups=0"]}`, wantErr: "no netshim signature"},
		{name: "signed with another key", in: `{"env":["A=1","` + Marker{Dir: dir, StrictGroups: true}.Env(otherKey) + `"]}`, wantErr: "does not match"},
		{name: "bad JSON", in: `[`, wantErr: "parsing the process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := ApplyToProcess([]byte(tc.in), v.Accept)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || changed != tc.changed {
				t.Fatalf("ApplyToProcess: changed %v, %v; want changed %v", changed, err, tc.changed)
			}
			if !changed {
				if string(out) != tc.in {
					t.Errorf("unchanged process rewritten: %s", out)
				}
				return
			}
			var p map[string]json.RawMessage
			if err := json.Unmarshal(out, &p); err != nil {
				t.Fatal(err)
			}
			if string(p["env"]) != `["A=1"]` {
				t.Errorf("env = %s, want the marker gone", p["env"])
			}
			if string(p["user"]) != tc.wantUser {
				t.Errorf("user = %s, want %s", p["user"], tc.wantUser)
			}
		})
	}
}
