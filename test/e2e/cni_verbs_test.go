//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Tests of the CNI plugin's conf dir watching, deadline, FORWARD DROP
// warning and CNI 1.1 verbs (STATUS, GC, CHECK), against the real plugins.

// (networkCondition, the NetworkReady condition of CRI Status, is in
// kubenet_test.go.)

// requireNetworkReady polls Status until NetworkReady is want and its
// message contains every one of subs, within d.
func (e *env) requireNetworkReady(want bool, d time.Duration, subs ...string) *runtimeapi.RuntimeCondition {
	e.t.Helper()
	var c *runtimeapi.RuntimeCondition
	ok := poll(d, func() bool {
		c = e.networkCondition()
		if c.Status != want {
			return false
		}
		for _, s := range subs {
			if !strings.Contains(c.Message, s) {
				return false
			}
		}
		return true
	})
	if !ok {
		e.t.Fatalf("NetworkReady did not become %v (with %q) within %s: last %+v\n%s", want, subs, d, c, e.logTail(30))
	}
	return c
}

// dockerForwardDrop reports whether this host drops bridged pod-to-pod
// traffic (Docker's FORWARD policy with bridge netfilter on).
func dockerForwardDrop(t *testing.T) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables")
	if err != nil || strings.TrimSpace(string(data)) != "1" {
		return false
	}
	return strings.Contains(mustRun(t, "iptables", "-w", "-S", "FORWARD"), "-P FORWARD DROP")
}

