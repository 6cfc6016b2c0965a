package kubenet

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/version"

	"github.com/netshim/netshim/pkg/network"
)

// fakeExec plays every CNI plugin: ADD of the first plugin returns an
// address, later plugins pass their prevResult on; DEL succeeds.
type fakeExec struct {
	mu    sync.Mutex
	calls []execCall
}

type execCall struct {
	plugin, command string
	conf            map[string]any
}

func (f *fakeExec) ExecPlugin(_ context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	var conf map[string]any
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, err
	}
	cmd := ""
	for _, e := range environ {
		if v, ok := strings.CutPrefix(e, "CNI_COMMAND="); ok {
			cmd = v
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, execCall{plugin: filepath.Base(pluginPath), command: cmd, conf: conf})
	f.mu.Unlock()
	if cmd != "ADD" {
		return nil, nil
	}
	if prev, ok := conf["prevResult"]; ok {
		return json.Marshal(prev)
	}
	ver, _ := conf["cniVersion"].(string)
	return []byte(`{"cniVersion":"` + ver + `","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.88.0.2/16","gateway":"10.88.0.1","interface":0}]}`), nil
}

func (f *fakeExec) FindInPath(plugin string, _ []string) (string, error) {
	return "/fake/" + plugin, nil
}

func (f *fakeExec) Decode(b []byte) (version.PluginInfo, error) {
	return version.PluginSupports("0.3.1", "0.4.0", "1.0.0"), nil
}

func (f *fakeExec) adds(plugin string) []execCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []execCall
	for _, c := range f.calls {
		if c.plugin == plugin && c.command == "ADD" {
			out = append(out, c)
		}
	}
	return out
}

type fakeHost struct{ netns string }

func (h fakeHost) GetNetNS(context.Context, string) (string, error) { return h.netns, nil }
func (h fakeHost) GetPodPortMappings(context.Context, string) ([]network.PortMapping, error) {
	return nil, nil
}

type testPlugin struct {
	*Plugin
	ipt     *fakeIPT
	exec    *fakeExec
	clock   time.Time
	missing map[string]bool
	ipamDir string
}

func newTestPlugin(t *testing.T, podCIDR string) *testPlugin {
	t.Helper()
	dir := t.TempDir()
	tp := &testPlugin{ipt: newFakeIPT(), exec: &fakeExec{}, clock: time.Unix(1000, 0), missing: map[string]bool{}, ipamDir: filepath.Join(dir, "ipam")}
	tp.Plugin = NewPlugin(Options{
		BinDirs:     []string{"/fake"},
		CacheDir:    filepath.Join(dir, "cache"),
		PodCIDR:     podCIDR,
		Bridge:      "kbtest0",
		IPAMDataDir: tp.ipamDir,
		Exec:        tp.exec,
	})
	tp.Plugin.ipt = tp.ipt
	tp.Plugin.detectMTU = func() (int, error) { return 1400, nil }
	tp.Plugin.clearBridgeAddrs = func(string, []*net.IPNet) error { return nil }
	tp.Plugin.findPlugin = func(name string, _ []string) error {
		if tp.missing[name] {
			return errors.New("not found")
		}
		return nil
	}
	tp.Plugin.now = func() time.Time { return tp.clock }
	t.Cleanup(tp.Stop)
	return tp
}

func (tp *testPlugin) init(t *testing.T, cfg network.PluginConfig) {
	t.Helper()
	if err := tp.Init(fakeHost{netns: "/proc/self/ns/net"}, cfg); err != nil {
		t.Fatalf("Init: %v", err)
	}
}

func cidrEvent(cidr string) map[string]any {
	return map[string]any{network.NetPluginEventPodCIDRKey: cidr}
}

var testPod = network.PodRef{Namespace: "ns", Name: "p", UID: "u", SandboxID: "0123456789abcdef"}

