package cni

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/vishvananda/netlink"
)

// forgetNeighbors deletes the host's neighbour entries (ARP, NDP) for ips,
// on every link, but the permanent ones an operator set.
//
// A pod IP is handed out again once the IPAM range wraps around, and the
// host may still hold the MAC of the pod that had it before: the kernel
// keeps neighbour entries while there are few of them, and the bridge
// plugin's gratuitous ARP does not replace them. Until the kernel
// re-resolves the address (5 s or more) every packet from the host to the
// new pod goes to the old MAC and is lost, so kubelet's first probes time
// out and a healthy container is restarted. Without the entry the first
// packet resolves the new MAC.
func forgetNeighbors(ips []net.IP) error {
	var errs []error
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		neighs, err := netlink.NeighList(0, family)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing neighbour entries: %w", err))
			continue
		}
		for _, n := range neighs {
			if n.State&netlink.NUD_PERMANENT != 0 || !containsIP(ips, n.IP) {
				continue
			}
			if err := netlink.NeighDel(&n); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("deleting neighbour entry %s on link %d: %w", n.IP, n.LinkIndex, err))
			}
		}
	}
	return errors.Join(errs...)
}

func containsIP(ips []net.IP, ip net.IP) bool {
	for _, x := range ips {
		if x.Equal(ip) {
			return true
		}
	}
	return false
}
