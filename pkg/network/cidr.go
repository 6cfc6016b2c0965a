package network

import (
	"fmt"
	"net"
	"strings"
)

// ParsePodCIDRs parses a node's pod CIDR as kubelet and --pod-cidr give
// it: one CIDR, or a comma-separated pair of different IP families for
// dual-stack. The result is in network form ("10.244.1.0/24"), IPv4
// first, as the CRI orders a dual-stack pod's addresses.
func ParsePodCIDRs(s string) ([]*net.IPNet, error) {
	var v4, v6 *net.IPNet
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		_, ipnet, err := net.ParseCIDR(part)
		if err != nil {
			return nil, fmt.Errorf("invalid pod CIDR %q: %w", part, err)
		}
		if ip4 := ipnet.IP.To4(); ip4 != nil {
			if v4 != nil {
				return nil, fmt.Errorf("invalid pod CIDR %q: more than one IPv4 CIDR", s)
			}
			ipnet.IP = ip4
			v4 = ipnet
		} else {
			if v6 != nil {
				return nil, fmt.Errorf("invalid pod CIDR %q: more than one IPv6 CIDR", s)
			}
			v6 = ipnet
		}
	}
	var out []*net.IPNet
	for _, n := range []*net.IPNet{v4, v6} {
		if n != nil {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("invalid pod CIDR %q: empty", s)
	}
	return out, nil
}
