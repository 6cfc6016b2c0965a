//go:build e2e

package e2e

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// A pod's sysctls are in its netns before the CNI ADD, in every mode
// (docs/design/sandbox-modes.md, "Sysctls and the network"; run it with
// NETSHIM_SANDBOX_NETNS=docker, pinned and pauseless): eth0, which the ADD
// makes, inherits the pod's net.ipv4.conf.default.rp_filter, and a pod
// that sets net.ipv6.conf.all.disable_ipv6=1 keeps the IPv6 address its
// status reports; the pod's containers write none of them again. A sysctl
// that does not exist before the ADD (an interface's) fails RunPodSandbox
// and leaves nothing.
func TestPodSysctlsBeforeNetwork(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.writeChain([]map[string]any{{
		"type":      "bridge",
		"bridge":    e.bridge,
		"isGateway": true,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]any{{{"subnet": e.subnet.String()}}, {{"subnet": e.subnet6().String()}}},
			"dataDir": e.ipamDir,
		},
	}})
	e.start()

	// A value the node does not have: a new netns starts with the node's
	// IPv4 defaults, so eth0 could not have it by chance.
	host, err := os.ReadFile("/proc/sys/net/ipv4/conf/default/rp_filter")
	if err != nil {
		t.Fatal(err)
	}
	rp := "2"
	if strings.TrimSpace(string(host)) == "2" {
		rp = "1"
	}
	id, podCfg := e.runPodWith("sysctl", harness.WithSysctls(map[string]string{
		"net.ipv4.conf.default.rp_filter":     rp,
		"net.ipv6.conf.all.disable_ipv6":      "1",
		"net.ipv4.ip_unprivileged_port_start": "1001",
	}))
	cp := e.readCheckpoint(id)
	mode := "docker"
	switch {
	case cp.Data.Pauseless != nil:
		mode = "pauseless"
	case cp.Data.NetNS != "":
		mode = "pinned"
	}
	t.Logf("sandbox %s made in the %s mode (NETSHIM_SANDBOX_NETNS=%q)", id, mode, os.Getenv("NETSHIM_SANDBOX_NETNS"))
	if want := os.Getenv("NETSHIM_SANDBOX_NETNS"); want != "" && want != "auto" && want != mode {
		t.Errorf("sandbox made in the %s mode, want %s", mode, want)
	}
	got, err := e.inPodNetNS(id, "cat", "/proc/sys/net/ipv4/conf/default/rp_filter", "/proc/sys/net/ipv4/conf/eth0/rp_filter")
	if err != nil {
		t.Fatalf("reading rp_filter in the pod's netns: %v\n%s", err, got)
	}
	if f := strings.Fields(got); len(f) != 2 || f[0] != rp || f[1] != rp {
		t.Errorf("rp_filter in the pod (default, eth0): %q, want %s for both: eth0 did not inherit the pod's default", f, rp)
	}
	ips := e.podIPs(id)
	var v6 string
	for _, ip := range ips {
		if p := net.ParseIP(ip); p != nil && p.To4() == nil {
			v6 = ip
		}
	}
	if v6 == "" {
		t.Fatalf("pod IPs %v: no IPv6 address", ips)
	}
	if out, err := e.inPodNetNS(id, "ip", "-6", "-o", "addr", "show", "dev", "eth0"); err != nil || !strings.Contains(out, " "+v6+"/") {
		t.Errorf("eth0's IPv6 addresses %q (%v): the status reports %s, which all.disable_ipv6=1 written after the ADD removed", out, err, v6)
	}
	// A container's start writes nothing into the pod's netns: Docker
	// gives every container with a netns of its own its defaults
	// (ip_unprivileged_port_start=0, ping_group_range), which runc wrote
	// over the pod's value in the pinned and pause-less modes. The pod
	// keeps its own; the engine's other default is there in every mode.
	e.startContainer(id, podCfg, "app", harness.WithCommand("sleep", "3600"))
	got, err = e.inPodNetNS(id, "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start", "/proc/sys/net/ipv4/ping_group_range")
	if err != nil {
		t.Fatalf("reading the pod's netns after its container started: %v\n%s", err, got)
	}
	if f := strings.Fields(got); len(f) != 3 || f[0] != "1001" || f[1] != "0" || f[2] != "2147483647" {
		t.Errorf("ip_unprivileged_port_start and ping_group_range in the pod after its container started: %q, want 1001 (the pod's) and \"0 2147483647\" (the engine's default)", f)
	}
	e.mustCrictl("stopp", id)
	e.mustCrictl("rmp", id)

	// net.ipv4.conf.eth0.* names an interface the ADD makes later: netshim
	// refuses it as InvalidArgument; in the docker mode runc's start fails
	// (which Docker 20.10 answers as invalid too, but is not netshim's
	// message to check).
	cfg := e.podConfig("sysctl-eth0", harness.WithSysctls(map[string]string{"net.ipv4.conf.eth0.rp_filter": rp}))
	ctx, cancel := e.rpcCtx()
	defer cancel()
	_, err = e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err == nil {
		t.Fatal("RunPodSandbox with net.ipv4.conf.eth0.rp_filter succeeded")
	}
	t.Logf("RunPodSandbox with net.ipv4.conf.eth0.rp_filter: %v", err)
	if mode != "docker" {
		if code := status.Code(err); code != codes.InvalidArgument || !strings.Contains(err.Error(), "net.ipv4.conf.eth0.rp_filter") {
			t.Errorf("RunPodSandbox = %v (%v), want InvalidArgument naming the sysctl", err, code)
		}
	}
	if ids := e.pauseContainers(); len(ids) != 0 {
		t.Errorf("pause containers left: %v", ids)
	}
	if files := e.checkpointFiles(); len(files) != 0 {
		t.Errorf("checkpoints left: %v", files)
	}
	if files := podFilesIn(t, e.ns.NetNSDir); len(files) != 0 {
		t.Errorf("pinned files left: %v", files)
	}
	list, err := e.client.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("sandboxes listed: %v, %v", list.GetItems(), err)
	}
}
