package kubenet

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/netshim/netshim/pkg/network"
)

const (
	// networkName is the CNI network name of the built-in network: it
	// names libcni's cache entries and host-local's store directory
	// (/var/lib/cni/networks/kubenet), as kubelet's kubenet did.
	networkName = "kubenet"

	// cniVersion of the built-in list: the firewall plugin needs 0.4.0 or
	// later, and the Debian plugins (v1.1.1) speak up to 1.0.0.
	cniVersion = "1.0.0"
)

// netConfig is everything the built-in network depends on.
type netConfig struct {
	Bridge      string
	PodCIDRs    []*net.IPNet // one per IP family, IPv4 first
	MTU         int          // 0: the bridge plugin's default
	Hairpin     network.HairpinMode
	IPAMDataDir string // "" : host-local's default
}

// ParseCIDRs parses a pod CIDR (possibly a dual-stack pair, see
// network.ParsePodCIDRs) and checks each range can hold the bridge's
// gateway and at least one pod.
func ParseCIDRs(s string) ([]*net.IPNet, error) {
	out, err := network.ParsePodCIDRs(s)
	if err != nil {
		return nil, err
	}
	for _, n := range out {
		if ones, bits := n.Mask.Size(); bits-ones < 2 {
			return nil, fmt.Errorf("invalid pod CIDR %s: too small for a gateway and a pod", n)
		}
	}
	return out, nil
}

// ParseNonMasqCIDRs parses --non-masquerade-cidr: a comma-separated list
// of CIDRs of either family.
func ParseNonMasqCIDRs(s string) ([]*net.IPNet, error) {
	var out []*net.IPNet
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		_, ipnet, err := net.ParseCIDR(part)
		if err != nil {
			return nil, fmt.Errorf("invalid CIDR %q: %w", part, err)
		}
		out = append(out, ipnet)
	}
	return out, nil
}

func cidrStrings(nets []*net.IPNet) []string {
	out := make([]string, len(nets))
	for i, n := range nets {
		out[i] = n.String()
	}
	return out
}

func isV4(n *net.IPNet) bool { return n.IP.To4() != nil }

// confList builds the built-in network:
//
//   - bridge: the pods' veths on c.Bridge, which gets each family's
//     gateway address (isGateway), so the pods' default routes (from the
//     IPAM routes) go through the host. No ipMasq: masquerading is
//     netshim's own rule (see masq.go), which honours the non-masquerade
//     CIDR. Hairpin: "hairpin-veth" sets hairpin on each veth port,
//     "promiscuous-bridge" puts the bridge in promiscuous mode instead
//     (the plugin refuses both at once), "none" does neither.
//   - host-local IPAM over the pod CIDR(s): one range set per family, so
//     a dual-stack pod gets one address of each.
//   - firewall (iptables backend): per-pod ACCEPT rules in CNI-FORWARD, so
//     pod-to-pod and pod-to-world traffic passes the FORWARD DROP policy
//     Docker sets.
//   - portmap: hostPorts, with snat so a pod reaches a hostPort of the
//     node (hairpin through the host port).
//   - bandwidth: ingress/egress shaping from the pod annotations.
//
// Loopback is not in the list: the cni plugin runs it on its own for
// every pod.
func confList(c netConfig) ([]byte, error) {
	if c.Bridge == "" {
		return nil, fmt.Errorf("no bridge name")
	}
	if len(c.PodCIDRs) == 0 {
		return nil, fmt.Errorf("no pod CIDR")
	}
	var ranges [][]map[string]any
	var routes []map[string]any
	for _, n := range c.PodCIDRs {
		ranges = append(ranges, []map[string]any{{"subnet": n.String()}})
		if isV4(n) {
			routes = append(routes, map[string]any{"dst": "0.0.0.0/0"})
		} else {
			routes = append(routes, map[string]any{"dst": "::/0"})
		}
	}
	ipam := map[string]any{
		"type":   "host-local",
		"ranges": ranges,
		"routes": routes,
	}
	if c.IPAMDataDir != "" {
		ipam["dataDir"] = c.IPAMDataDir
	}
	bridge := map[string]any{
		"type":        "bridge",
		"bridge":      c.Bridge,
		"isGateway":   true,
		"ipMasq":      false,
		"hairpinMode": c.Hairpin == network.HairpinVeth,
		"promiscMode": c.Hairpin == network.PromiscuousBridge,
		"ipam":        ipam,
	}
	if c.MTU > 0 {
		bridge["mtu"] = c.MTU
	}
	list := map[string]any{
		"cniVersion": cniVersion,
		"name":       networkName,
		"plugins": []map[string]any{
			bridge,
			{"type": "firewall", "backend": "iptables"},
			{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "snat": true},
			{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}},
		},
	}
	return json.MarshalIndent(list, "", "  ")
}

// pluginTypes are the plugin binaries the built-in network runs.
var pluginTypes = []string{"bridge", "host-local", "firewall", "portmap", "bandwidth", "loopback"}
