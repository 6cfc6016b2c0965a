//go:build multinode

package multinode

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/netshim/netshim/test/harness"
)

//go:embed testdata/flannel.yaml
var flannelManifest string

const (
	podSubnet     = "10.244.0.0/16"
	serviceSubnet = "10.96.0.0/12"
	// registryPort is where the lan's registry listens on the host's
	// address.
	registryPort = 5000
	// clusterUp bounds each wait for the cluster to reach a state (nodes
	// Ready, a DaemonSet rolled out): image pulls and starts on a loaded
	// 2-core machine.
	clusterUp = 5 * time.Minute
)

// cluster is a kubeadm-built cluster of the suite's nodes.
type cluster struct {
	nodes   []*harness.Node
	kubelet map[string]*harness.NodeDaemon
	netshim map[string]*harness.NodeDaemon
	kc      harness.KubeadmCluster
	// registry is the lan's registry as the nodes name it; pushVia is
	// where the host's engine pushes to it.
	registry, pushVia string
	repo              string // the control plane's imageRepository
	agnhost           string // the workloads' image, in the lan's registry
}

// agnhostLocal is the host engine's agnhost (hack/node-e2e-images.sh).
const (
	agnhostTag   = "2.63.0"
	agnhostLocal = "registry.k8s.io/e2e-test-images/agnhost:" + agnhostTag
)

// kubectl runs kubectl on the control-plane node; a failure fails the test.
func (c *cluster) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := harness.Kubectl(context.Background(), c.nodes[0], args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// apply is kubectl apply -f - of manifest.
func (c *cluster) apply(t *testing.T, manifest string) {
	t.Helper()
	if out, err := harness.KubectlStdin(context.Background(), c.nodes[0], strings.NewReader(manifest), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// dumpOnFailure logs what a failed run needs to be understood: every
// node's kubelet and netshim log tails and the cluster's pods.
func (c *cluster) dumpOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if out, err := harness.Kubectl(context.Background(), c.nodes[0], "get", "pods", "-A", "-o", "wide"); err == nil {
			t.Logf("pods:\n%s", out)
		}
		if out, err := harness.Kubectl(context.Background(), c.nodes[0], "get", "events", "-A", "--sort-by=.lastTimestamp"); err == nil {
			t.Logf("events:\n%s", tailLines(out, 40))
		}
		// The last words of every container that restarted.
		out, err := harness.Kubectl(context.Background(), c.nodes[0], "get", "pods", "-A", "-o",
			`jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name}{range .status.containerStatuses[?(@.restartCount>0)]} {.name}{end}{"\n"}{end}`)
		if err == nil {
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(l)
				for _, ctr := range f[min(2, len(f)):] {
					logs, _ := harness.Kubectl(context.Background(), c.nodes[0], "logs", "-n", f[0], f[1], "-c", ctr, "--previous", "--tail=15")
					t.Logf("%s/%s %s, previous run:\n%s", f[0], f[1], ctr, logs)
				}
			}
		}
		for _, n := range c.nodes {
			if d := c.kubelet[n.Name]; d != nil {
				t.Logf("%s kubelet log:\n%s", n.Name, d.LogTail(40))
			}
			if d := c.netshim[n.Name]; d != nil {
				t.Logf("%s netshim log:\n%s", n.Name, d.LogTail(40))
			}
		}
	})
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startCluster builds the cluster as an operator would on two fresh
// machines: the images in a registry of the lan; on each node its engine,
// netshim and the kubelet service; kubeadm init on the first, flannel,
// kubeadm join on the second.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	bins := map[string]string{
		"kubeadm": binary(t, "KUBEADM_BIN"),
		"kubelet": binary(t, "KUBELET_BIN"),
		"kubectl": binary(t, "KUBECTL_BIN"),
	}
	dockerd, netshim := binary(t, "E2E_DOCKERD"), binary(t, "NETSHIM_BIN")
	images := binary(t, "CLUSTER_IMAGES")
	version := os.Getenv("KUBE_VERSION")
	if version == "" {
		t.Fatal("$KUBE_VERSION is not set (make e2e-multinode sets it)")
	}
	_, lan, nodes := twoNodes(t)
	c := &cluster{nodes: nodes, kubelet: map[string]*harness.NodeDaemon{}, netshim: map[string]*harness.NodeDaemon{}}
	c.dumpOnFailure(t)

	// The registry on the lan; the host's engine pushes to it through a
	// loopback forwarder (Docker pushes without TLS to 127.0.0.0/8 only),
	// under the same path the nodes pull from.
	reg := harness.StartRegistry(t, harness.WithRegistryOnLan(lan, registryPort))
	fwd, err := harness.ForwardTCP(reg.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fwd.Close() })
	c.registry, c.pushVia = reg.Addr(), fwd.Addr()
	c.repo = reg.Addr() + "/k8s"
	push := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	push(images, "push", fwd.Addr()+"/k8s")
	// The workloads' image (make node-e2e-images builds it).
	via := fwd.Addr() + "/k8s/agnhost:" + agnhostTag
	push("docker", "tag", agnhostLocal, via)
	push("docker", "push", via)
	push("docker", "image", "rm", via)
	c.agnhost = c.repo + "/agnhost:" + agnhostTag

	pause := c.repo + "/pause:" + pauseTag(t, images)
	for _, n := range nodes {
		if err := n.InstallBinaries(bins); err != nil {
			t.Fatal(err)
		}
		eng, err := n.StartEngine(dockerd, harness.OCIWrapperBin(), "--insecure-registry", reg.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopDaemon(t, n, eng) })
		ns, err := n.StartNetshim(netshim, "--pod-infra-container-image="+pause)
		if err != nil {
			t.Fatal(err)
		}
		c.netshim[n.Name] = ns
		t.Cleanup(func() { stopDaemon(t, n, ns) })
		kl, err := n.StartKubeadmKubelet("")
		if err != nil {
			t.Fatal(err)
		}
		c.kubelet[n.Name] = kl
		// The kubelet of the node at the end (resetNode stops it, rejoin
		// starts another).
		t.Cleanup(func() {
			if kl := c.kubelet[n.Name]; kl != nil {
				stopDaemon(t, n, kl)
			}
		})
	}

	c.kc = harness.KubeadmCluster{
		Version: version, ImageRepository: c.repo,
		PodSubnet: podSubnet, ServiceSubnet: serviceSubnet, CRISocket: "unix://" + harness.NodeNetshimSock,
	}
	kc := c.kc
	ctx := context.Background()
	out, err := kc.KubeadmInit(ctx, nodes[0])
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("kubeadm init on %s:\n%s", nodes[0].Name, tailLines(out, 25))
	checkKubeadmWarnings(t, "init", out)
	c.apply(t, strings.NewReplacer("@FLANNEL_IMAGE@", c.repo+"/flannel:"+flannelTag(t, images), "@POD_SUBNET@", podSubnet).Replace(flannelManifest))

	api, token, hash, err := harness.KubeadmJoinToken(ctx, nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[1:] {
		out, err := kc.KubeadmJoin(ctx, n, api, token, hash)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Logf("kubeadm join on %s:\n%s", n.Name, tailLines(out, 10))
		checkKubeadmWarnings(t, "join", out)
	}
	return c
}

