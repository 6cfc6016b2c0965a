//go:build e2e

package e2e

import (
	"net"
	"slices"
	"testing"
	"time"
)

// A dual-stack host-local config (one range set per family) gives the pod
// an IPv4 and an IPv6 address, with no flag: `crictl inspectp` reports the
// IPv4 one as the primary and the IPv6 one as additional, the checkpoint
// holds both, both answer a ping from the host, and stopp releases both.
func TestNetworkDualStack(t *testing.T) {
	e := newEnv(t, envOptions{})
	v6 := e.subnet6()
	e.writeChain([]map[string]any{
		{
			"type":        "bridge",
			"bridge":      e.bridge,
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type": "host-local",
				"ranges": [][]map[string]any{
					{{"subnet": e.subnet.String()}},
					{{"subnet": v6.String()}},
				},
				"dataDir": e.ipamDir,
			},
		},
		{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
	})
	e.start()

	id := e.runp(e.writePodJSON("dual"))
	ips := e.podIPs(id)
	if len(ips) != 2 {
		t.Fatalf("crictl inspectp %s: IPs %v, want one IPv4 and one IPv6", id, ips)
	}
	e.requireInSubnet("primary IP", ips[0])
	if ip := net.ParseIP(ips[1]); ip == nil || ip.To4() != nil || !v6.Contains(ip) {
		t.Fatalf("additional IP %q is not an IPv6 address in %s", ips[1], v6)
	}
	if got := e.readCheckpoint(id).Data.IPs; !slices.Equal(got, ips) {
		t.Errorf("checkpoint IPs %v, want %v (IPv4 first)", got, ips)
	}
	e.requireIPsHeldBy(id, ips)
	for _, ip := range ips {
		if out, ok := pingPoll(ip, 10*time.Second); !ok {
			diag, _ := e.inPodNetNS(id, "sh", "-c", "ip addr; sysctl net.ipv6.conf.all.disable_ipv6 net.ipv6.conf.default.disable_ipv6 net.ipv6.conf.eth0.disable_ipv6")
			t.Errorf("pod IP %s does not answer a ping from the host:\n%s\nin the pod's netns:\n%s", ip, out, diag)
		}
	}
	t.Logf("pod %s: IPv4 %s, IPv6 %s", id, ips[0], ips[1])

	e.mustCrictl("stopp", id)
	for _, ip := range ips {
		e.requireIPReleased(ip, id)
	}
	e.mustCrictl("rmp", id)
	e.requireNoCheckpoint(id)
}
