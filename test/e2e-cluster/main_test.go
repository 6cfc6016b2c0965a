//go:build cluster

package e2ecluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// The world's fixed names. The bridge, the cluster CIDR and /var/log/pods
// are host-wide, which is why `make e2e-cluster` runs under the Docker lock;
// every port is picked free.
const (
	nodeName = "netshim-cluster"
	// nodeIP is the Node's InternalIP, where kube-apiserver reaches the
	// kubelet, which listens there only. It is an address of the loopback
	// device, but not a 127/8 one: kubelet refuses a loopback --node-ip,
	// and kube-apiserver's node proxy (/api/v1/nodes/N/proxy, the stats
	// summary) refuses to proxy to anything but a global unicast address.
	nodeIP       = "10.180.0.1"
	bridge       = "nsclu0"
	clusterCIDR  = "10.177.0.0/16"
	nodeMaskSize = 24
	serviceCIDR  = "10.179.0.0/24"
	busybox      = "netshim.local/busybox:latest"
	// nsPrefix starts every namespace a test makes; the audit waits for
	// all of them to go.
	nsPrefix = "e2e-"
)

// world is everything TestMain starts, torn down in reverse.
type world struct {
	dir       string // every temp file of the run, removed at the end
	artifacts string // logs are copied here at teardown
	guard     *harness.HostGuard
	dockerd   *harness.Dockerd
	netshim   *harness.Netshim
	cp        *harness.ControlPlane
	kubelet   *harness.Kubelet
	cri       *harness.CRI
	ipamDir   string
	auditBin  string
	podLogs   string
	before    hostSnapshot
	// nodeIPAdded: setUp put nodeIP on lo.
	nodeIPAdded bool
}

var w *world

// env reads a variable `make e2e-cluster` sets.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("E2E_CLUSTER_STATE") == "" {
		fmt.Println("e2e-cluster: skipped: E2E_CLUSTER_STATE is not set; run `make e2e-cluster` as root")
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		fmt.Println("e2e-cluster: must run as root")
		os.Exit(1)
	}
	start := time.Now()
	var err error
	w, err = setUp()
	code := 1
	if err != nil {
		fmt.Printf("e2e-cluster: setting up the cluster failed: %v\n", err)
		fmt.Println("FAIL setup: the checks did not run")
	} else {
		fmt.Printf("e2e-cluster: cluster up in %s\n", time.Since(start).Round(time.Second))
		code = m.Run()
	}
	problems := w.tearDown()
	problems = append(problems, w.auditHost()...)
	if len(problems) == 0 {
		fmt.Println("PASS teardown: kubelet, netshim, the control plane and the private dockerd stopped on SIGTERM; " +
			"bridge, iptables rules, netns, mounts, processes, kubepods cgroups, pod logs and temp dirs gone")
	} else {
		fmt.Printf("FAIL teardown: %s\n", strings.Join(problems, "; "))
		code = 1
	}
	os.Exit(code)
}