// checkKubeadmWarnings logs kubeadm's warnings and fails on those about
// the runtime: its sandbox image check (the pause image netshim uses, read
// from `crictl info`) and its CRI checks.
func checkKubeadmWarnings(t *testing.T, verb, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, "WARNING") {
			continue
		}
		t.Logf("kubeadm %s: %s", verb, l)
		lower := strings.ToLower(l)
		for _, about := range []string{"sandbox image", "container runtime", "cri socket", "cri endpoint", "crisocket", "crictl"} {
			if strings.Contains(lower, about) {
				t.Errorf("kubeadm %s warns about the runtime: %s", verb, l)
				break
			}
		}
	}
}

func stopDaemon(t *testing.T, n *harness.Node, d *harness.NodeDaemon) {
	if err := d.Stop(harness.StopTimeout); err != nil {
		t.Errorf("%s: %v", n.Name, err)
	}
}

// imageTag is the tag hack/cluster-images.sh pushes for the image whose
// name ends in /name.
func imageTag(t *testing.T, script, name string) string {
	t.Helper()
	out, err := harness.RunCmd(script, "list", "example.invalid")
	if err != nil {
		t.Fatalf("%s list: %v\n%s", script, err, out)
	}
	for _, l := range strings.Fields(out) {
		if rest, ok := strings.CutPrefix(l, "example.invalid/"+name+":"); ok {
			return rest
		}
	}
	t.Fatalf("%s list names no %s image:\n%s", script, name, out)
	return ""
}

