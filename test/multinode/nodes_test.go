//go:build multinode

package multinode

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// twoNodes makes a lan and two nodes on it, all undone at cleanup by the
// guard (which also undoes what a killed earlier run left).
func twoNodes(t *testing.T) (*harness.HostGuard, *harness.Lan, []*harness.Node) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("the multinode suite needs root")
	}
	// make e2e-multinode keeps it in _output; a killed run's is undone first.
	state := os.Getenv("E2E_MULTINODE_STATE")
	if state == "" {
		state = filepath.Join(os.TempDir(), "netshim-multinode.state")
	}
	g := harness.GuardHost(t, state)
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

// binary is the path in the environment variable env (set by make
// e2e-multinode), which must be an executable.
func binary(t *testing.T, env string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		t.Fatalf("$%s is not set (make e2e-multinode sets it)", env)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("$%s=%s: not an executable (%v)", env, p, err)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// Each node runs its own Docker 29 engine and netshim at the paths of a
// packaged node, with its containers' cgroups under the node's own root.
func TestNodesRunTheirOwnEngineAndNetshim(t *testing.T) {
	_, lan, nodes := twoNodes(t)
	dockerd, netshim := binary(t, "E2E_DOCKERD"), binary(t, "NETSHIM_BIN")
	ctx := context.Background()
	const pause = "10.131.0.254:5000/k8s/pause:3.10.2"
	for _, n := range nodes {
		eng, err := n.StartEngine(dockerd, harness.OCIWrapperBin(), "--insecure-registry", lan.HostIP().String()+":5000")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := eng.Stop(harness.StopTimeout); err != nil {
				t.Errorf("%s: %v", n.Name, err)
			}
		})
		out, err := n.Docker(ctx, "info", "--format", "{{.ServerVersion}} {{.CgroupDriver}} {{range $k, $v := .Runtimes}}{{$k}},{{end}}")
		if err != nil {
			t.Fatalf("%s: docker info: %v\n%s", n.Name, err, out)
		}
		if f := strings.Fields(out); len(f) != 3 || !strings.HasPrefix(f[0], "29.") || !strings.Contains(f[2], harness.OCIWrapperRuntime+",") {
			t.Errorf("%s: docker info = %q, want Docker 29 with runtime %s", n.Name, out, harness.OCIWrapperRuntime)
		}
		ns, err := n.StartNetshim(netshim, "--pod-infra-container-image="+pause)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := ns.Stop(harness.StopTimeout); err != nil {
				t.Errorf("%s: %v", n.Name, err)
			}
		})
		c := harness.ConnectCRI(t, harness.HostPath(ns.Pid(), harness.NodeNetshimSock))
		v, err := c.Runtime.Version(ctx, &runtimeapi.VersionRequest{})
		if err != nil || !strings.HasPrefix(v.GetRuntimeVersion(), "29.") {
			t.Errorf("%s: CRI Version = %v, %v; want the node's Docker 29", n.Name, v, err)
		}
		st, err := c.Runtime.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
		if err != nil || !strings.Contains(st.GetInfo()["config"], `"sandboxImage":"`+pause+`"`) {
			t.Errorf("%s: CRI Status info config = %q, %v; want sandboxImage %s", n.Name, st.GetInfo()["config"], err, pause)
		}
	}
}

// A run killed with its nodes up (no cleanup ran) is undone by the next
// run's guard on the same state file: the processes in the nodes' netns
// are killed, the namespaces deleted, the mounts and directories gone.
func TestAKilledRunIsUndoneByTheNext(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("the multinode suite needs root")
	}
	state := filepath.Join(t.TempDir(), "killed.state")
	g, err := harness.NewHostGuard(state, harness.WithGuardLog(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "nsnodes")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.RecordTempDir(dir); err != nil {
		t.Fatal(err)
	}
	lan, err := harness.NewLan(g, "nslank", netip.MustParsePrefix("10.131.1.0/24"), "nslank0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := harness.NewNode(g, lan, "nodek", lan.NodeIP(1), filepath.Join(dir, "nodek"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := n.StartDaemon("sleeper", false, "sleep", "600")
	if err != nil {
		t.Fatal(err)
	}
	pid := d.Pid()
	// The next run.
	if _, err := harness.NewHostGuard(state, harness.WithGuardLog(t.Logf)); err != nil {
		t.Fatalf("recovering the killed run: %v", err)
	}
	if !harness.Eventually(harness.StopTimeout, func() bool { return d.Pid() == 0 }) {
		t.Errorf("the node's process %d still runs", pid)
	}
	for _, p := range []string{n.NetNS, "/run/netns/" + lan.Name, dir, "/sys/fs/cgroup/memory/nodek", "/sys/class/net/nslank0"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", p, err)
		}
	}
	if out, _ := harness.RunCmd("findmnt", "-rn", "-o", "TARGET"); strings.Contains(out, dir) {
		t.Errorf("mounts under %s are left:\n%s", dir, out)
	}
}

// The kubeadm files the cluster is built with are valid for the kubeadm of
// the release (kubeadm config validate: every field known, every value
// accepted), init's and join's alike.
func TestKubeadmAcceptsTheClusterConfigs(t *testing.T) {
	kubeadm := binary(t, "KUBEADM_BIN")
	_, lan, nodes := twoNodes(t)
	c := harness.KubeadmCluster{
		Version: os.Getenv("KUBE_VERSION"), ImageRepository: lan.HostIP().String() + ":5000/k8s",
		PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/12", CRISocket: "unix://" + harness.NodeNetshimSock,
	}
	if c.Version == "" {
		t.Fatal("$KUBE_VERSION is not set (make e2e-multinode sets it)")
	}
	files := map[string]string{
		"init": c.InitConfig(nodes[0]),
		"join": c.JoinConfig(nodes[1], nodes[0].IP.String()+":6443", "abcdef.0123456789abcdef", "sha256:"+strings.Repeat("0", 64)),
	}
	for name, cfg := range files {
		path := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := harness.RunCmd(kubeadm, "config", "validate", "--config", path); err != nil {
			t.Errorf("kubeadm config validate (%s): %v\n%s\n%s", name, err, out, cfg)
		}
	}
}