func TestReadyOnlyAfterPodCIDR(t *testing.T) {
	tp := newTestPlugin(t, "")
	if err := tp.Status(); err == nil {
		t.Fatal("ready before Init")
	}
	tp.init(t, network.PluginConfig{NonMasqueradeCIDR: "10.0.0.0/8"})
	err := tp.Status()
	if err == nil || !strings.Contains(err.Error(), "pod CIDR not set") || !strings.Contains(err.Error(), "--pod-cidr") || !strings.Contains(err.Error(), "UpdateRuntimeConfig") {
		t.Fatalf("Status before the pod CIDR = %v, want the reason naming --pod-cidr and UpdateRuntimeConfig", err)
	}
	if err := tp.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err == nil || !strings.Contains(err.Error(), "pod CIDR not set") {
		t.Fatalf("SetUpPod before the pod CIDR = %v", err)
	}
	if len(tp.exec.calls) != 0 {
		t.Fatalf("plugins ran before the pod CIDR: %+v", tp.exec.calls)
	}
	if tp.ipt.hasChain(false, masqChain("kbtest0")) {
		t.Fatal("masquerade chain written before the pod CIDR")
	}

	tp.Event("something-else", cidrEvent("10.88.0.0/16"))
	tp.Event(network.NetPluginEventPodCIDRChange, cidrEvent("not-a-cidr"))
	if tp.Status() == nil {
		t.Fatal("ready after an unrelated event or an invalid CIDR")
	}

	tp.Event(network.NetPluginEventPodCIDRChange, cidrEvent("10.88.0.0/16"))
	if err := tp.Status(); err != nil {
		t.Fatalf("Status after the pod CIDR: %v", err)
	}
	if got := tp.ipt.rules(false, masqChain("kbtest0")); len(got) != 3 || got[1] != "-d 10.0.0.0/8 -j RETURN" {
		t.Errorf("masquerade chain %q", got)
	}

	// The ADD gets the built-in network.
	if err := tp.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err != nil {
		t.Fatalf("SetUpPod: %v", err)
	}
	adds := tp.exec.adds("bridge")
	if len(adds) != 1 {
		t.Fatalf("bridge ADDs: %d", len(adds))
	}
	br := adds[0].conf
	ipam := br["ipam"].(map[string]any)
	ranges, _ := json.Marshal(ipam["ranges"])
	if br["bridge"] != "kbtest0" || br["mtu"] != 1400.0 || br["hairpinMode"] != true || string(ranges) != `[[{"subnet":"10.88.0.0/16"}]]` || ipam["dataDir"] != tp.ipamDir {
		t.Errorf("bridge config of the ADD: %v", br)
	}
	for _, p := range []string{"firewall", "portmap", "bandwidth", "loopback"} {
		if len(tp.exec.adds(p)) != 1 {
			t.Errorf("%s ADDs: %d, want 1", p, len(tp.exec.adds(p)))
		}
	}
	st, err := tp.GetPodNetworkStatus(context.Background(), network.PodRef{Namespace: "ns", Name: "p", SandboxID: testPod.SandboxID})
	if err != nil {
		t.Logf("GetPodNetworkStatus: %v (the fake netns is this process's)", err)
	} else if len(st.IPs) == 0 {
		t.Errorf("GetPodNetworkStatus: no IPs")
	}
	if err := tp.TearDownPod(context.Background(), testPod); err != nil {
		t.Fatalf("TearDownPod: %v", err)
	}
}

func TestPodCIDRChangeIgnored(t *testing.T) {
	tp := newTestPlugin(t, "")
	tp.init(t, network.PluginConfig{})
	tp.Event(network.NetPluginEventPodCIDRChange, cidrEvent("10.88.0.0/16"))
	tp.Event(network.NetPluginEventPodCIDRChange, cidrEvent("10.99.0.0/16"))
	if err := tp.Status(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cidrStrings(tp.podCIDRs), ","); got != "10.88.0.0/16" {
		t.Errorf("pod CIDR %s after a change, want the first one kept", got)
	}
	if got := tp.ipt.rules(false, "POSTROUTING"); len(got) != 1 || !strings.HasPrefix(got[0], "-s 10.88.0.0/16 ") {
		t.Errorf("POSTROUTING %q", got)
	}
}