// setUp starts the world: the private dockerd, netshim (kubenet, no pod
// CIDR: it must come from the Node through UpdateRuntimeConfig), the
// control plane, and the kubelet. A failure returns the world built so far
// for tearDown.
func setUp() (*world, error) {
	w := &world{
		artifacts: env("E2E_CLUSTER_ARTIFACTS", filepath.Join(os.TempDir(), "e2e-cluster-artifacts")),
		auditBin:  env("LEAK_AUDIT", "../e2e/leak-audit.sh"),
		podLogs:   harness.DefaultPodLogsDir,
	}
	// A guard over a state file: a run killed before its teardown is
	// cleaned up by the next one, here.
	g, err := harness.NewHostGuard(os.Getenv("E2E_CLUSTER_STATE"), harness.WithGuardLog(func(f string, a ...any) {
		fmt.Printf("e2e-cluster: "+f+"\n", a...)
	}))
	if err != nil {
		return w, fmt.Errorf("host guard: %w", err)
	}
	w.guard = g
	if err := preflight(); err != nil {
		return w, err
	}
	w.before = snapshotHost()
	if w.dir, err = os.MkdirTemp("", "nsclu"); err != nil {
		return w, err
	}
	if err := g.RecordTempDir(w.dir); err != nil {
		return w, err
	}
	if err := os.MkdirAll(w.artifacts, 0o755); err != nil {
		return w, err
	}
	old, _ := filepath.Glob(filepath.Join(w.artifacts, "*"))
	for _, f := range old {
		os.RemoveAll(f)
	}

	// The engine: kubelet treats every pod its runtime reports as its
	// own, so it must not see the host engine's.
	w.dockerd = harness.NewDockerd(filepath.Join(w.dir, "docker"), harness.WithImages(harness.DefaultPauseImage, busybox))
	if err := os.MkdirAll(w.dockerd.Dir, 0o755); err != nil {
		return w, err
	}
	if err := w.dockerd.Start(); err != nil {
		return w, err
	}
	if pid, err := readPidFile(filepath.Join(w.dockerd.Dir, "docker.pid")); err == nil {
		if err := g.RecordProcess("dockerd", pid, w.dir); err != nil {
			return w, err
		}
	}
	if err := w.dockerd.LoadImages(); err != nil {
		return w, err
	}

	if err := g.WatchLink(bridge); err != nil {
		return w, err
	}
	w.ipamDir = filepath.Join(w.dir, "ipam")
	w.netshim, err = harness.NewNetshim(
		harness.WithDir(filepath.Join(w.dir, "ns")),
		harness.WithKubenet("", bridge, w.ipamDir),
		harness.WithDockerEndpoint(w.dockerd.Endpoint()),
		harness.WithOwnProcessGroup(),
		harness.WithVerbosity(4),
	)
	if err != nil {
		return w, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.netshim.Start(ctx); err != nil {
		return w, fmt.Errorf("%w\n%s", err, w.netshim.LogTail(30))
	}
	if err := g.RecordProcess("netshim", w.netshim.Pid(), w.dir); err != nil {
		return w, err
	}
	if w.cri, err = harness.DialCRI(w.netshim.Sock); err != nil {
		return w, err
	}

	w.cp, err = harness.NewControlPlane(
		harness.WithControlPlaneDir(filepath.Join(w.dir, "cp")),
		harness.WithServiceCIDR(serviceCIDR),
		harness.WithClusterCIDR(clusterCIDR, nodeMaskSize),
	)
	if err != nil {
		return w, err
	}
	if err := os.MkdirAll(w.cp.Dir, 0o755); err != nil {
		return w, err
	}
	cpCtx, cpCancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cpCancel()
	err = w.cp.Start(cpCtx)
	for name, pid := range w.cp.Pids() {
		if rerr := g.RecordProcess(name, pid, w.dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if err != nil {
		return w, err
	}

	if out, err := harness.RunCmd("ip", "addr", "add", nodeIP+"/32", "dev", "lo"); err != nil {
		return w, fmt.Errorf("adding the node address %s to lo: %w: %s", nodeIP, err, out)
	}
	w.nodeIPAdded = true
	kubeconfig, err := w.cp.NodeKubeconfig(nodeName)
	if err != nil {
		return w, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return w, err
	}
	caFile := w.cp.CAFile
	w.kubelet, err = harness.NewKubelet(
		harness.WithKubeletBinary(os.Getenv("KUBELET_BIN")),
		harness.WithRuntimeEndpoint(w.netshim.Sock),
		harness.WithKubeconfig(kubeconfig),
		harness.WithNodeName(nodeName),
		harness.WithNodeIP(nodeIP),
		harness.WithKubeletPorts(ports[0], ports[1]),
		harness.WithKubeletDir(filepath.Join(w.dir, "kubelet")),
		harness.WithKubeletLog(filepath.Join(w.dir, "kubelet.log")),
		harness.WithHostGuard(g),
		harness.WithPodLogsDir(w.podLogs),
		// On Linux kubelet takes a pod's network stats from cAdvisor,
		// which knows pods only through its containerd and CRI-O
		// handlers: with any other runtime the summary has none (its
		// Linux listContainerNetworkStats returns nothing). With this
		// gate every pod and container figure comes from the runtime,
		// which is how a netshim node gets them.
		harness.WithFeatureGates(map[string]bool{"PodAndContainerStatsFromCRI": true}),
		harness.WithKubeletConfig(func(cfg map[string]any) {
			// kube-apiserver authenticates with a client certificate
			// of the cluster's CA; what it may do, kubelet asks it
			// back (SubjectAccessReview), as on a real node.
			cfg["authentication"] = map[string]any{
				"anonymous": map[string]any{"enabled": false},
				"webhook":   map[string]any{"enabled": true},
				"x509":      map[string]any{"clientCAFile": caFile},
			}
			cfg["authorization"] = map[string]any{"mode": "Webhook"}
			cfg["clusterDomain"] = "cluster.local"
			cfg["address"] = nodeIP
		}),
	)
	if err != nil {
		return w, err
	}
	kctx, kcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer kcancel()
	if err := w.kubelet.Start(kctx); err != nil {
		return w, err
	}
	return w, nil
}

// preflight removes what a run that was not cleaned up left (bridge,
// masquerade chain, node address) and refuses to start where the run would
// break something or be broken: a route over the cluster CIDR or the node
// address.
func preflight() error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridge)); err == nil {
		fmt.Printf("e2e-cluster: removing bridge %s left by an earlier run\n", bridge)
		if out, err := harness.RunCmd("ip", "link", "del", bridge); err != nil {
			return fmt.Errorf("deleting bridge %s: %w: %s", bridge, err, out)
		}
	}
	if err := removeMasq(); err != nil {
		return err
	}
	if err := removeNodeIP(); err != nil {
		return err
	}
	for _, cidr := range []string{clusterCIDR, nodeIP + "/32"} {
		overlap, err := harness.RoutesOverlapping(cidr)
		if err != nil {
			return err
		}
		if len(overlap) > 0 {
			return fmt.Errorf("%s, which the run needs, overlaps a route here: %s", cidr, overlap[0])
		}
	}
	return nil
}