func TestCNIConfRemovedAndRestored(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start()
	e.requireNetworkReady(true, 5*time.Second)
	// The test network is a bridge without the firewall plugin: on a
	// Docker host, the warning must come into the (still true)
	// condition. netshim looks at the host firewall in the background
	// after loading the network (an iptables fork, slow on a loaded
	// machine), so the test waits for it, boundedly.
	if dockerForwardDrop(t) {
		warning := "WARNING: pod-to-pod traffic on bridge " + e.bridge + " will be dropped"
		e.requireNetworkReady(true, 10*time.Second, warning)
		if !poll(5*time.Second, func() bool { return strings.Contains(readFile(t, e.logPath), warning) }) {
			t.Errorf("netshim's log lacks the FORWARD DROP warning")
		}
	}

	path := filepath.Join(e.confDir, "10-nse2e.conflist")
	saved := readFile(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := e.requireNetworkReady(false, 2*time.Second, "no network config found in "+e.confDir)
	t.Logf("NetworkReady=false %s after the removal: %s", time.Since(start).Round(time.Millisecond), c.Message)

	// A broken file is reported by name.
	if err := os.WriteFile(path, []byte(`{"cniVersion": "1.0.0", "name": "x", "plugins": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	e.requireNetworkReady(false, 2*time.Second, "10-nse2e.conflist", "error parsing configuration list")

	if err := os.WriteFile(path, []byte(saved), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	e.requireNetworkReady(true, 2*time.Second)
	t.Logf("NetworkReady=true %s after the restore", time.Since(start).Round(time.Millisecond))

	// And the restored network works.
	id := e.runp(e.writePodJSON("after-restore"))
	e.requireInSubnet("pod after restore", e.inspectp(id).Network.IP)
}

func TestCNIConfChangedWhilePodRuns(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start()
	oldID := e.runp(e.writePodJSON("old"))
	oldIP := e.inspectp(oldID).Network.IP
	e.requireInSubnet("old pod", oldIP)
	if e.ipamStore()[oldIP] != oldID {
		t.Fatalf("old pod's IP %s is not held in the old store: %v", oldIP, e.ipamStore())
	}

	// Another network: name, bridge, subnet (the upper half of the slot's
	// /24, where the old pod's address is not) and IPAM store all differ.
	newName := e.bridge + "-new"
	newBridge := e.bridge + "n"
	t.Cleanup(func() { _, _ = runCmd("ip", "link", "del", newBridge) })
	newIPAM := filepath.Join(e.dir, "ipam-new")
	newSubnet := fmt.Sprintf("10.123.%d.128/25", e.slot)
	conf, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"name":       newName,
		"plugins": []map[string]any{{
			"type": "bridge", "bridge": newBridge, "isGateway": true,
			"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]any{{{"subnet": newSubnet}}}, "dataDir": newIPAM},
		}, {"type": "portmap", "capabilities": map[string]bool{"portMappings": true}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.confDir, "10-nse2e.conflist"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	if !poll(2*time.Second, func() bool {
		return strings.Contains(readFile(t, e.logPath), `"Using CNI network config" path="`+filepath.Join(e.confDir, "10-nse2e.conflist")+`" network="`+newName+`"`)
	}) {
		t.Fatalf("netshim did not load the changed config within 2s\n%s", e.logTail(30))
	}

	newID := e.runp(e.writePodJSON("new"))
	newIP := e.inspectp(newID).Network.IP
	newStore := e.ipamStoreIn(newIPAM)
	if newStore[newIP] != newID || !strings.HasPrefix(newIP, fmt.Sprintf("10.123.%d.1", e.slot)) {
		t.Fatalf("new pod's IP %s is not held in the new network's store: %v", newIP, newStore)
	}

	// Stopping the old pod frees its IP in the old network's store, which
	// the conf dir no longer names.
	e.mustCrictl("stopp", oldID)
	e.requireIPReleased(oldIP, oldID)
	if e.ipamStoreIn(newIPAM)[newIP] != newID {
		t.Fatalf("stopping the old pod touched the new network's store")
	}
	e.mustCrictl("rmp", oldID)
	e.mustCrictl("stopp", newID)
	if !poll(2*time.Second, func() bool { _, held := e.ipamStoreIn(newIPAM)[newIP]; return !held }) {
		t.Fatalf("new pod's IP %s still held after stopp", newIP)
	}
	e.mustCrictl("rmp", newID)
}

// requireV11Plugins returns CNI_V11_BIN_DIR, the CNI plugins v1.9.1
// (hack/cni-plugins.sh), or skips the test without it.
func requireV11Plugins(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CNI_V11_BIN_DIR")
	if dir == "" {
		t.Skip("CNI_V11_BIN_DIR is not set: run hack/cni-plugins.sh and point it at _output/cni-1.9.1 (make e2e does)")
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("CNI_V11_BIN_DIR=%s lacks %s: run hack/cni-plugins.sh", dir, p)
		}
	}
	return dir
}

// writeV11Chain writes the env's default chain (bridge + host-local +
// portmap + firewall) at cniVersion 1.1.0.
func (e *env) writeV11Chain() {
	e.t.Helper()
	var v map[string]any
	if err := json.Unmarshal(e.conflist([]map[string]any{{"type": "firewall"}}), &v); err != nil {
		e.t.Fatal(err)
	}
	v["cniVersion"] = "1.1.0"
	data, err := json.Marshal(v)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.confDir, "10-nse2e.conflist"), data, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func TestCNIV11StatusAndCheck(t *testing.T) {
	bin := requireV11Plugins(t)
	e := newEnv(t, envOptions{extraFlags: []string{"--cni-bin-dir", bin}})
	e.writeV11Chain()
	e.start()
	c := e.requireNetworkReady(true, 5*time.Second)
	if strings.Contains(c.Message, "WARNING: pod-to-pod") {
		t.Errorf("FORWARD DROP warning with the firewall plugin in the chain: %s", c.Message)
	}

	// A 1.1.0 network whose plugin is missing: STATUS fails, NetworkReady
	// is false with libcni's message.
	path := filepath.Join(e.confDir, "10-nse2e.conflist")
	good := readFile(t, path)
	if err := os.WriteFile(path, []byte(strings.Replace(good, `"type":"portmap"`, `"type":"nse2e-no-such-plugin"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.requireNetworkReady(false, 2*time.Second, "is not ready", "nse2e-no-such-plugin")
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	e.requireNetworkReady(true, 2*time.Second)

	// CHECK in the verbose status: ok, then drift once the pod's address
	// is removed behind the plugins' back.
	id := e.runp(e.writePodJSON("check"))
	if got := e.networkCheck(id); got.Status != "ok" {
		t.Fatalf("networkCheck of a fresh pod = %+v", got)
	}
	mustRun(t, "nsenter", "--net="+e.podNetNS(id), "ip", "-4", "addr", "flush", "dev", "eth0")
	if got := e.networkCheck(id); got.Status != "failed" || got.Message == "" {
		t.Fatalf("networkCheck after the address was flushed = %+v", got)
	} else {
		t.Logf("drift reported: %s", got.Message)
	}
	e.mustCrictl("stopp", id)
	e.mustCrictl("rmp", id)
}

type networkCheck struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func (e *env) networkCheck(id string) networkCheck {
	e.t.Helper()
	var info struct {
		Check *networkCheck `json:"networkCheck"`
	}
	e.verboseInfo(id, &info)
	if info.Check == nil {
		e.t.Fatalf("verbose status of %s has no networkCheck", id)
	}
	return *info.Check
}

func TestCNIV11GCFreesIPsOfVanishedSandboxes(t *testing.T) {
	bin := requireV11Plugins(t)
	e := newEnv(t, envOptions{extraFlags: []string{"--cni-bin-dir", bin, "--cni-gc-period", "2s"}})
	e.writeV11Chain()
	e.start()
	e.requireNetworkReady(true, 5*time.Second)

	ids := map[string]string{}
	ips := map[string]string{}
	for _, name := range []string{"live", "gone"} {
		ids[name] = e.runp(e.writePodJSON(name, withPauseContainer))
		ips[name] = e.inspectp(ids[name]).Network.IP
		if e.ipamStore()[ips[name]] != ids[name] {
			t.Fatalf("%s's IP %s is not in host-local's store", name, ips[name])
		}
	}

	// Behind netshim's back: netshim dies, a sandbox loses its container
	// and its checkpoint; nothing will ever ask to stop it.
	e.mustStop(syscall.SIGKILL)
	mustRun(t, "docker", "rm", "-f", ids["gone"])
	if err := os.Remove(e.checkpointPath(ids["gone"])); err != nil {
		t.Fatal(err)
	}

	// The GC at start-up frees its IP; the live pod keeps its own.
	e.start()
	if !poll(10*time.Second, func() bool { _, held := e.ipamStore()[ips["gone"]]; return !held }) {
		t.Fatalf("GC did not free the vanished sandbox's IP %s: store %v\n%s", ips["gone"], e.ipamStore(), e.logTail(40))
	}
	if e.ipamStore()[ips["live"]] != ids["live"] {
		t.Fatalf("GC freed the live pod's IP %s: store %v", ips["live"], e.ipamStore())
	}
	// libcni drops its cache entry after the last plugin's DEL, a moment
	// after host-local has released the address.
	cacheGone := func() bool {
		files, _ := filepath.Glob(filepath.Join(e.cacheDir, "results", "*-"+ids["gone"]+"-*"))
		return len(files) == 0
	}
	if !poll(5*time.Second, cacheGone) {
		t.Errorf("libcni cache entries of the vanished sandbox remain")
	}

	// The periodic pass, with netshim running: an attachment netshim never
	// made (a copy of the live pod's cache entry and address under another
	// container ID, as another runtime sharing libcni's cache would have)
	// is left alone: GC only deletes what netshim's ledger records. Wait
	// for a pass that saw it (logged as not netshim's), then check that
	// its address and cache entry are still there.
	fakeID := strings.Repeat("ab", 32)
	stray := fmt.Sprintf("10.123.%d.200", e.slot)
	entry := filepath.Join(e.cacheDir, "results", e.bridge+"-"+ids["live"]+"-eth0")
	strayEntry := filepath.Join(e.cacheDir, "results", e.bridge+"-"+fakeID+"-eth0")
	data := strayAttachment(t, readFile(t, entry), ids["live"], fakeID, ips["live"], stray)
	if err := os.WriteFile(strayEntry, data, 0o600); err != nil {
		t.Fatal(err)
	}
	strayIP := filepath.Join(e.ipamStoreDir(), stray)
	if err := os.WriteFile(strayIP, []byte(fakeID+"\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(strayEntry); _ = os.Remove(strayIP) })
	sawStray := func() bool {
		for _, line := range strings.Split(readFile(t, e.logPath), "\n") {
			if strings.Contains(line, `"CNI GC done"`) && strings.Contains(line, "notNetshims=1") {
				return true
			}
		}
		return false
	}
	if !poll(10*time.Second, sawStray) {
		t.Fatalf("no GC pass saw the attachment netshim never made\n%s", e.logTail(40))
	}
	if e.ipamStore()[stray] != fakeID {
		t.Fatalf("GC freed %s, held for a container netshim never made: store %v", stray, e.ipamStore())
	}
	if _, err := os.Stat(strayEntry); err != nil {
		t.Fatalf("GC removed the cache entry of an attachment netshim never made: %v", err)
	}
	if e.ipamStore()[ips["live"]] != ids["live"] {
		t.Fatalf("the periodic GC freed the live pod's IP %s", ips["live"])
	}
	// The live pod still works and is released normally.
	ping(t, ips["live"])
	e.mustCrictl("stopp", ids["live"])
	e.requireIPReleased(ips["live"], ids["live"])
	e.mustCrictl("rmp", ids["live"])
}

// strayAttachment turns the live pod's libcni cache entry into one for
// another container that holds the stray address. The result's interfaces
// are dropped: they name the live pod's veth, which a DEL of the copy must
// not touch (the bridge plugin deletes the host veth it is given).
func strayAttachment(t *testing.T, liveEntry, liveID, fakeID, liveIP, stray string) []byte {
	t.Helper()
	var entry map[string]any
	if err := json.Unmarshal([]byte(liveEntry), &entry); err != nil {
		t.Fatalf("parsing libcni cache entry: %v", err)
	}
	if res, ok := entry["result"].(map[string]any); ok {
		delete(res, "interfaces")
		if ips, ok := res["ips"].([]any); ok {
			for _, ip := range ips {
				if m, ok := ip.(map[string]any); ok {
					delete(m, "interface")
				}
			}
		}
	}
	data, err := json.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.ReplaceAll(strings.ReplaceAll(string(data), liveID, fakeID), liveIP+"/", stray+"/")
	return []byte(out)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return string(data)
}