func TestPodCIDRFlag(t *testing.T) {
	tp := newTestPlugin(t, "10.77.0.0/24,fd00:77::/64")
	tp.init(t, network.PluginConfig{HairpinMode: network.PromiscuousBridge})
	if err := tp.Status(); err != nil {
		t.Fatalf("Status with --pod-cidr: %v", err)
	}
	// kubelet's CIDR does not override the flag.
	tp.Event(network.NetPluginEventPodCIDRChange, cidrEvent("10.1.0.0/24"))
	if got := strings.Join(cidrStrings(tp.podCIDRs), ","); got != "10.77.0.0/24,fd00:77::/64" {
		t.Errorf("pod CIDR %s", got)
	}
	if !tp.ipt.hasChain(true, masqChain("kbtest0")) {
		t.Error("no IPv6 masquerade chain for a dual-stack pod CIDR")
	}
	raw, err := confList(tp.netConfigLocked())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"promiscMode": true`) || !strings.Contains(string(raw), `"hairpinMode": false`) {
		t.Errorf("promiscuous-bridge not in the config:\n%s", raw)
	}
}

func TestInitErrors(t *testing.T) {
	if err := newTestPlugin(t, "10.1.0.0").Init(fakeHost{}, network.PluginConfig{}); err == nil {
		t.Error("Init accepted an invalid --pod-cidr")
	}
	if err := newTestPlugin(t, "").Init(fakeHost{}, network.PluginConfig{NonMasqueradeCIDR: "nope"}); err == nil {
		t.Error("Init accepted an invalid non-masquerade CIDR")
	}
	if err := newTestPlugin(t, "").Init(fakeHost{}, network.PluginConfig{HairpinMode: "sideways"}); err == nil {
		t.Error("Init accepted an unknown hairpin mode")
	}
	tp := newTestPlugin(t, "")
	tp.detectMTU = func() (int, error) { t.Error("MTU detected though --mtu is set"); return 0, nil }
	tp.init(t, network.PluginConfig{MTU: 9000})
	if tp.mtu != 9000 {
		t.Errorf("mtu %d", tp.mtu)
	}
}

func TestMissingPluginNotReadyThenRetried(t *testing.T) {
	tp := newTestPlugin(t, "10.1.0.0/24")
	tp.missing["firewall"] = true
	tp.init(t, network.PluginConfig{})
	err := tp.Status()
	if err == nil || !strings.Contains(err.Error(), "firewall") || !strings.Contains(err.Error(), "/fake") {
		t.Fatalf("Status = %v, want the missing plugin and the bin dirs named", err)
	}
	delete(tp.missing, "firewall")
	if tp.Status() == nil {
		t.Fatal("retried before the retry period")
	}
	tp.clock = tp.clock.Add(retryPeriod)
	if err := tp.Status(); err != nil {
		t.Fatalf("Status after the plugin appeared: %v", err)
	}
}

func TestTearDownBeforePodCIDR(t *testing.T) {
	tp := newTestPlugin(t, "")
	tp.init(t, network.PluginConfig{})
	// Never set up, nothing held: nothing to do.
	if err := tp.TearDownPod(context.Background(), testPod); err != nil {
		t.Fatalf("TearDownPod of a pod that never got an address: %v", err)
	}
	// host-local holds an address for it (an ADD that failed half-way
	// before a restart): refuse, so the IP is not leaked silently.
	store := filepath.Join(tp.ipamDir, networkName)
	if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store, "10.88.0.7"), []byte(testPod.SandboxID+"\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := tp.TearDownPod(context.Background(), testPod)
	if err == nil || !strings.Contains(err.Error(), "10.88.0.7") {
		t.Fatalf("TearDownPod with an address held = %v, want an error naming it", err)
	}
}
