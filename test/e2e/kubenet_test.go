//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kubenetEnv is an env whose netshim runs --network-plugin=kubenet on the
// slot's bridge, with host-local's store in the temp dir. The masquerade
// chain kubenet leaves in place by design is removed at cleanup.
func kubenetEnv(t *testing.T, flags ...string) *env {
	t.Helper()
	e := newEnv(t, envOptions{})
	e.extraFlags = append([]string{
		"--network-plugin=kubenet",
		"--kubenet-bridge=" + e.bridge,
		"--kubenet-ipam-dir=" + e.ipamDir,
	}, flags...)
	// Registered after newEnv's cleanup, so it runs before it: the pods
	// are stopped then, which is fine, the chain holds no per-pod state.
	t.Cleanup(func() { removeKubenetMasq(t, kubenetMasqChain(e)) })
	return e
}

func kubenetMasqChain(e *env) string { return "NETSHIM-MASQ-" + e.bridge }

// removeKubenetMasq deletes kubenet's masquerade chain and the jumps to
// it, both families.
func removeKubenetMasq(t *testing.T, chain string) {
	for _, bin := range []string{"iptables", "ip6tables"} {
		out, err := runCmd(bin, "-w", "-t", "nat", "-S", "POSTROUTING")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(out, "\n") {
			if !strings.HasSuffix(line, "-j "+chain) {
				continue
			}
			// The comment is quoted in -S output; run through a shell-free
			// split that keeps it whole.
			args := append([]string{"-w", "-t", "nat", "-D", "POSTROUTING"}, splitQuoted(strings.TrimPrefix(line, "-A POSTROUTING "))...)
			if out, err := runCmd(bin, args...); err != nil {
				t.Logf("cleanup: %s %v: %v\n%s", bin, args, err, out)
			}
		}
		if _, err := runCmd(bin, "-w", "-t", "nat", "-S", chain); err == nil {
			runCmd(bin, "-w", "-t", "nat", "-F", chain)
			if out, err := runCmd(bin, "-w", "-t", "nat", "-X", chain); err != nil {
				t.Logf("cleanup: %s -X %s: %v\n%s", bin, chain, err, out)
			}
		}
	}
}

func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	in, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			in, have = !in, true
		case r == ' ' && !in:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// networkCondition returns the NetworkReady condition of CRI Status.
func (e *env) networkCondition() *runtimeapi.RuntimeCondition {
	e.t.Helper()
	ctx, cancel := e.rpcCtx()
	defer cancel()
	resp, err := e.client.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		e.t.Fatalf("CRI Status: %v", err)
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.Type == runtimeapi.NetworkReady {
			return c
		}
	}
	e.t.Fatalf("CRI Status has no NetworkReady condition: %v", resp)
	return nil
}

// kubenetStore reads host-local's store of the kubenet network: IP → the
// container ID holding it.
func (e *env) kubenetStore() map[string]string {
	e.t.Helper()
	dir := filepath.Join(e.ipamDir, "kubenet")
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		e.t.Fatalf("reading %s: %v", dir, err)
	}
	store := map[string]string{}
	for _, ent := range ents {
		if net.ParseIP(ent.Name()) == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			continue
		}
		first, _, _ := strings.Cut(string(data), "\n")
		store[ent.Name()] = strings.TrimSpace(first)
	}
	return store
}

// kubenetPodIPs returns the pod's IPs as `crictl inspectp` shows them,
// failing the test if it has none.
func (e *env) kubenetPodIPs(id string) []string {
	e.t.Helper()
	ips := e.podIPs(id)
	if len(ips) == 0 {
		e.t.Fatalf("crictl inspectp %s: no pod IP", id)
	}
	return ips
}

// inPodNetNS runs a command in the pod's network namespace (the pause
// image has no shell to exec into, and a pause-less pod has none).
func (e *env) inPodNetNS(id string, args ...string) (string, error) {
	return runCmd("nsenter", append([]string{"--net=" + e.podNetNS(id)}, args...)...)
}