func pauseTag(t *testing.T, script string) string   { return imageTag(t, script, "pause") }
func flannelTag(t *testing.T, script string) string { return imageTag(t, script, "flannel") }

// waitFor polls cond every few seconds for up to d; false with the last
// state cond described when it never held.
func waitFor(d time.Duration, cond func() (bool, string)) (bool, string) {
	var last string
	ok := harness.Eventually(d, func() bool {
		var done bool
		done, last = cond()
		return done
	})
	return ok, last
}

// nodeList is what the checks read of `kubectl get nodes -o json`.
type nodeList struct {
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			PodCIDR string `json:"podCIDR"`
		} `json:"spec"`
		Status struct {
			Conditions []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
			NodeInfo struct {
				ContainerRuntimeVersion string `json:"containerRuntimeVersion"`
				KubeletVersion          string `json:"kubeletVersion"`
			} `json:"nodeInfo"`
		} `json:"status"`
	} `json:"items"`
}

// waitNodesReady waits until every node is Ready, and returns `kubectl
// get nodes -o wide`.
func (c *cluster) waitNodesReady(t *testing.T) string {
	t.Helper()
	ok, last := waitFor(clusterUp, func() (bool, string) {
		out, err := harness.Kubectl(context.Background(), c.nodes[0], "get", "nodes", "-o", "json")
		if err != nil {
			return false, out
		}
		var nl nodeList
		if err := json.Unmarshal([]byte(out), &nl); err != nil {
			return false, err.Error()
		}
		ready := 0
		var desc []string
		for _, n := range nl.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == "Ready" && cond.Status == "True" {
					ready++
				}
			}
			desc = append(desc, fmt.Sprintf("%s %v %s", n.Metadata.Name, n.Status.Conditions, n.Status.NodeInfo.ContainerRuntimeVersion))
		}
		return ready == len(c.nodes), strings.Join(desc, "\n")
	})
	if !ok {
		t.Fatalf("the nodes are not all Ready after %s:\n%s", clusterUp, last)
	}
	return c.kubectl(t, "get", "nodes", "-o", "wide")
}

// waitPodsReady waits until every pod of the cluster (kubectl get pods -A)
// is Running and ready, and returns the list.
func (c *cluster) waitPodsReady(t *testing.T) string {
	t.Helper()
	ok, last := waitFor(clusterUp, func() (bool, string) {
		out, err := harness.Kubectl(context.Background(), c.nodes[0], "get", "pods", "-A", "-o", "wide", "--no-headers")
		if err != nil {
			return false, out
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) < 4 || f[3] != "Running" {
				return false, out
			}
			if have, want, ok := strings.Cut(f[2], "/"); !ok || have != want {
				return false, out
			}
		}
		return true, out
	})
	if !ok {
		t.Fatalf("not every pod is Running and ready after %s:\n%s", clusterUp, last)
	}
	return last
}

