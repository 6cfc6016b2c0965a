package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	cniversion "github.com/containernetworking/cni/pkg/version"
)

// asPluginEnv makes the test binary run as the plugin: the exec tests
// below invoke it through libcni as a runtime would, over stdin, stdout
// and the CNI_* variables.
const asPluginEnv = "CNI_SLEEP_TEST_AS_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(asPluginEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// bridgeResult is what a bridge plugin at cniVersion 1.0.0 returns: the
// prevResult cni-sleep gets after it in a chain.
const bridgeResult = `{
  "cniVersion": "1.0.0",
  "interfaces": [
    {"name": "nsbench0", "mac": "6a:2b:3c:4d:5e:01"},
    {"name": "veth1234", "mac": "6a:2b:3c:4d:5e:02"},
    {"name": "eth0", "mac": "6a:2b:3c:4d:5e:03", "sandbox": "/var/run/netns/x"}
  ],
  "ips": [{"interface": 2, "address": "10.124.0.7/16", "gateway": "10.124.0.1"}],
  "routes": [{"dst": "0.0.0.0/0"}],
  "dns": {}
}`

func conf(t *testing.T, version, sleep string, prev string) []byte {
	t.Helper()
	c := map[string]any{"cniVersion": version, "name": "nsbench", "type": "cni-sleep"}
	if sleep != "" {
		c["sleep"] = sleep
	}
	if prev != "" {
		c["prevResult"] = json.RawMessage(prev)
	}
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// sleeper records the durations the plugin asked to sleep, instead of
// sleeping.
type sleeper struct{ slept []time.Duration }

func (s *sleeper) plugin() plugin {
	return plugin{sleep: func(d time.Duration) { s.slept = append(s.slept, d) }}
}

func TestAddSleepsThenPassesPrevResultOn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stdin     string
		wantSleep time.Duration
		wantCode  uint // 0: success
	}{
		{name: "150ms", stdin: string(conf(t, "1.0.0", "150ms", bridgeResult)), wantSleep: 150 * time.Millisecond},
		{name: "zero", stdin: string(conf(t, "1.0.0", "0s", bridgeResult)), wantSleep: 0},
		{name: "cniVersion 1.1.0", stdin: string(conf(t, "1.1.0", "2s", bridgeResult)), wantSleep: 2 * time.Second},
		{name: "no sleep key", stdin: string(conf(t, "1.0.0", "", bridgeResult)), wantCode: types.ErrInvalidNetworkConfig},
		{name: "sleep not a duration", stdin: string(conf(t, "1.0.0", "150", bridgeResult)), wantCode: types.ErrInvalidNetworkConfig},
		{name: "negative sleep", stdin: string(conf(t, "1.0.0", "-1s", bridgeResult)), wantCode: types.ErrInvalidNetworkConfig},
		{name: "first in the chain", stdin: string(conf(t, "1.0.0", "150ms", "")), wantCode: types.ErrInvalidNetworkConfig},
		{name: "prevResult not a result", stdin: string(conf(t, "1.0.0", "150ms", `{"ips":"x"}`)), wantCode: types.ErrDecodingFailure},
		{name: "bad JSON", stdin: `{"cniVersion":`, wantCode: types.ErrDecodingFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s sleeper
			c, res, err := s.plugin().add(&skel.CmdArgs{ContainerID: "c1", Netns: "/x", IfName: "eth0", StdinData: []byte(tc.stdin)})
			if tc.wantCode != 0 {
				var e *types.Error
				if !errors.As(err, &e) || e.Code != tc.wantCode {
					t.Fatalf("add = %v, want a CNI error with code %d", err, tc.wantCode)
				}
				if len(s.slept) != 0 {
					t.Errorf("slept %v before refusing the netconf", s.slept)
				}
				return
			}
			if err != nil {
				t.Fatalf("add: %v", err)
			}
			if !slices.Equal(s.slept, []time.Duration{tc.wantSleep}) {
				t.Errorf("slept %v, want [%v]", s.slept, tc.wantSleep)
			}
			if c.Sleep == "" || c.PrevResult == nil {
				t.Fatalf("add returned netconf %+v", c)
			}
			requireSameResult(t, res, bridgeResult)
		})
	}
}

func requireSameResult(t *testing.T, got types.Result, want string) {
	t.Helper()
	g, err := current.GetResult(got)
	if err != nil {
		t.Fatal(err)
	}
	var w current.Result
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	// GetResult converts to the library's newest version: compare the
	// contents, not the version stamp.
	g.CNIVersion, w.CNIVersion = "", ""
	gj, _ := json.Marshal(g)
	wj, _ := json.Marshal(&w)
	if string(gj) != string(wj) {
		t.Errorf("result\n%s\nwant the prevResult unchanged\n%s", gj, wj)
	}
}