// pingFromPod pings ip from inside pod id until it answers (a fresh IPv6
// address may be tentative for a moment) or the deadline passes.
func (e *env) pingFromPod(id, ip string) {
	e.t.Helper()
	var out string
	var err error
	if !poll(pingDeadline, func() bool {
		out, err = e.inPodNetNS(id, "ping", "-c1", "-W2", ip)
		return err == nil
	}) {
		e.t.Fatalf("pod %s cannot ping %s: %v\n%s\nFORWARD chain:\n%s", id, ip, err, out, mustRun(e.t, "iptables", "-w", "-S", "FORWARD"))
	}
}

func pingFromHost(t *testing.T, ip string) {
	t.Helper()
	var out string
	var err error
	if !poll(pingDeadline, func() bool {
		out, err = runCmd("ping", "-c1", "-W2", ip)
		return err == nil
	}) {
		t.Fatalf("the host cannot ping %s: %v\n%s", ip, err, out)
	}
}

// defaultRouteMTU is the MTU of the host's default route link, which
// kubenet gives the pods when --mtu is not set.
func defaultRouteMTU(t *testing.T) string {
	t.Helper()
	f := strings.Fields(mustRun(t, "ip", "-o", "route", "show", "default"))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "dev" {
			data, err := os.ReadFile("/sys/class/net/" + f[i+1] + "/mtu")
			if err != nil {
				t.Fatalf("reading the MTU of %s: %v", f[i+1], err)
			}
			return strings.TrimSpace(string(data))
		}
	}
	return ""
}

