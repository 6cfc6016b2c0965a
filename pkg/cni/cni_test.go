package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/network"
)

// testConfList is a chain whose plugins declare every capability the
// plugin passes, so the tests can see each one arrive.
const testConfList = `{
  "cniVersion": "1.0.0",
  "name": "testnet",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "capabilities": {"ipRanges": true, "dns": true},
     "ipam": {"type": "host-local"}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "bandwidth", "capabilities": {"bandwidth": true}}
  ]
}`

// bridgeResult is what the fake bridge answers to ADD: a host-side bridge
// address that is not the pod's, and a v6 then a v4 pod address, so that
// the ordering and filtering are visible.
const bridgeResult = `{
  "cniVersion": "1.0.0",
  "interfaces": [
    {"name": "cni0", "mac": "0a:58:0a:f4:01:01"},
    {"name": "veth1234", "mac": "0a:58:0a:f4:01:02"},
    {"name": "eth0", "mac": "0a:58:0a:f4:01:03", "sandbox": "/proc/42/ns/net"}
  ],
  "ips": [
    {"interface": 0, "address": "10.244.1.1/24"},
    {"interface": 2, "address": "fd00:10:244:1::5/64"},
    {"interface": 2, "address": "10.244.1.5/24", "gateway": "10.244.1.1"}
  ]
}`

var testPod = network.PodRef{Namespace: "ns1", Name: "pod1", UID: "uid-1", SandboxID: "sandbox0123456789"}

type testEnv struct {
	plugin  *Plugin
	exec    *fakeExec
	host    *fakeHost
	confDir string
	// forgot records the IPs whose host neighbour entries the plugin
	// deleted, one call a slice: the host's own table is left alone.
	neighMu sync.Mutex
	forgot  [][]net.IP
}

func (e *testEnv) forgetNeighbors(ips []net.IP) error {
	e.neighMu.Lock()
	defer e.neighMu.Unlock()
	e.forgot = append(e.forgot, ips)
	return nil
}

func (e *testEnv) forgotten() [][]net.IP {
	e.neighMu.Lock()
	defer e.neighMu.Unlock()
	return append([][]net.IP(nil), e.forgot...)
}

// newTestEnv returns an initialised plugin on a temp conf dir holding
// conf (none when empty) with a fake exec and host. The pod has a netns.
func newTestEnv(t *testing.T, conf string) *testEnv {
	t.Helper()
	return newTestEnvWith(t, conf, nil)
}

// newTestEnvWith is newTestEnv with the options changed by tweak.
func newTestEnvWith(t *testing.T, conf string, tweak func(*Options)) *testEnv {
	t.Helper()
	env := &testEnv{exec: newFakeExec(), host: newFakeHost(), confDir: t.TempDir()}
	if conf != "" {
		writeFile(t, env.confDir, "10-test.conflist", conf)
	}
	env.exec.results["bridge"] = bridgeResult
	env.host.setNetNS(testPod.SandboxID, "/proc/42/ns/net")
	opts := Options{
		ConfDir:    env.confDir,
		BinDirs:    []string{"/fake/bin"},
		CacheDir:   t.TempDir(),
		StateDir:   t.TempDir(),
		Exec:       env.exec,
		SyncPeriod: time.Hour, // tests resync explicitly unless they test the loop

		forgetNeighbors: env.forgetNeighbors,
	}
	if tweak != nil {
		tweak(&opts)
	}
	env.plugin = NewPlugin(opts)
	if err := env.plugin.Init(env.host, network.PluginConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.plugin.Stop)
	return env
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// normJSON re-encodes a JSON text so that key order does not matter.
func normJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON %s: %v", s, err)
	}
	return mustJSON(t, v)
}

