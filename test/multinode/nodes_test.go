//go:build multinode

package multinode

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netshim/netshim/test/harness"
)

// twoNodes makes a lan and two nodes on it, all undone at cleanup by the
// guard (which also undoes what a killed earlier run left).
func twoNodes(t *testing.T) (*harness.HostGuard, *harness.Lan, []*harness.Node) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("the multinode suite needs root")
	}
	g := harness.GuardHost(t, filepath.Join(os.TempDir(), "netshim-multinode.state"))
	dir, err := os.MkdirTemp("", "nsnodes")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.RecordTempDir(dir); err != nil {
		t.Fatal(err)
	}
	lan, err := harness.NewLan(g, "nslan", netip.MustParsePrefix("10.131.0.0/24"), "nslan0")
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*harness.Node
	for i, name := range []string{"node1", "node2"} {
		nd := filepath.Join(dir, name)
		if err := os.MkdirAll(nd, 0o755); err != nil {
			t.Fatal(err)
		}
		n, err := harness.NewNode(g, lan, name, lan.NodeIP(i+1), nd)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	return g, lan, nodes
}

// Each node is a machine of its own where it matters to kubelet and the
// engine: its links, its machine-id, its state directories, its /run;
// nodes and the host reach each other over the lan.
func TestNodesAreSeparateMachines(t *testing.T) {
	_, lan, nodes := twoNodes(t)
	ctx := context.Background()
	run := func(n *harness.Node, args ...string) string {
		t.Helper()
		out, err := n.Run(ctx, args[0], args[1:]...)
		if err != nil {
			t.Fatalf("%s: %v: %v\n%s", n.Name, args, err, out)
		}
		return strings.TrimSpace(out)
	}
	ids := map[string]bool{}
	for _, n := range nodes {
		if links := run(n, "ls", "/sys/class/net"); strings.Join(strings.Fields(links), " ") != "eth0 lo" {
			t.Errorf("%s: /sys/class/net = %q, want eth0 and lo", n.Name, links)
		}
		ids[run(n, "cat", "/etc/machine-id")] = true
		run(n, "sh", "-c", "echo "+n.Name+" > /var/lib/kubelet/owner && echo "+n.Name+" > /run/owner")
		// The lan: the other node, the host's end.
		for _, to := range []string{lan.HostIP().String(), nodes[0].IP.String(), nodes[1].IP.String()} {
			run(n, "ping", "-c", "1", "-W", "5", to)
		}
	}
	host, _ := os.ReadFile("/etc/machine-id")
	if len(ids) != 2 || ids[strings.TrimSpace(string(host))] {
		t.Errorf("machine-ids %v (host %s): want two of their own", ids, host)
	}
	for _, n := range nodes {
		for _, f := range []string{"/var/lib/kubelet/owner", "/run/owner"} {
			if got := run(n, "cat", f); got != n.Name {
				t.Errorf("%s: %s = %q: shared with another node", n.Name, f, got)
			}
		}
	}
	if _, err := os.Stat("/var/lib/kubelet/owner"); err == nil {
		t.Error("a node's /var/lib/kubelet is the host's")
	}
	if out, err := harness.RunCmd("ping", "-c", "1", "-W", "5", nodes[1].IP.String()); err != nil {
		t.Errorf("the host cannot reach %s: %v\n%s", nodes[1].Name, err, out)
	}
	// A mount made in a node (as kubelet mounts a volume) is seen by the
	// node's later commands, not by the host.
	run(nodes[0], "sh", "-c", "mkdir -p /var/lib/kubelet/vol && mount -t tmpfs tmpfs /var/lib/kubelet/vol && touch /var/lib/kubelet/vol/x")
	run(nodes[0], "test", "-e", "/var/lib/kubelet/vol/x")
	if out, _ := harness.RunCmd("findmnt", "-rn", "-o", "TARGET"); strings.Contains(out, "/var/lib/kubelet/vol") {
		t.Error("a node's mount reached the host")
	}
}