func TestCheckValidatesWithoutSleeping(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stdin []byte
		ok    bool
	}{
		{"valid", conf(t, "1.0.0", "150ms", bridgeResult), true},
		{"no sleep key", conf(t, "1.0.0", "", bridgeResult), false},
		{"no prevResult", conf(t, "1.0.0", "150ms", ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s sleeper
			err := s.plugin().check(&skel.CmdArgs{StdinData: tc.stdin})
			if (err == nil) != tc.ok {
				t.Errorf("check = %v, want ok=%v", err, tc.ok)
			}
			if len(s.slept) != 0 {
				t.Errorf("CHECK slept %v", s.slept)
			}
		})
	}
}

// TestDelGCStatusAlwaysAnswer: DEL must succeed even for a netconf ADD
// refuses, so that a runtime can always tear down.
func TestDelGCStatusAlwaysAnswer(t *testing.T) {
	var s sleeper
	p := s.plugin()
	for _, stdin := range [][]byte{conf(t, "1.1.0", "150ms", ""), conf(t, "1.1.0", "", ""), []byte(`{`)} {
		args := &skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: stdin}
		if err := p.del(args); err != nil {
			t.Errorf("DEL of %s: %v", stdin, err)
		}
		if err := p.gc(args); err != nil {
			t.Errorf("GC of %s: %v", stdin, err)
		}
		if err := p.status(args); err != nil {
			t.Errorf("STATUS of %s: %v", stdin, err)
		}
	}
	if len(s.slept) != 0 {
		t.Errorf("slept %v", s.slept)
	}
}

// pluginDir puts this test binary, as cni-sleep, in a directory of its
// own and has it run as the plugin when executed.
func pluginDir(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "cni-sleep")); err != nil {
		t.Fatal(err)
	}
	t.Setenv(asPluginEnv, "1")
	// Under -race the plugin would otherwise sleep 1 s at exit (the race
	// runtime's default atexit_sleep_ms), every call.
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	return dir
}

func newExec() *invoke.DefaultExec {
	return &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: cniversion.PluginDecoder{}}
}

// TestExecAsPlugin runs the plugin as a runtime does: VERSION, ADD with a
// prevResult at cniVersion 0.4.0 (it comes back in that version, with the
// same contents), a refused ADD, CHECK and DEL through the exec protocol,
// and GC and STATUS through libcni's list API at cniVersion 1.1.0.
func TestExecAsPlugin(t *testing.T) {
	dir := pluginDir(t)
	path := filepath.Join(dir, "cni-sleep")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exec := newExec()

	info, err := invoke.GetVersionInfo(ctx, path, exec)
	if err != nil {
		t.Fatalf("VERSION: %v", err)
	}
	if want := []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}; !slices.Equal(info.SupportedVersions(), want) {
		t.Errorf("VERSION lists %v, want %v", info.SupportedVersions(), want)
	}

	args := func(cmd string) *invoke.Args {
		// The netns path does not exist: the plugin never enters it, and
		// skel lets a missing one through.
		return &invoke.Args{Command: cmd, ContainerID: "c1", NetNS: "/nonexistent/netns", IfName: "eth0", Path: dir}
	}
	prev := `{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"version":"4","interface":0,"address":"10.124.0.7/16","gateway":"10.124.0.1"}],"dns":{}}`
	res, err := invoke.ExecPluginWithResult(ctx, path, conf(t, "0.4.0", "1ms", prev), args("ADD"), exec)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if res.Version() != "0.4.0" {
		t.Errorf("ADD answered in version %s, want the netconf's 0.4.0", res.Version())
	}
	requireSameResult(t, res, `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"interface":0,"address":"10.124.0.7/16","gateway":"10.124.0.1"}],"dns":{}}`)

	_, err = invoke.ExecPluginWithResult(ctx, path, conf(t, "1.0.0", "soon", bridgeResult), args("ADD"), exec)
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig {
		t.Errorf("ADD with a bad sleep = %v, want CNI error %d", err, types.ErrInvalidNetworkConfig)
	}

	if err := invoke.ExecPluginWithoutResult(ctx, path, conf(t, "1.0.0", "150ms", bridgeResult), args("CHECK"), exec); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := invoke.ExecPluginWithoutResult(ctx, path, conf(t, "1.0.0", "150ms", ""), args("DEL"), exec); err != nil {
		t.Errorf("DEL: %v", err)
	}

	list, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.1.0","name":"nsbench","plugins":[{"type":"cni-sleep","sleep":"150ms"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{dir}, t.TempDir(), exec)
	if err := cni.GCNetworkList(ctx, list, &libcni.GCArgs{}); err != nil {
		t.Errorf("GC: %v", err)
	}
	if err := cni.GetStatusNetworkList(ctx, list); err != nil {
		t.Errorf("STATUS: %v", err)
	}
}