func TestBuildRuntimeConf(t *testing.T) {
	base := runtimeConfInput{Pod: testPod, NetNS: "/proc/1/ns/net", IfName: "eth0", CacheDir: "/cache"}
	with := func(f func(*runtimeConfInput)) runtimeConfInput {
		in := base
		f(&in)
		return in
	}
	tests := []struct {
		name    string
		in      runtimeConfInput
		caps    string // expected CapabilityArgs as JSON
		wantErr string
	}{
		{name: "nothing optional", in: base, caps: `{}`},
		{
			name: "port mappings without host port are dropped",
			in: with(func(in *runtimeConfInput) {
				in.PortMappings = []network.PortMapping{
					{Protocol: "tcp", ContainerPort: 80, HostPort: 8080},
					{Protocol: "udp", ContainerPort: 53},
					{Protocol: "UDP", ContainerPort: 53, HostPort: 5353, HostIP: "127.0.0.1"},
					{ContainerPort: 9000, HostPort: 9000},
				}
			}),
			caps: `{"portMappings":[
				{"hostPort":8080,"containerPort":80,"protocol":"tcp"},
				{"hostPort":5353,"containerPort":53,"protocol":"udp","hostIP":"127.0.0.1"},
				{"hostPort":9000,"containerPort":9000,"protocol":"tcp"}]}`,
		},
		{
			name: "only container ports: no portMappings key",
			in: with(func(in *runtimeConfInput) {
				in.PortMappings = []network.PortMapping{{Protocol: "tcp", ContainerPort: 80}}
			}),
			caps: `{}`,
		},
		{
			name: "ingress only",
			in: with(func(in *runtimeConfInput) {
				in.Annotations = map[string]string{network.IngressBandwidthAnnotation: "10M", "other": "x"}
			}),
			caps: `{"bandwidth":{"ingressRate":10000000,"ingressBurst":2147483647}}`,
		},
		{
			name: "both directions",
			in: with(func(in *runtimeConfInput) {
				in.Annotations = map[string]string{
					network.IngressBandwidthAnnotation: "1M",
					network.EgressBandwidthAnnotation:  "2Mi",
				}
			}),
			caps: `{"bandwidth":{"ingressRate":1000000,"ingressBurst":2147483647,"egressRate":2097152,"egressBurst":2147483647}}`,
		},
		{
			name: "bad bandwidth",
			in: with(func(in *runtimeConfInput) {
				in.Annotations = map[string]string{network.EgressBandwidthAnnotation: "lots"}
			}),
			wantErr: network.EgressBandwidthAnnotation,
		},
		{
			name: "single stack pod CIDR",
			in:   with(func(in *runtimeConfInput) { in.PodCIDRs = []string{"10.244.1.0/24"} }),
			caps: `{"ipRanges":[[{"subnet":"10.244.1.0/24"}]]}`,
		},
		{
			name: "dual stack pod CIDR",
			in: with(func(in *runtimeConfInput) {
				in.PodCIDRs = []string{"10.244.1.0/24", "fd00:10:244:1::/64"}
			}),
			caps: `{"ipRanges":[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:10:244:1::/64"}]]}`,
		},
		{
			name: "dns",
			in: with(func(in *runtimeConfInput) {
				in.DNS = &network.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns1.svc.cluster.local"}, Options: []string{"ndots:5"}}
			}),
			caps: `{"dns":{"servers":["10.96.0.10"],"searches":["ns1.svc.cluster.local"],"options":["ndots:5"]}}`,
		},
		{
			name: "empty dns: no key",
			in:   with(func(in *runtimeConfInput) { in.DNS = &network.DNSConfig{} }),
			caps: `{}`,
		},
		{
			name: "everything",
			in: with(func(in *runtimeConfInput) {
				in.PortMappings = []network.PortMapping{{Protocol: "sctp", ContainerPort: 1, HostPort: 2}}
				in.Annotations = map[string]string{network.EgressBandwidthAnnotation: "5M"}
				in.PodCIDRs = []string{"fd00::/64"}
				in.DNS = &network.DNSConfig{Servers: []string{"1.1.1.1"}}
			}),
			caps: `{"portMappings":[{"hostPort":2,"containerPort":1,"protocol":"sctp"}],
				"bandwidth":{"egressRate":5000000,"egressBurst":2147483647},
				"ipRanges":[[{"subnet":"fd00::/64"}]],
				"dns":{"servers":["1.1.1.1"]}}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := buildRuntimeConf(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rt.ContainerID != testPod.SandboxID || rt.NetNS != "/proc/1/ns/net" || rt.IfName != "eth0" || rt.CacheDir != "/cache" {
				t.Errorf("identity fields wrong: %+v", rt)
			}
			wantArgs := [][2]string{
				{"IgnoreUnknown", "1"},
				{"K8S_POD_NAMESPACE", "ns1"},
				{"K8S_POD_NAME", "pod1"},
				{"K8S_POD_INFRA_CONTAINER_ID", testPod.SandboxID},
				{"K8S_POD_UID", "uid-1"},
			}
			if !reflect.DeepEqual(rt.Args, wantArgs) {
				t.Errorf("Args = %v, want %v", rt.Args, wantArgs)
			}
			if got, want := mustJSON(t, rt.CapabilityArgs), normJSON(t, tc.caps); normJSON(t, got) != want {
				t.Errorf("CapabilityArgs = %s\nwant %s", got, want)
			}
		})
	}
}

func TestParsePodCIDRs(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "10.244.1.0/24", want: []string{"10.244.1.0/24"}},
		{in: "10.244.1.7/24", want: []string{"10.244.1.0/24"}},
		{in: "10.244.1.0/24, fd00:1::/64", want: []string{"10.244.1.0/24", "fd00:1::/64"}},
		{in: "fd00:1::/64,10.244.1.0/24", want: []string{"10.244.1.0/24", "fd00:1::/64"}},
		{in: "10.244.1.0/24,10.245.1.0/24", wantErr: true},
		{in: "bogus", wantErr: true},
		{in: " , ", wantErr: true},
	}
	for _, tc := range tests {
		got, err := parsePodCIDRs(tc.in)
		if (err != nil) != tc.wantErr || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parsePodCIDRs(%q) = %v, %v; want %v, err %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestSetUpPod(t *testing.T) {
	env := newTestEnv(t, testConfList)
	env.host.setPorts(testPod.SandboxID, []network.PortMapping{
		{Protocol: "tcp", ContainerPort: 80, HostPort: 8080},
		{Protocol: "tcp", ContainerPort: 443},
	})
	env.plugin.Event(network.NetPluginEventPodCIDRChange, map[string]any{network.NetPluginEventPodCIDRKey: "10.244.1.0/24,fd00:10:244:1::/64"})
	// An invalid CIDR later is ignored: the last good one stays.
	env.plugin.Event(network.NetPluginEventPodCIDRChange, map[string]any{network.NetPluginEventPodCIDRKey: "nonsense"})
	env.plugin.Event("some-other-event", nil)

	annotations := map[string]string{network.IngressBandwidthAnnotation: "1M"}
	opts := network.SetUpOptions{DNS: &network.DNSConfig{Servers: []string{"10.96.0.10"}, Options: []string{"ndots:5"}}}
	if err := env.plugin.SetUpPod(context.Background(), testPod, annotations, opts); err != nil {
		t.Fatalf("SetUpPod: %v", err)
	}

	calls := env.exec.Calls()
	if got := callNames(calls); got != "ADD bridge, ADD portmap, ADD bandwidth, ADD loopback" {
		t.Fatalf("calls = %s", got)
	}
	// The host forgets the MACs the pod's IPs had before (not the bridge's).
	if got, want := fmt.Sprint(env.forgotten()), "[[10.244.1.5 fd00:10:244:1::5]]"; got != want {
		t.Errorf("neighbour entries deleted for %s, want %s", got, want)
	}
	for _, c := range calls {
		if c.ContainerID != testPod.SandboxID || c.NetNS != "/proc/42/ns/net" {
			t.Errorf("%s: container %q netns %q", c, c.ContainerID, c.NetNS)
		}
		for _, want := range []string{"IgnoreUnknown=1", "K8S_POD_NAMESPACE=ns1", "K8S_POD_NAME=pod1",
			"K8S_POD_INFRA_CONTAINER_ID=" + testPod.SandboxID, "K8S_POD_UID=uid-1"} {
			if !strings.Contains(c.Args, want) {
				t.Errorf("%s: CNI_ARGS %q lacks %q", c, c.Args, want)
			}
		}
	}
	bridge, portmap, bw, lo := calls[0], calls[1], calls[2], calls[3]
	if lo.IfName != "lo" || lo.Conf["name"] != "cni-loopback" || lo.Conf["cniVersion"] != "0.3.1" || lo.runtimeConfig() != nil {
		t.Errorf("loopback call: ifname %q conf %v", lo.IfName, lo.Conf)
	}
	if bridge.IfName != "eth0" || bridge.Conf["name"] != "testnet" {
		t.Errorf("bridge call: ifname %q conf %v", bridge.IfName, bridge.Conf)
	}
	checkJSON(t, "bridge runtimeConfig", bridge.runtimeConfig(),
		`{"ipRanges":[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:10:244:1::/64"}]],
		  "dns":{"servers":["10.96.0.10"],"options":["ndots:5"]}}`)
	checkJSON(t, "portmap runtimeConfig", portmap.runtimeConfig(),
		`{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}`)
	if portmap.Conf["prevResult"] == nil {
		t.Errorf("portmap got no prevResult")
	}
	checkJSON(t, "bandwidth runtimeConfig", bw.runtimeConfig(),
		`{"bandwidth":{"ingressRate":1000000,"ingressBurst":2147483647}}`)

	// The status comes from the cache here, as /proc/42 is not this pod.
	env.host.setNetNS(testPod.SandboxID, "")
	st, err := env.plugin.GetPodNetworkStatus(context.Background(), testPod)
	if err != nil {
		t.Fatalf("GetPodNetworkStatus: %v", err)
	}
	if got := ipStrings(st.IPs); got != "10.244.1.5 fd00:10:244:1::5" {
		t.Errorf("IPs = %s, want the pod's v4 then v6 (not the bridge's)", got)
	}
	if !strings.Contains(string(st.Result), "10.244.1.5/24") {
		t.Errorf("Result = %s", st.Result)
	}
}

func checkJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	if g, w := mustJSON(t, got), normJSON(t, want); g != w {
		t.Errorf("%s = %s\nwant %s", what, g, w)
	}
}

// countCalls counts the calls of one plugin.
func countCalls(calls []execCall, plugin string) int {
	n := 0
	for _, c := range calls {
		if c.Plugin == plugin {
			n++
		}
	}
	return n
}

func callNames(calls []execCall) string {
	s := make([]string, len(calls))
	for i, c := range calls {
		s[i] = c.String()
	}
	return strings.Join(s, ", ")
}

func ipStrings(ips []net.IP) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, " ")
}

func TestSetUpPodErrors(t *testing.T) {
	t.Run("no netns", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		env.host.setNetNS(testPod.SandboxID, "")
		err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{})
		if err == nil || !strings.Contains(err.Error(), "no network namespace") {
			t.Fatalf("err = %v", err)
		}
		if n := len(env.exec.Calls()); n != 0 {
			t.Errorf("%d plugin calls", n)
		}
	})
	t.Run("not ready", func(t *testing.T) {
		env := newTestEnv(t, "")
		err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{})
		if err == nil || !strings.HasPrefix(err.Error(), "cni config uninitialized") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad bandwidth annotation", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		err := env.plugin.SetUpPod(context.Background(), testPod, map[string]string{network.IngressBandwidthAnnotation: "1"}, network.SetUpOptions{})
		if err == nil || !strings.Contains(err.Error(), network.IngressBandwidthAnnotation) {
			t.Fatalf("err = %v", err)
		}
		if n := len(env.exec.Calls()); n != 0 {
			t.Errorf("%d plugin calls", n)
		}
	})
	t.Run("missing plugin binary", func(t *testing.T) {
		// The config names a plugin that is not installed: it still
		// loads, and ADD says which plugin is missing.
		env := newTestEnv(t, strings.Replace(testConfList, `"type": "portmap"`, `"type": "nosuchplugin"`, 1))
		if err := env.plugin.Status(); err != nil {
			t.Fatalf("Status: %v", err)
		}
		env.exec.missing["nosuchplugin"] = true
		err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{})
		if err == nil || !strings.Contains(err.Error(), `failed to find plugin "nosuchplugin"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("rollback DEL skips the missing plugin and still frees the IP", func(t *testing.T) {
		// libcni's list DEL stops at the missing plugin, before the
		// bridge: the per-plugin retry must reach the bridge.
		env := newTestEnv(t, strings.Replace(testConfList, `"type": "portmap"`, `"type": "nosuchplugin"`, 1))
		env.exec.missing["nosuchplugin"] = true
		if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err == nil {
			t.Fatal("setup with a missing plugin succeeded")
		}
		env.exec.Reset()
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("TearDownPod: %v", err)
		}
		if got := callNames(env.exec.Calls()); !strings.Contains(got, "DEL bridge") {
			t.Errorf("bridge DEL never ran: %s", got)
		}
	})
	t.Run("teardown reports a plugin that fails its DEL", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
			t.Fatal(err)
		}
		env.exec.errs["DEL portmap"] = errors.New("iptables locked")
		err := env.plugin.TearDownPod(context.Background(), testPod)
		if err == nil || !strings.Contains(err.Error(), "iptables locked") {
			t.Fatalf("err = %v", err)
		}
		if got := callNames(env.exec.Calls()); !strings.Contains(got, "DEL bridge") {
			t.Errorf("bridge DEL never ran after portmap failed: %s", got)
		}
	})
	t.Run("plugin failure keeps its text and does not tear down", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		env.exec.errs["ADD portmap"] = errors.New("iptables says no")
		err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{})
		if err == nil || !strings.Contains(err.Error(), "iptables says no") || !strings.Contains(err.Error(), `"testnet"`) {
			t.Fatalf("err = %v", err)
		}
		if got := callNames(env.exec.Calls()); got != "ADD bridge, ADD portmap, ADD loopback" {
			t.Errorf("calls = %s", got)
		}
	})
	t.Run("loopback failure", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		env.exec.errs["ADD loopback"] = errors.New("lo broken")
		err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{})
		if err == nil || !strings.Contains(err.Error(), "lo broken") {
			t.Fatalf("err = %v", err)
		}
		// Both ADDs ran (side by side); the pod is torn down by the caller.
		if got := callNames(env.exec.Calls()); got != "ADD bridge, ADD portmap, ADD bandwidth, ADD loopback" {
			t.Errorf("calls = %s", got)
		}
	})
	t.Run("not initialised", func(t *testing.T) {
		p := NewPlugin(Options{ConfDir: t.TempDir()})
		defer p.Stop()
		if err := p.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err == nil {
			t.Fatal("SetUpPod before Init succeeded")
		}
		if err := p.Status(); err == nil || !strings.HasPrefix(err.Error(), "cni config uninitialized") {
			t.Fatalf("Status = %v", err)
		}
	})
}

