package kubenet

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2"
)

// defaultRouteMTU returns the MTU of the link the default route goes out
// of (IPv4 first, then IPv6), or 0 when there is no default route.
func defaultRouteMTU() (int, error) {
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteList(nil, family)
		if err != nil {
			return 0, fmt.Errorf("listing routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			idx := r.LinkIndex
			if idx == 0 && len(r.MultiPath) > 0 {
				idx = r.MultiPath[0].LinkIndex
			}
			if idx == 0 {
				continue
			}
			link, err := netlink.LinkByIndex(idx)
			if err != nil {
				return 0, fmt.Errorf("finding the default route's link (index %d): %w", idx, err)
			}
			if mtu := link.Attrs().MTU; mtu > 0 {
				return mtu, nil
			}
		}
	}
	return 0, nil
}

// gatewayAddr is the address the bridge plugin gives the bridge for a
// pod CIDR: host-local's default gateway (the first address) with the
// CIDR's prefix.
func gatewayAddr(n *net.IPNet) *net.IPNet {
	ip := make(net.IP, len(n.IP))
	copy(ip, n.IP)
	ip[len(ip)-1]++
	return &net.IPNet{IP: ip, Mask: n.Mask}
}

// clearStaleBridgeAddrs removes from the bridge the global addresses
// that are not the gateway of a current pod CIDR: left by an older pod
// CIDR, they would make the bridge plugin refuse every ADD ("already has
// an IP address different from ..."). Kubernetes gives a node a new pod
// CIDR only when it is re-registered, so pods of the old one are not
// reachable anyway. A missing bridge is not an error: the bridge plugin
// creates it.
func clearStaleBridgeAddrs(bridge string, podCIDRs []*net.IPNet) error {
	link, err := netlink.LinkByName(bridge)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("finding bridge %s: %w", bridge, err)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("listing addresses of %s: %w", bridge, err)
	}
	want := map[string]bool{}
	for _, n := range podCIDRs {
		want[gatewayAddr(n).String()] = true
	}
	for _, a := range addrs {
		if a.Scope != int(netlink.SCOPE_UNIVERSE) || a.IPNet == nil || want[a.IPNet.String()] {
			continue
		}
		klog.InfoS("Removing a stale address from the kubenet bridge (pod CIDR changed)", "bridge", bridge, "address", a.IPNet.String())
		if err := netlink.AddrDel(link, &a); err != nil {
			return fmt.Errorf("removing stale address %s from %s: %w", a.IPNet, bridge, err)
		}
	}
	return nil
}