// TestKubenet: NetworkReady=false until the pod CIDR arrives through
// UpdateRuntimeConfig; then two pods on the kubenet bridge reach each
// other by IP through Docker's FORWARD DROP policy (the firewall plugin's
// rules), get the default route's MTU, hairpin on their veths and the
// masquerade rules; stop and remove free everything per pod.
func TestKubenet(t *testing.T) {
	e := kubenetEnv(t, "--non-masquerade-cidr=10.0.0.0/8")
	e.start()

	// (a) Not ready without a pod CIDR, with a reason saying what to do.
	c := e.networkCondition()
	if c.Status || !strings.Contains(c.Message, "pod CIDR not set") || !strings.Contains(c.Message, "--pod-cidr") {
		t.Fatalf("NetworkReady before the pod CIDR: status %v reason %q message %q; want false with the pod CIDR reason", c.Status, c.Reason, c.Message)
	}
	out, _, _ := e.crictl("info")
	if !strings.Contains(out, "pod CIDR not set") {
		t.Errorf("crictl info does not show the reason:\n%s", out)
	}
	ctx, cancel := e.rpcCtx()
	if _, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: e.podConfig("early")}); err == nil {
		t.Errorf("RunPodSandbox succeeded before the pod CIDR was known")
	}
	if _, err := e.client.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{
		RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: e.subnet.String()}},
	}); err != nil {
		t.Fatalf("UpdateRuntimeConfig: %v", err)
	}
	cancel()
	if c := e.networkCondition(); !c.Status {
		t.Fatalf("NetworkReady after UpdateRuntimeConfig: false, %q", c.Message)
	}
	// The early pod that failed holds nothing.
	for _, id := range e.listPodIDs() {
		e.mustCrictl("rmp", "-f", id)
	}

	// The masquerade rules: pod CIDR → outside 10.0.0.0/8 is masqueraded.
	chain := kubenetMasqChain(e)
	rules := mustRun(t, "iptables", "-w", "-t", "nat", "-S", chain)
	for _, want := range []string{"-d " + e.subnet.String() + " -j RETURN", "-d 10.0.0.0/8 -j RETURN", "-j MASQUERADE"} {
		if !strings.Contains(rules, want) {
			t.Errorf("masquerade chain lacks %q:\n%s", want, rules)
		}
	}
	if jumps := grepRules(natRules(t), "-A POSTROUTING", "-s "+e.subnet.String(), "-j "+chain); len(jumps) != 1 {
		t.Errorf("POSTROUTING jumps to %s for %s: %q, want one", chain, e.subnet, jumps)
	}

	// (b) Two pods reach each other.
	if policy := mustRun(t, "iptables", "-w", "-S", "FORWARD"); !strings.Contains(policy, "-P FORWARD DROP") {
		t.Logf("note: the FORWARD policy is not DROP here; the test still checks pod-to-pod traffic:\n%s", policy)
	}
	idA := e.runp(e.writePodJSON("kna"))
	idB := e.runp(e.writePodJSON("knb"))
	ipA, ipB := e.kubenetPodIPs(idA)[0], e.kubenetPodIPs(idB)[0]
	e.requireInSubnet("pod A", ipA)
	e.requireInSubnet("pod B", ipB)
	store := e.kubenetStore()
	if store[ipA] != idA || store[ipB] != idB {
		t.Fatalf("host-local store %v, want %s→%s and %s→%s", store, ipA, idA, ipB, idB)
	}
	pingFromHost(t, ipA)
	pingFromHost(t, ipB)
	e.pingFromPod(idA, ipB)
	e.pingFromPod(idB, ipA)

	// The pod's default route goes through the bridge; its MTU is the
	// host's default route link's.
	route, err := e.inPodNetNS(idA, "ip", "route", "show", "default")
	if gw := e.gatewayIPv4(); err != nil || !strings.Contains(route, "via "+gw) {
		t.Errorf("pod A's default route %q (err %v), want via %s", route, err, gw)
	}
	if mtu := defaultRouteMTU(t); mtu != "" {
		link, _ := e.inPodNetNS(idA, "ip", "-o", "link", "show", "eth0")
		if !strings.Contains(link, "mtu "+mtu+" ") {
			t.Errorf("pod A's eth0 %q, want mtu %s (the default route link's)", link, mtu)
		}
	}
	// hairpin-veth (the default): hairpin on each veth port.
	veths := e.vethsOnBridge()
	if len(veths) != 2 {
		t.Errorf("veths on %s: %v, want 2", e.bridge, veths)
	}
	for _, v := range veths {
		data, err := os.ReadFile("/sys/class/net/" + v + "/brport/hairpin_mode")
		if err != nil || strings.TrimSpace(string(data)) != "1" {
			t.Errorf("hairpin_mode of %s: %q (err %v), want 1", v, data, err)
		}
	}
	// The firewall plugin's per-pod rules.
	fw := mustRun(t, "iptables", "-w", "-S")
	for _, ip := range []string{ipA, ipB} {
		if !strings.Contains(fw, ip+"/32") {
			t.Errorf("no firewall rule for %s:\n%s", ip, fw)
		}
	}

	// Teardown frees each pod's address, veth and firewall rules.
	for _, p := range []struct{ id, ip string }{{idA, ipA}, {idB, ipB}} {
		e.mustCrictl("stopp", p.id)
		if holder, held := e.kubenetStore()[p.ip]; held {
			t.Errorf("IP %s still held by %q after stopp %s", p.ip, holder, p.id)
		}
		if fw := mustRun(t, "iptables", "-w", "-S"); strings.Contains(fw, p.ip+"/32") {
			t.Errorf("firewall rules for %s left after stopp:\n%s", p.ip, fw)
		}
		e.mustCrictl("rmp", p.id)
	}
	if v := e.vethsOnBridge(); len(v) != 0 {
		t.Errorf("veths left on %s: %v", e.bridge, v)
	}
	if s := e.kubenetStore(); len(s) != 0 {
		t.Errorf("host-local store not empty: %v", s)
	}

	// A different pod CIDR later is refused: the network keeps working
	// with the first one.
	ctx, cancel = e.rpcCtx()
	defer cancel()
	if _, err := e.client.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{
		RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.124.0.0/24"}},
	}); err != nil {
		t.Fatalf("UpdateRuntimeConfig: %v", err)
	}
	idC := e.runp(e.writePodJSON("knc"))
	e.requireInSubnet("pod C after a CIDR change", e.kubenetPodIPs(idC)[0])
	e.mustCrictl("stopp", idC)
	e.mustCrictl("rmp", idC)
}

