package cni

import (
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestForgetNeighbors runs in a network namespace of its own: entries for
// the given IPs go, on every link, but permanent ones; others stay.
func TestForgetNeighbors(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	host, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	ns, err := netns.New() // and enters it
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	defer func() {
		if err := netns.Set(host); err != nil {
			t.Fatalf("back to the host namespace: %v", err)
		}
	}()

	links := make([]netlink.Link, 2)
	for i, name := range []string{"nsneigh0", "nsneigh1"} {
		// Bridges: this kernel may lack the dummy driver, never a bridge.
		l := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
		if err := netlink.LinkAdd(l); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		links[i] = l
	}
	mac, _ := net.ParseMAC("0a:58:0a:f4:01:05")
	add := func(link netlink.Link, ip string, state int) {
		t.Helper()
		n := &netlink.Neigh{LinkIndex: link.Attrs().Index, IP: net.ParseIP(ip), HardwareAddr: mac, State: state}
		if err := netlink.NeighAdd(n); err != nil {
			t.Fatalf("adding %s: %v", ip, err)
		}
	}
	add(links[0], "10.244.1.5", netlink.NUD_STALE)
	add(links[1], "10.244.1.5", netlink.NUD_REACHABLE)
	add(links[0], "fd00:10:244:1::5", netlink.NUD_STALE)
	add(links[0], "10.244.1.6", netlink.NUD_STALE)     // another pod's
	add(links[0], "10.244.1.7", netlink.NUD_PERMANENT) // an operator's

	if err := forgetNeighbors([]net.IP{net.ParseIP("10.244.1.5"), net.ParseIP("fd00:10:244:1::5"), net.ParseIP("10.244.1.7")}); err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		neighs, err := netlink.NeighList(0, family)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range neighs {
			if n.HardwareAddr.String() == mac.String() {
				left[n.IP.String()] = true
			}
		}
	}
	for ip, want := range map[string]bool{"10.244.1.5": false, "fd00:10:244:1::5": false, "10.244.1.6": true, "10.244.1.7": true} {
		if left[ip] != want {
			t.Errorf("entry for %s left: %v, want %v (left: %v)", ip, left[ip], want, left)
		}
	}
	// Nothing to delete is no error.
	if err := forgetNeighbors([]net.IP{net.ParseIP("10.244.1.99")}); err != nil {
		t.Errorf("nothing to delete: %v", err)
	}
}