func TestTearDownPod(t *testing.T) {
	t.Run("with netns", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
			t.Fatal(err)
		}
		env.exec.Reset()
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("TearDownPod: %v", err)
		}
		calls := env.exec.Calls()
		if got := callNames(calls); got != "DEL bandwidth, DEL portmap, DEL bridge, DEL loopback" {
			t.Fatalf("calls = %s", got)
		}
		for _, c := range calls {
			if c.NetNS != "/proc/42/ns/net" || c.ContainerID != testPod.SandboxID {
				t.Errorf("%s: netns %q container %q", c, c.NetNS, c.ContainerID)
			}
		}
		// 1.0.0: DEL gets the ADD result.
		if calls[2].Conf["prevResult"] == nil {
			t.Errorf("bridge DEL got no prevResult")
		}
	})
	t.Run("empty netns still deletes the default network", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
			t.Fatal(err)
		}
		env.exec.Reset()
		env.host.setNetNS(testPod.SandboxID, "")
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("TearDownPod: %v", err)
		}
		calls := env.exec.Calls()
		// Loopback DEL still runs: it clears libcni's cache entry.
		if got := callNames(calls); got != "DEL bandwidth, DEL portmap, DEL bridge, DEL loopback" {
			t.Fatalf("calls = %s", got)
		}
		for _, c := range calls[:3] {
			if c.NetNS != "" || c.IfName != "eth0" || c.ContainerID != testPod.SandboxID {
				t.Errorf("%s: netns %q ifname %q container %q", c, c.NetNS, c.IfName, c.ContainerID)
			}
		}
	})
	t.Run("never set up: nothing to delete, no plugin runs", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		env.host.nsErr = errors.New("docker unreachable")
		env.host.portErr = errors.New("docker unreachable")
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("TearDownPod: %v", err)
		}
		// Not even loopback: nothing was added, so nothing is cached.
		if c := env.exec.Calls(); len(c) != 0 {
			t.Fatalf("calls = %s", callNames(c))
		}
	})
	t.Run("uses the cached config and arguments of the ADD", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		env.host.setPorts(testPod.SandboxID, []network.PortMapping{{Protocol: "tcp", ContainerPort: 80, HostPort: 8080}})
		if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
			t.Fatal(err)
		}
		// The network is replaced by another one and the checkpoint lost.
		if err := os.Remove(filepath.Join(env.confDir, "10-test.conflist")); err != nil {
			t.Fatal(err)
		}
		writeFile(t, env.confDir, "10-other.conflist", `{"cniVersion":"1.0.0","name":"othernet","plugins":[{"type":"ptp"}]}`)
		env.plugin.syncNetworkConfig()
		env.host.setPorts(testPod.SandboxID, nil)
		env.exec.Reset()

		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("TearDownPod: %v", err)
		}
		calls := env.exec.Calls()
		if got := callNames(calls); got != "DEL bandwidth, DEL portmap, DEL bridge, DEL loopback" {
			t.Fatalf("calls = %s", got)
		}
		if calls[1].Conf["name"] != "testnet" {
			t.Errorf("DEL used network %v", calls[1].Conf["name"])
		}
		checkJSON(t, "portmap DEL runtimeConfig", calls[1].runtimeConfig(),
			`{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}`)

		// The cache entry and the record are gone now: a second teardown
		// has nothing to do, and succeeds.
		env.exec.Reset()
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("second TearDownPod: %v", err)
		}
		if c := env.exec.Calls(); len(c) != 0 {
			t.Fatalf("calls = %s", callNames(c))
		}
	})
	t.Run("empty conf dir and nothing added succeeds", func(t *testing.T) {
		// A CNI DaemonSet being reinstalled: Stop/Remove of a pod whose
		// setup never got to an ADD must not wait for it.
		env := newTestEnv(t, "")
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("TearDownPod: %v", err)
		}
		if c := env.exec.Calls(); len(c) != 0 {
			t.Errorf("calls = %s", callNames(c))
		}
	})
	t.Run("empty conf dir, half-done ADD: DEL with the recorded config", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		env.exec.errs["ADD portmap"] = errors.New("iptables says no")
		if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err == nil {
			t.Fatal("setup succeeded")
		}
		if err := os.Remove(filepath.Join(env.confDir, "10-test.conflist")); err != nil {
			t.Fatal(err)
		}
		env.plugin.syncNetworkConfig()
		env.exec.Reset()
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("TearDownPod: %v", err)
		}
		calls := env.exec.Calls()
		if got := callNames(calls); got != "DEL bandwidth, DEL portmap, DEL bridge, DEL loopback" {
			t.Fatalf("calls = %s", got)
		}
		if calls[2].Conf["name"] != "testnet" || !strings.Contains(calls[2].Args, "K8S_POD_NAME=pod1") {
			t.Errorf("bridge DEL: network %v args %q", calls[2].Conf["name"], calls[2].Args)
		}
		// Done: the record is gone, a second teardown runs nothing.
		env.exec.Reset()
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("second TearDownPod: %v", err)
		}
		if c := env.exec.Calls(); len(c) != 0 {
			t.Errorf("second teardown calls = %s", callNames(c))
		}
	})
	t.Run("known attachment whose plugin is gone fails with what to do", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(env.confDir, "10-test.conflist")); err != nil {
			t.Fatal(err)
		}
		env.plugin.syncNetworkConfig()
		env.exec.missing["bridge"] = true
		err := env.plugin.TearDownPod(context.Background(), testPod)
		if err == nil || !strings.Contains(err.Error(), "plugin bridge ran when the pod was added but is not installed in /fake/bin") ||
			!strings.Contains(err.Error(), "stays allocated") {
			t.Fatalf("err = %v", err)
		}
		// Once the plugin is back, the retry frees it.
		env.exec.missing["bridge"] = false
		env.exec.Reset()
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("retried TearDownPod: %v", err)
		}
		if got := callNames(env.exec.Calls()); !strings.Contains(got, "DEL bridge") {
			t.Errorf("calls = %s", got)
		}
	})
	t.Run("cached config alone is enough", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(env.confDir, "10-test.conflist")); err != nil {
			t.Fatal(err)
		}
		env.plugin.syncNetworkConfig()
		if env.plugin.Status() == nil {
			t.Fatal("Status is ready without a config")
		}
		env.exec.Reset()
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("TearDownPod: %v", err)
		}
		if got := callNames(env.exec.Calls()); got != "DEL bandwidth, DEL portmap, DEL bridge, DEL loopback" {
			t.Fatalf("calls = %s", got)
		}
	})
	t.Run("DEL failure of an added pod is returned", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
			t.Fatal(err)
		}
		env.exec.errs["DEL bridge"] = errors.New("bridge DEL failed")
		err := env.plugin.TearDownPod(context.Background(), testPod)
		if err == nil || !strings.Contains(err.Error(), "bridge DEL failed") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("loopback DEL failure is ignored", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
			t.Fatal(err)
		}
		env.exec.errs["DEL loopback"] = errors.New("lo DEL failed")
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("TearDownPod: %v", err)
		}
		if n := countCalls(env.exec.callsOf("DEL"), "loopback"); n != loDelAttempts {
			t.Errorf("%d loopback DELs, want %d", n, loDelAttempts)
		}
	})
	// A loopback plugin killed in its DEL (the soak's random kills) is
	// DELed again at once, so its cache entry does not wait for GC.
	t.Run("loopback DEL that fails once is retried", func(t *testing.T) {
		env := newTestEnv(t, testConfList)
		if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
			t.Fatal(err)
		}
		var failed atomic.Bool
		env.exec.setHook(func(_ context.Context, c execCall) error {
			if c.Command == "DEL" && c.Plugin == "loopback" && failed.CompareAndSwap(false, true) {
				return errors.New("signal: killed")
			}
			return nil
		})
		if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
			t.Fatalf("TearDownPod: %v", err)
		}
		if !failed.Load() {
			t.Fatal("the loopback DEL was never failed")
		}
		if n := countCalls(env.exec.callsOf("DEL"), "loopback"); n != 1 {
			t.Errorf("%d loopback DELs answered, want 1 after the failed one", n)
		}
		entries, err := env.plugin.ledger.get(testPod.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Network == loNetworkName {
				t.Errorf("the loopback attachment is still recorded after the retried DEL: %+v", e)
			}
		}
	})
}