func readPidFile(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// tearDown stops everything in reverse order and restores the host. It
// returns what went wrong.
func (w *world) tearDown() []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if w == nil {
		return []string{"no world"}
	}
	if w.kubelet != nil {
		if err := w.kubelet.Stop(); err != nil {
			add("kubelet: %v", err)
		}
	}
	if w.netshim != nil && w.netshim.Running() {
		if n, err := removeAllPods(w.netshim); err != nil {
			add("removing the pods kubelet left: %v", err)
		} else if n > 0 {
			add("kubelet left %d pod sandbox(es) behind (removed through netshim)", n)
		}
	}
	if w.cri != nil {
		w.cri.Conn.Close()
	}
	if w.netshim != nil {
		if err := w.netshim.Stop(syscall.SIGTERM); err != nil {
			add("netshim: %v", err)
		}
	}
	if w.nodeIPAdded {
		if err := removeNodeIP(); err != nil {
			add("%v", err)
		}
	}
	// netshim leaves its masquerade rules on exit, on purpose (pods keep
	// their egress across a restart); a node leaving kubenet removes them.
	if err := removeMasq(); err != nil {
		add("%v", err)
	}
	if w.cp != nil {
		if err := w.cp.Stop(); err != nil {
			add("control plane: %v", err)
		}
	}
	w.saveArtifacts()
	if w.dockerd != nil {
		if err := w.dockerd.Remove(); err != nil {
			add("private dockerd: %v", err)
		}
	}
	if w.guard != nil {
		if err := w.guard.Restore(); err != nil {
			add("restoring the host: %v", err)
		}
	}
	return problems
}

