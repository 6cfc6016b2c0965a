package cni

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// errNetNSGone means the namespace path could not be opened: the sandbox
// is gone and the caller should fall back to what libcni cached.
var errNetNSGone = errors.New("network namespace is gone")

// podIPsInNetNS returns the global-scope addresses of ifName inside the
// network namespace at path, IPv4 first. It uses a netlink socket created
// inside the namespace, so no goroutine of ours ever runs in the pod's
// namespace and no nsenter is forked.
func podIPsInNetNS(path, ifName string) ([]net.IP, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w: %w", path, errNetNSGone, err)
	}
	defer ns.Close()

	h, err := netlink.NewHandleAt(ns, syscall.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening netlink socket in %s: %w", path, err)
	}
	defer h.Close()

	link, err := h.LinkByName(ifName)
	if err != nil {
		return nil, fmt.Errorf("finding %s in %s: %w", ifName, path, err)
	}

	// A dump interrupted by a concurrent change may be inconsistent:
	// retry a few times before giving up.
	var addrs []netlink.Addr
	for attempt := 0; ; attempt++ {
		addrs, err = h.AddrList(link, netlink.FAMILY_ALL)
		if err == nil {
			break
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) || attempt == 4 {
			return nil, fmt.Errorf("listing addresses of %s in %s: %w", ifName, path, err)
		}
	}

	var ips []net.IP
	for _, a := range addrs {
		// Link-local (IPv6 fe80::) and host-scope addresses are not pod IPs.
		if a.Scope != int(netlink.SCOPE_UNIVERSE) || a.IPNet == nil {
			continue
		}
		ips = append(ips, a.IP)
	}
	return orderIPs(ips), nil
}