// TestTearDownPodWithoutStateDir covers a plugin without a ledger: with
// nothing cached it cannot know whether an ADD ran, so it DELs with the
// current network if there is one, and fails if there is none.
func TestTearDownPodWithoutStateDir(t *testing.T) {
	for _, tc := range []struct {
		name, conf, want, wantErr string
	}{
		{"current network", testConfList, "DEL bandwidth, DEL portmap, DEL bridge", ""},
		{"no network", "", "", "no attachment ledger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnvWith(t, tc.conf, func(o *Options) { o.StateDir = "" })
			err := env.plugin.TearDownPod(context.Background(), testPod)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("TearDownPod = %v, want error %q", err, tc.wantErr)
			}
			if got := callNames(env.exec.Calls()); got != tc.want {
				t.Errorf("calls = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSetUpPodFailsBeforeADDWhenItCannotRecord(t *testing.T) {
	// The ledger directory cannot be created: a file is in the way.
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := newTestEnvWith(t, testConfList, func(o *Options) { o.StateDir = blocker })
	err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{})
	if err == nil || !strings.Contains(err.Error(), "recording its CNI attachments") {
		t.Fatalf("SetUpPod = %v", err)
	}
	if c := env.exec.Calls(); len(c) != 0 {
		t.Errorf("plugins ran although nothing was recorded: %s", callNames(c))
	}
}

func TestGetPodNetworkStatusWithoutNetNSOrCache(t *testing.T) {
	env := newTestEnv(t, testConfList)
	env.host.setNetNS(testPod.SandboxID, "")
	if _, err := env.plugin.GetPodNetworkStatus(context.Background(), testPod); err == nil {
		t.Fatal("status of a pod never set up succeeded")
	}
	// A netns path that no longer exists counts as gone: the cache is used.
	env.host.setNetNS(testPod.SandboxID, "/proc/42/ns/net")
	if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
		t.Fatal(err)
	}
	env.host.setNetNS(testPod.SandboxID, filepath.Join(t.TempDir(), "gone"))
	st, err := env.plugin.GetPodNetworkStatus(context.Background(), testPod)
	if err != nil {
		t.Fatal(err)
	}
	if got := ipStrings(st.IPs); got != "10.244.1.5 fd00:10:244:1::5" {
		t.Errorf("IPs = %s", got)
	}
}

func TestStatusFollowsConfDir(t *testing.T) {
	exec := newFakeExec()
	dir := t.TempDir()
	p := NewPlugin(Options{ConfDir: dir, BinDirs: []string{"/fake/bin"}, CacheDir: t.TempDir(), Exec: exec, SyncPeriod: 10 * time.Millisecond})
	if err := p.Init(newFakeHost(), network.PluginConfig{}); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()

	err := p.Status()
	if err == nil || !strings.HasPrefix(err.Error(), "cni config uninitialized") || !strings.Contains(err.Error(), "no network config found in "+dir) {
		t.Fatalf("Status = %v", err)
	}

	path := writeFile(t, dir, "10-test.conflist", testConfList)
	testutil.Eventually(t, "the new config to be loaded", func() bool { return p.Status() == nil })

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the removed config to be dropped", func() bool { return p.Status() != nil })

	p.Stop()
	p.Stop() // idempotent
}

func TestStopWithoutInit(t *testing.T) {
	p := NewPlugin(Options{})
	p.Stop()
	p.Stop()
	if err := p.Init(newFakeHost(), network.PluginConfig{}); err == nil {
		t.Fatal("Init after Stop succeeded")
	}
}

func TestInitTwice(t *testing.T) {
	env := newTestEnv(t, testConfList)
	if err := env.plugin.Init(env.host, network.PluginConfig{}); err == nil {
		t.Fatal("second Init succeeded")
	}
}

func TestDefaultNetworkSelection(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string
		wantFile  string
		wantNet   string
		wantErrIn []string
	}{
		{
			name: "first in lexical order wins, broken and foreign files skipped",
			files: map[string]string{
				"05-broken.conflist": `{"name": "broken", "plugins": [`,
				"10-a.conf":          `{"cniVersion":"0.4.0","name":"net-a","type":"bridge"}`,
				"20-b.conflist":      `{"cniVersion":"1.0.0","name":"net-b","plugins":[{"type":"bridge"}]}`,
				"00-readme.txt":      `not a config`,
			},
			wantFile: "10-a.conf",
			wantNet:  "net-a",
		},
		{
			name: "json extension",
			files: map[string]string{
				"99-z.conflist": `{"cniVersion":"1.0.0","name":"net-z","plugins":[{"type":"bridge"}]}`,
				"50-m.json":     `{"cniVersion":"1.0.0","name":"net-m","type":"ptp"}`,
			},
			wantFile: "50-m.json",
			wantNet:  "net-m",
		},
		{
			name: "only broken files",
			files: map[string]string{
				"10-broken.conflist": `{"name": "x", "plugins": [`,
				"20-notype.conf":     `{"cniVersion":"1.0.0","name":"y"}`,
				"30-empty.conflist":  `{"cniVersion":"1.0.0","name":"z","plugins":[]}`,
			},
			wantErrIn: []string{"cni config uninitialized", "10-broken.conflist", "20-notype.conf", "missing 'type'", "30-empty.conflist"},
		},
		{
			name:      "empty dir",
			files:     map[string]string{"readme.md": "hi"},
			wantErrIn: []string{"cni config uninitialized: no network config found in "},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				writeFile(t, dir, name, content)
			}
			p := NewPlugin(Options{ConfDir: dir, Exec: newFakeExec(), SyncPeriod: time.Hour})
			if err := p.Init(newFakeHost(), network.PluginConfig{}); err != nil {
				t.Fatal(err)
			}
			defer p.Stop()
			def, err := p.getDefaultNetwork()
			if len(tc.wantErrIn) > 0 {
				if err == nil {
					t.Fatalf("loaded %s, want an error", def.path)
				}
				if err.Error() != p.Status().Error() {
					t.Errorf("Status %q differs from %q", p.Status(), err)
				}
				for _, s := range tc.wantErrIn {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error has several lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Base(def.path) != tc.wantFile || def.list.Name != tc.wantNet {
				t.Errorf("loaded %s (%s), want %s (%s)", def.path, def.list.Name, tc.wantFile, tc.wantNet)
			}
		})
	}
}