// A cluster built with kubeadm init and join on netshim nodes: both nodes
// Ready on Docker 29 through netshim, the control plane's static pods and
// the addons (kube-proxy, CoreDNS, flannel) Running on netshim; the
// network checks; a node drained, reset and joined again; at the end every
// node reset, with nothing a pod held left on it.
func TestKubeadmCluster(t *testing.T) {
	c := startCluster(t)
	nodes := c.waitNodesReady(t)
	t.Logf("kubectl get nodes -o wide:\n%s", nodes)
	for _, want := range []string{"docker://29.", "+netshim.", c.kc.Version} {
		if strings.Count(nodes, want) != len(c.nodes) {
			t.Errorf("kubectl get nodes -o wide shows %q %d times, want once per node", want, strings.Count(nodes, want))
		}
	}
	pods := c.waitPodsReady(t)
	t.Logf("kubectl get pods -A -o wide:\n%s", pods)
	for _, p := range []string{"etcd-", "kube-apiserver-", "kube-controller-manager-", "kube-scheduler-"} {
		if !strings.Contains(pods, p+c.nodes[0].Name) {
			t.Errorf("no %s%s static pod", p, c.nodes[0].Name)
		}
	}
	c.checkNetwork(t, c.agnhost)
	if t.Failed() {
		return
	}

	// make e2e-multinode runs the quick conformance subset here, on this
	// cluster, rather than on a second one of its own (make
	// conformance-cluster-quick): one bring-up less in make test.
	if subset := os.Getenv("E2E_MULTINODE_CONFORMANCE"); subset != "" {
		t.Run("conformance-"+subset, func(t *testing.T) {
			runConformance(t, c, subset)
			// As kubeadm left it: what follows drains the worker.
			c.kubectl(t, "taint", "nodes", c.nodes[0].Name, "node-role.kubernetes.io/control-plane:NoSchedule")
			c.waitSuiteNamespacesGone(t)
		})
	} else {
		t.Log("E2E_MULTINODE_CONFORMANCE is empty: no conformance subset on this cluster")
	}

	t.Run("drain-and-rejoin", func(t *testing.T) {
		n := c.nodes[1]
		c.kubectl(t, "drain", n.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m")
		for _, p := range c.podsOf(t, "netexec") {
			if p.node == n.Name {
				t.Errorf("netexec pod %s still runs on the drained %s", p.name, n.Name)
			}
		}
		c.resetNode(t, n)
		c.rejoin(t, n)
		c.waitNodesReady(t)
		c.waitPodsReady(t)
		var client pod
		for _, cl := range c.podsOf(t, "client") {
			if cl.node == c.nodes[0].Name {
				client = cl
			}
		}
		for _, p := range c.podsOf(t, "netexec") {
			if p.node != n.Name {
				continue
			}
			// flannel on the other node learns the node's new subnet
			// from its Node object, within seconds.
			var got string
			var err error
			if !harness.Eventually(time.Minute, func() bool {
				got, err = c.exec(client.name, "curl -sS --max-time 5 http://"+p.ip+":8080/hostname")
				return err == nil && got == p.name
			}) {
				t.Errorf("from %s to %s (%s) on the rejoined %s: %q, %v", client.name, p.name, p.ip, n.Name, got, err)
			}
			return
		}
		t.Errorf("no netexec pod on the rejoined %s", n.Name)
	})

	t.Run("teardown", func(t *testing.T) {
		for i := len(c.nodes) - 1; i >= 0; i-- {
			c.resetNode(t, c.nodes[i])
		}
	})
}

// clusterNamespaces are the namespaces of the cluster and of this test's
// workloads: any other is the conformance suite's.
var clusterNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true,
	"kube-node-lease": true, "kube-flannel": true}

// waitSuiteNamespacesGone waits until the conformance suite's namespaces,
// which it deletes as it ends, are gone with their pods: the drain that
// follows would otherwise meet their bare pods on the worker and refuse.
func (c *cluster) waitSuiteNamespacesGone(t *testing.T) {
	t.Helper()
	ok, last := waitFor(5*time.Minute, func() (bool, string) {
		out, err := harness.Kubectl(context.Background(), c.nodes[0], "get", "namespaces", "-o", "jsonpath={.items[*].metadata.name}")
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		var left []string
		for _, ns := range strings.Fields(out) {
			if !clusterNamespaces[ns] {
				left = append(left, ns)
			}
		}
		return len(left) == 0, strings.Join(left, " ")
	})
	if !ok {
		t.Fatalf("the conformance suite's namespaces are still there after 5 min: %s", last)
	}
}

//go:embed testdata/netexec.yaml
var netexecManifest string

const (
	netexecHostPort = 18080
	netexecNodePort = 30080
)

// pod is what the checks know of a pod.
type pod struct{ name, node, ip string }