// removeAllPods stops and removes every sandbox netshim reports.
func removeAllPods(n *harness.Netshim) (int, error) {
	cri := n.CRI()
	if cri == nil {
		return 0, errors.New("netshim has no CRI client")
	}
	ctx, cancel := context.WithTimeout(context.Background(), harness.RPCTimeout)
	defer cancel()
	resp, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, p := range resp.Items {
		if _, err := cri.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, err)
		}
		if _, err := cri.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, err)
		}
	}
	return len(resp.Items), errors.Join(errs...)
}

// saveArtifacts copies the logs out of the temp dir before it goes.
func (w *world) saveArtifacts() {
	if w.dir == "" {
		return
	}
	copies := map[string]string{
		filepath.Join(w.dir, "ns", "netshim.log"):     "netshim.log",
		filepath.Join(w.dir, "kubelet.log"):           "kubelet.log",
		filepath.Join(w.dir, "docker", "dockerd.log"): "dockerd.log",
	}
	for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		copies[filepath.Join(w.dir, "cp", c+".log")] = c + ".log"
	}
	for src, dst := range copies {
		if err := copyFile(src, filepath.Join(w.artifacts, dst)); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Printf("e2e-cluster: saving %s: %v\n", src, err)
		}
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// freePorts asks the kernel for n different free ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// masqChain is netshim kubenet's masquerade chain for the bridge.
const masqChain = "NETSHIM-MASQ-" + bridge

// removeMasq deletes the jumps from POSTROUTING to masqChain (by rule
// number, highest first, so the numbers stay right) and the chain, in both
// families, as README tells an operator to.
func removeMasq() error {
	var errs []error
	for _, bin := range []string{"iptables", "ip6tables"} {
		out, err := harness.RunCmd(bin, "-w", "-t", "nat", "-L", "POSTROUTING", "-n", "--line-numbers")
		if err != nil {
			errs = append(errs, fmt.Errorf("%s -L POSTROUTING: %w: %s", bin, err, out))
			continue
		}
		var nums []string
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[1] == masqChain {
				nums = append(nums, f[0])
			}
		}
		for i := len(nums) - 1; i >= 0; i-- {
			if out, err := harness.RunCmd(bin, "-w", "-t", "nat", "-D", "POSTROUTING", nums[i]); err != nil {
				errs = append(errs, fmt.Errorf("%s -D POSTROUTING %s: %w: %s", bin, nums[i], err, out))
			}
		}
		if _, err := harness.RunCmd(bin, "-w", "-t", "nat", "-S", masqChain); err != nil {
			continue // no such chain
		}
		for _, op := range []string{"-F", "-X"} {
			if out, err := harness.RunCmd(bin, "-w", "-t", "nat", op, masqChain); err != nil {
				errs = append(errs, fmt.Errorf("%s %s %s: %w: %s", bin, op, masqChain, err, out))
			}
		}
	}
	return errors.Join(errs...)
}

// hasNodeIP says whether nodeIP is an address of lo.
func hasNodeIP() (bool, error) {
	out, err := harness.RunCmd("ip", "-4", "-o", "addr", "show", "dev", "lo")
	if err != nil {
		return false, fmt.Errorf("ip addr show dev lo: %w: %s", err, out)
	}
	return strings.Contains(out, " "+nodeIP+"/"), nil
}

// removeNodeIP takes nodeIP off lo if it is there.
func removeNodeIP() error {
	has, err := hasNodeIP()
	if err != nil || !has {
		return err
	}
	if out, err := harness.RunCmd("ip", "addr", "del", nodeIP+"/32", "dev", "lo"); err != nil {
		return fmt.Errorf("removing the node address %s from lo: %w: %s", nodeIP, err, out)
	}
	return nil
}