// TestKubenetDualStackPromiscuous: --pod-cidr with an IPv4,IPv6 pair makes
// the network ready at once; pods get one address per family and reach
// each other in both; promiscuous-bridge puts the bridge in promiscuous
// mode and leaves hairpin off; both families get a masquerade chain.
func TestKubenetDualStackPromiscuous(t *testing.T) {
	e := newEnv(t, envOptions{})
	_, v6, _ := net.ParseCIDR(fmt.Sprintf("fd00:10:124:%x::/64", e.slot))
	e.extraFlags = []string{
		"--network-plugin=kubenet",
		"--kubenet-bridge=" + e.bridge,
		"--kubenet-ipam-dir=" + e.ipamDir,
		"--pod-cidr=" + e.subnet.String() + "," + v6.String(),
		"--hairpin-mode=promiscuous-bridge",
	}
	t.Cleanup(func() { removeKubenetMasq(t, kubenetMasqChain(e)) })
	e.start()
	if c := e.networkCondition(); !c.Status {
		t.Fatalf("NetworkReady with --pod-cidr: false, %q", c.Message)
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		if out, err := runCmd(bin, "-w", "-t", "nat", "-S", kubenetMasqChain(e)); err != nil || !strings.Contains(out, "-j MASQUERADE") {
			t.Errorf("%s: no masquerade chain %s: %v\n%s", bin, kubenetMasqChain(e), err, out)
		}
	}

	idA := e.runp(e.writePodJSON("kda"))
	idB := e.runp(e.writePodJSON("kdb"))
	ipsA, ipsB := e.kubenetPodIPs(idA), e.kubenetPodIPs(idB)
	if len(ipsA) != 2 || len(ipsB) != 2 {
		t.Fatalf("pod IPs %v and %v, want an IPv4 and an IPv6 each", ipsA, ipsB)
	}
	e.requireInSubnet("pod A", ipsA[0])
	if ip := net.ParseIP(ipsA[1]); ip == nil || !v6.Contains(ip) {
		t.Fatalf("pod A's second IP %s is not in %s", ipsA[1], v6)
	}
	for i := range 2 {
		pingFromHost(t, ipsB[i])
		e.pingFromPod(idA, ipsB[i])
		e.pingFromPod(idB, ipsA[i])
	}

	link := mustRun(t, "ip", "-d", "link", "show", e.bridge)
	if !strings.Contains(link, "PROMISC") && !strings.Contains(link, "promiscuity 1") {
		t.Errorf("bridge %s is not promiscuous:\n%s", e.bridge, link)
	}
	for _, v := range e.vethsOnBridge() {
		data, err := os.ReadFile("/sys/class/net/" + v + "/brport/hairpin_mode")
		if err != nil || strings.TrimSpace(string(data)) != "0" {
			t.Errorf("hairpin_mode of %s: %q (err %v), want 0 with promiscuous-bridge", v, data, err)
		}
	}

	for _, id := range []string{idA, idB} {
		e.mustCrictl("stopp", id)
		e.mustCrictl("rmp", id)
	}
	if s := e.kubenetStore(); len(s) != 0 {
		t.Errorf("host-local store not empty after removing the pods: %v", s)
	}
}

// gatewayIPv4 is the bridge's IPv4 address: the first of the slot subnet.
func (e *env) gatewayIPv4() string {
	ip := e.subnet.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], 1).String()
}