// podsOf lists the Running pods labelled app=app (name, node, IP).
func (c *cluster) podsOf(t *testing.T, app string) []pod {
	t.Helper()
	out := c.kubectl(t, "get", "pods", "-l", "app="+app, "--field-selector=status.phase=Running",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.podIP}{"\n"}{end}`)
	var pods []pod
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			pods = append(pods, pod{f[0], f[1], f[2]})
		}
	}
	return pods
}

// exec runs a shell command in a pod (kubectl exec, through netshim's
// streaming server) and returns its trimmed output.
func (c *cluster) exec(podName, script string) (string, error) {
	out, err := harness.Kubectl(context.Background(), c.nodes[0], "exec", podName, "--", "sh", "-c", script)
	return strings.TrimSpace(out), err
}

// seenAll polls probe, which answers a backend's name, until every name of
// want was answered (Services spread over their endpoints at random).
func seenAll(want []string, probe func() (string, error)) (bool, string) {
	seen := map[string]bool{}
	var last string
	ok := harness.Eventually(2*time.Minute, func() bool {
		got, err := probe()
		if err != nil {
			last = fmt.Sprintf("%v: %s", err, got)
			return false
		}
		seen[got] = true
		for _, w := range want {
			if !seen[w] {
				return false
			}
		}
		return true
	})
	return ok, fmt.Sprintf("seen %v, last error %s", seen, last)
}

// The pod network, Services and DNS across the two nodes, as a workload
// uses them: pod to pod (TCP and UDP) to the other node, a ClusterIP and a
// NodePort Service with an endpoint on each node, a hostPort, DNS A, SRV
// and PTR records from CoreDNS, and the API server's proxy to a pod.
func (c *cluster) checkNetwork(t *testing.T, agnhost string) {
	c.apply(t, strings.NewReplacer(
		"@NODES@", fmt.Sprint(len(c.nodes)), "@AGNHOST@", agnhost,
		"@HOST_PORT@", fmt.Sprint(netexecHostPort), "@NODE_PORT@", fmt.Sprint(netexecNodePort),
	).Replace(netexecManifest))
	ok, last := waitFor(clusterUp, func() (bool, string) {
		out, err := harness.Kubectl(context.Background(), c.nodes[0], "get", "pods", "-l", "app in (netexec,client)", "-o", "wide", "--no-headers")
		if err != nil {
			return false, out
		}
		ready := 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[1] == "1/1" && f[2] == "Running" {
				ready++
			}
		}
		return ready == 2*len(c.nodes), out
	})
	if !ok {
		t.Fatalf("the workload is not ready after %s:\n%s", clusterUp, last)
	}
	servers, clients := c.podsOf(t, "netexec"), c.podsOf(t, "client")
	var names []string
	serverOn := map[string]pod{}
	for _, s := range servers {
		names = append(names, s.name)
		serverOn[s.node] = s
	}
	if len(serverOn) != len(c.nodes) {
		t.Fatalf("netexec pods %v: want one on each node", servers)
	}
	var client pod // on the first node; the other node's server is remote
	for _, cl := range clients {
		if cl.node == c.nodes[0].Name {
			client = cl
		}
	}
	remote := serverOn[c.nodes[1].Name]
	if client.name == "" || remote.name == "" {
		t.Fatalf("no client on %s or no server on %s: %v %v", c.nodes[0].Name, c.nodes[1].Name, clients, servers)
	}

	t.Run("pod-to-pod-tcp", func(t *testing.T) {
		if got, err := c.exec(client.name, "curl -sS --max-time 5 http://"+remote.ip+":8080/hostname"); err != nil || got != remote.name {
			t.Errorf("from %s on %s to %s on %s over TCP: %q, %v", client.name, client.node, remote.ip, remote.node, got, err)
		}
	})
	t.Run("pod-to-pod-udp", func(t *testing.T) {
		if got, err := c.exec(client.name, "echo hostname | nc -w 2 -u "+remote.ip+" 8081"); err != nil || got != remote.name {
			t.Errorf("from %s on %s to %s on %s over UDP: %q, %v", client.name, client.node, remote.ip, remote.node, got, err)
		}
	})
	t.Run("clusterip", func(t *testing.T) {
		if ok, last := seenAll(names, func() (string, error) {
			return c.exec(client.name, "curl -sS --max-time 5 http://netexec.default.svc.cluster.local/hostname")
		}); !ok {
			t.Errorf("the ClusterIP Service did not reach every endpoint (%v): %s", names, last)
		}
		if ok, last := seenAll(names, func() (string, error) {
			return c.exec(client.name, "echo hostname | nc -w 2 -u netexec 81")
		}); !ok {
			t.Errorf("the ClusterIP Service's UDP port did not reach every endpoint (%v): %s", names, last)
		}
	})
	t.Run("nodeport", func(t *testing.T) {
		for _, n := range c.nodes {
			url := fmt.Sprintf("http://%s:%d/hostname", n.IP, netexecNodePort)
			if ok, last := seenAll(names, func() (string, error) { return httpGet(url) }); !ok {
				t.Errorf("NodePort %s did not reach every endpoint (%v): %s", url, names, last)
			}
		}
	})
	t.Run("hostport", func(t *testing.T) {
		for _, n := range c.nodes {
			url := fmt.Sprintf("http://%s:%d/hostname", n.IP, netexecHostPort)
			if got, err := httpGet(url); err != nil || got != serverOn[n.Name].name {
				t.Errorf("hostPort %s: %q, %v; want %s", url, got, err, serverOn[n.Name].name)
			}
		}
	})
	t.Run("dns", func(t *testing.T) {
		svcIP := strings.TrimSpace(c.kubectl(t, "get", "service", "netexec", "-o", "jsonpath={.spec.clusterIP}"))
		for _, q := range []struct{ script, want string }{
			{"nslookup netexec.default.svc.cluster.local", svcIP},
			{"nslookup -type=srv _http._tcp.netexec.default.svc.cluster.local", "netexec.default.svc.cluster.local"},
			{"nslookup " + svcIP, "netexec.default.svc.cluster.local"},
			{"nslookup kubernetes.default.svc.cluster.local", "10.96.0.1"},
		} {
			var got string
			var err error
			if !harness.Eventually(time.Minute, func() bool {
				got, err = c.exec(client.name, q.script)
				return err == nil && strings.Contains(got, q.want)
			}) {
				t.Errorf("%s in %s: %v\n%s\nwant %q in it", q.script, client.name, err, got, q.want)
			}
		}
	})
	t.Run("apiserver-proxy", func(t *testing.T) {
		got, err := harness.Kubectl(context.Background(), c.nodes[0], "get", "--raw", "/api/v1/namespaces/default/pods/"+remote.name+":8080/proxy/hostname")
		if err != nil || strings.TrimSpace(got) != remote.name {
			t.Errorf("the API server's proxy to %s on %s: %q, %v", remote.name, remote.node, got, err)
		}
	})
}

// httpGet GETs url from the host (over the lan) and returns the body. A
// new connection each time: a Service picks an endpoint per connection.
func httpGet(url string) (string, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(b)), err
}

// resetNode takes node n out of the cluster as an operator does: its
// kubelet service stopped (kubeadm reset asks the init system to, and
// these nodes have none), then `kubeadm reset -f`, which removes every pod
// through netshim; then nothing a pod held may be left on the node.
func (c *cluster) resetNode(t *testing.T, n *harness.Node) {
	t.Helper()
	if kl := c.kubelet[n.Name]; kl != nil {
		if err := kl.Stop(harness.StopTimeout); err != nil {
			t.Errorf("%s: %v", n.Name, err)
		}
		c.kubelet[n.Name] = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), harness.KubeadmDeadline)
	defer cancel()
	out, err := n.Command(ctx, "kubeadm", "reset", "-f", "--cri-socket", "unix://"+harness.NodeNetshimSock).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: kubeadm reset: %v\n%s", n.Name, err, out)
	}
	c.audit(t, n)
	// What kubeadm reset leaves to the operator, as it says, and what the
	// network's own state adds: the CNI configuration (a node joining
	// again gets another podCIDR, and a stale conflist would hand out the
	// old one's IPs until flannel rewrites it), flannel's subnet file, the
	// bridge and the VXLAN device.
	if out, err := n.Run(context.Background(), "sh", "-c",
		"rm -rf /etc/cni/net.d/* /run/flannel && for l in cni0 flannel.1; do ! ip link show $l >/dev/null 2>&1 || ip link delete $l; done"); err != nil {
		t.Errorf("%s: cleaning up after kubeadm reset: %v\n%s", n.Name, err, out)
	}
}

// audit runs the leak audit in node n: no pod container, checkpoint,
// pinned namespace, IP, veth on cni0, hostport rule or CNI cache entry
// left by netshim.
func (c *cluster) audit(t *testing.T, n *harness.Node) {
	t.Helper()
	script := os.Getenv("LEAK_AUDIT")
	if script == "" {
		t.Fatal("$LEAK_AUDIT is not set (make e2e-multinode sets it)")
	}
	ok, last := waitFor(time.Minute, func() (bool, string) {
		out, err := n.Run(context.Background(), "bash", script, "--bridge", "cni0")
		return err == nil, out
	})
	if !ok {
		t.Errorf("%s: leaks after its pods were removed:\n%s", n.Name, last)
	}
}

// rejoin brings node n back after resetNode: its node object deleted, its
// kubelet service started again, kubeadm join with a new token.
func (c *cluster) rejoin(t *testing.T, n *harness.Node) {
	t.Helper()
	c.kubectl(t, "delete", "node", n.Name)
	kl, err := n.StartKubeadmKubelet("")
	if err != nil {
		t.Fatal(err)
	}
	c.kubelet[n.Name] = kl
	api, token, hash, err := harness.KubeadmJoinToken(context.Background(), c.nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.kc.KubeadmJoin(context.Background(), n, api, token, hash); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