func TestNameAndCapabilities(t *testing.T) {
	p := NewPlugin(Options{})
	if p.Name() != "cni" {
		t.Errorf("Name = %q", p.Name())
	}
	c := p.Capabilities()
	if !c.Has(network.CapHostPorts) || !c.Has(network.CapShaping) {
		t.Errorf("Capabilities = %v", c)
	}
}

func TestLoopbackConfig(t *testing.T) {
	p := NewPlugin(Options{})
	if p.loNetwork.Name != "cni-loopback" || p.loNetwork.CNIVersion != "0.3.1" ||
		len(p.loNetwork.Plugins) != 1 || p.loNetwork.Plugins[0].Network.Type != "loopback" {
		t.Errorf("loopback network = %+v", p.loNetwork)
	}
	var _ libcni.CNI = p.cni
}

// A pod set up by cri-dockerd (or dockershim), taken over by netshim: its
// loopback attachment is cached under "eth0", not netshim's "lo", and
// netshim's ledger knows nothing of it. Teardown DELs loopback under the
// cached name, which is what removes that cache entry.
func TestTearDownPodLoopbackCachedByAnotherRuntime(t *testing.T) {
	var cacheDir string
	env := newTestEnvWith(t, testConfList, func(o *Options) { cacheDir = o.CacheDir; o.StateDir = "" })
	if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
		t.Fatal(err)
	}
	results := filepath.Join(cacheDir, "results")
	oldPath := filepath.Join(results, "cni-loopback-"+testPod.SandboxID+"-lo")
	b, err := os.ReadFile(oldPath)
	if err != nil {
		t.Fatal(err)
	}
	var entry map[string]any
	if err := json.Unmarshal(b, &entry); err != nil {
		t.Fatal(err)
	}
	entry["ifName"] = "eth0"
	newPath := filepath.Join(results, "cni-loopback-"+testPod.SandboxID+"-eth0")
	writeFile(t, results, filepath.Base(newPath), mustJSON(t, entry))
	if err := os.Remove(oldPath); err != nil {
		t.Fatal(err)
	}
	env.exec.Reset()

	if err := env.plugin.TearDownPod(context.Background(), testPod); err != nil {
		t.Fatalf("TearDownPod: %v", err)
	}
	var lo []string
	for _, c := range env.exec.Calls() {
		if c.Plugin == "loopback" {
			lo = append(lo, c.IfName)
		}
	}
	if len(lo) != 1 || lo[0] != "eth0" {
		t.Errorf("loopback DELs with interface names %v, want one with eth0 (the cached name)", lo)
	}
	if _, err := os.Stat(newPath); !os.IsNotExist(err) {
		t.Errorf("libcni's cache entry %s after teardown: %v, want it gone", newPath, err)
	}
}
