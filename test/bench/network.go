package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netlink"

	"github.com/netshim/netshim/test/harness"
)

const (
	bridgeName  = "nsbench0"
	benchSubnet = "10.124.0.0/16" // room for far more than 110 pods
	networkName = "nsbench"
)

// loopbackConfList is the loopback network netshim adds every pod to
// before its default network; the floor adds it too when it counts
// loopback.
const loopbackConfList = `{"cniVersion":"0.3.1","name":"cni-loopback","plugins":[{"type":"loopback"}]}`

// benchConfList is the pod network netshim and the floor both use: the
// Debian plugins' bridge with host-local IPAM, and portmap as kubelet
// setups have it.
func benchConfList(ipamDataDir string) ([]byte, error) {
	return harness.Conflist(
		harness.WithNetworkName(networkName),
		harness.WithBridge(bridgeName),
		harness.WithHairpin(false),
		harness.WithSubnets(benchSubnet),
		harness.WithDefaultRoute(),
		harness.WithIPAMDataDir(ipamDataDir),
	)
}

// prepareBridge makes sure no bench bridge is in use: one left by a run
// that was killed (no ports) is deleted; one with ports means another run
// is going on.
func prepareBridge() error {
	ports, err := os.ReadDir("/sys/class/net/" + bridgeName + "/brif")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(ports) > 0 {
		return fmt.Errorf("bridge %s exists with %d ports: is another bench running? (if not: ip link del %s)", bridgeName, len(ports), bridgeName)
	}
	return deleteBridge()
}

// deleteBridge removes the bench bridge; a missing one is fine.
func deleteBridge() error {
	l, err := netlink.LinkByName(bridgeName)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("deleting bridge %s: %w", bridgeName, err)
	}
	return nil
}
