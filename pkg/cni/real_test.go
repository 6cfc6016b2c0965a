//go:build linux

package cni

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/netshim/netshim/pkg/network"
)

const realBinDir = "/usr/lib/cni"

// TestRealPlugins runs the Debian CNI plugins (bridge, host-local,
// portmap, loopback) against a throwaway netns on a private subnet.
func TestRealPlugins(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, b := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(realBinDir, b)); err != nil {
			t.Skipf("CNI plugin %s not installed: %v", b, err)
		}
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip(8) not installed")
	}

	// Names and subnet are per process so that parallel runs on the same
	// machine (other packages, other checkouts) do not collide.
	id := os.Getpid() % 100000
	bridgeName := fmt.Sprintf("nscni%d", id)
	nsName := fmt.Sprintf("nscni-test-%d", id)
	subnet := freeSubnet(t)
	netName := fmt.Sprintf("nscni-test-%d", id)

	run(t, "ip", "netns", "add", nsName)
	t.Cleanup(func() {
		// The netns may already be gone (the second phase deletes it).
		_ = exec.Command("ip", "netns", "del", nsName).Run()
		if err := exec.Command("ip", "link", "del", bridgeName).Run(); err != nil {
			t.Logf("deleting bridge %s: %v", bridgeName, err)
		}
	})
	nsPath := filepath.Join("/var/run/netns", nsName)

	confDir, dataDir := t.TempDir(), t.TempDir()
	// isGateway and ipMasq stay off: they would change host-wide settings
	// (ip_forward, masquerade rules) that this test has no business with.
	writeFile(t, confDir, "10-test.conflist", fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": false, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}},
    {"type": "portmap", "snat": false, "capabilities": {"portMappings": true}}
  ]
}`, netName, bridgeName, subnet.String(), dataDir))

	host := newFakeHost()
	pod := network.PodRef{Namespace: "default", Name: "real", UID: "uid-real", SandboxID: fmt.Sprintf("realtest%dsandbox", id)}
	host.setNetNS(pod.SandboxID, nsPath)
	hostPort := int32(30000 + id%20000)
	host.setPorts(pod.SandboxID, []network.PortMapping{
		{Protocol: "tcp", ContainerPort: 80, HostPort: hostPort},
		{Protocol: "tcp", ContainerPort: 81},
	})

	p := NewPlugin(Options{ConfDir: confDir, BinDirs: []string{realBinDir}, CacheDir: t.TempDir(), StateDir: t.TempDir(), SyncPeriod: time.Hour})
	if err := p.Init(host, network.PluginConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if err := p.Status(); err != nil {
		t.Fatalf("Status: %v", err)
	}
	// Runs before the netns/bridge cleanup above (cleanups are LIFO), so
	// that a failing test still removes its host port rules.
	t.Cleanup(func() { _ = p.TearDownPod(context.Background(), pod) })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Phase 1: set up, read the IP from the netns, tear down twice.
	if err := p.SetUpPod(ctx, pod, nil, network.SetUpOptions{}); err != nil {
		t.Fatalf("SetUpPod: %v", err)
	}
	ip := podIP(t, p, pod, subnet)
	if !ipAllocated(dataDir, netName, ip) {
		t.Fatalf("host-local holds no file for %s", ip)
	}
	if !loopbackUp(t, nsPath) {
		t.Errorf("lo is not up in the pod netns")
	}
	if rules, ok := natRules(); ok && !strings.Contains(rules, pod.SandboxID) {
		t.Errorf("no host port rule for the pod after ADD:\n%s", rules)
	}

	if err := p.TearDownPod(ctx, pod); err != nil {
		t.Fatalf("TearDownPod: %v", err)
	}
	if ipAllocated(dataDir, netName, ip) {
		t.Errorf("host-local still holds %s after teardown", ip)
	}
	if rules, ok := natRules(); ok && strings.Contains(rules, pod.SandboxID) {
		t.Errorf("host port rules left after DEL:\n%s", rules)
	}
	if err := p.TearDownPod(ctx, pod); err != nil {
		t.Fatalf("second TearDownPod: %v", err)
	}

	// Phase 2: the sandbox dies before teardown. Status comes from the
	// cache, and DEL without a netns still frees the IP.
	if err := p.SetUpPod(ctx, pod, nil, network.SetUpOptions{}); err != nil {
		t.Fatalf("SetUpPod again: %v", err)
	}
	ip = podIP(t, p, pod, subnet)
	run(t, "ip", "netns", "del", nsName)
	host.setNetNS(pod.SandboxID, "")
	st, err := p.GetPodNetworkStatus(ctx, pod)
	if err != nil {
		t.Fatalf("GetPodNetworkStatus without netns: %v", err)
	}
	if len(st.IPs) != 1 || !st.IPs[0].Equal(ip) {
		t.Errorf("cached IPs = %v, want %s", st.IPs, ip)
	}
	if err := p.TearDownPod(ctx, pod); err != nil {
		t.Fatalf("TearDownPod without netns: %v", err)
	}
	if ipAllocated(dataDir, netName, ip) {
		t.Errorf("host-local still holds %s after teardown without netns", ip)
	}
	if rules, ok := natRules(); ok && strings.Contains(rules, pod.SandboxID) {
		t.Errorf("host port rules left after DEL without netns:\n%s", rules)
	}
	if err := p.TearDownPod(ctx, pod); err != nil {
		t.Fatalf("second TearDownPod without netns: %v", err)
	}
}

// podIP returns the pod's single IP as read by GetPodNetworkStatus and
// checks it is in subnet.
func podIP(t *testing.T, p *Plugin, pod network.PodRef, subnet *net.IPNet) net.IP {
	t.Helper()
	st, err := p.GetPodNetworkStatus(context.Background(), pod)
	if err != nil {
		t.Fatalf("GetPodNetworkStatus: %v", err)
	}
	if len(st.IPs) != 1 || !subnet.Contains(st.IPs[0]) {
		t.Fatalf("pod IPs = %v, want one in %s", st.IPs, subnet)
	}
	if len(st.Result) == 0 {
		t.Errorf("no raw result")
	}
	return st.IPs[0]
}

// ipAllocated says whether host-local's store holds ip.
func ipAllocated(dataDir, netName string, ip net.IP) bool {
	_, err := os.Stat(filepath.Join(dataDir, netName, ip.String()))
	return err == nil
}

func loopbackUp(t *testing.T, nsPath string) bool {
	t.Helper()
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	return lo.Attrs().Flags&net.FlagUp != 0
}

// natRules returns the host's NAT rules, or false if they cannot be read.
func natRules() (string, bool) {
	out, err := exec.Command("iptables-save", "-t", "nat").Output()
	if err != nil {
		return "", false
	}
	return string(out), true
}

// freeSubnet picks a 10.99.x.0/24 that no host interface address or route
// overlaps.
func freeSubnet(t *testing.T) *net.IPNet {
	t.Helper()
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	start := os.Getpid() % 200
	for i := 0; i < 200; i++ {
		_, cand, _ := net.ParseCIDR(fmt.Sprintf("10.99.%d.0/24", 20+(start+i)%200))
		busy := false
		for _, r := range routes {
			if r.Dst == nil {
				continue
			}
			if ones, _ := r.Dst.Mask.Size(); ones == 0 {
				continue // the default route
			}
			if r.Dst.Contains(cand.IP) || cand.Contains(r.Dst.IP) {
				busy = true
			}
		}
		for _, a := range addrs {
			if a.IPNet.Contains(cand.IP) || cand.Contains(a.IP) {
				busy = true
			}
		}
		if !busy {
			return cand
		}
	}
	t.Skip("no free 10.99.x.0/24 subnet")
	return nil
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}
