package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// KubeadmCluster is what the kubeadm configuration of a cluster of Nodes
// says: what an operator writes into the file given to `kubeadm init
// --config` on the first node and `kubeadm join --config` on the others.
type KubeadmCluster struct {
	// Version is the Kubernetes release (kubernetesVersion), like v1.36.3.
	Version string
	// ImageRepository is where kubeadm pulls the control plane's images
	// from (the lan's registry, as in an air-gapped cluster).
	ImageRepository string
	// PodSubnet and ServiceSubnet are the cluster's networks (flannel's
	// default 10.244.0.0/16 for pods).
	PodSubnet, ServiceSubnet string
	// CRISocket is netshim's socket, the same on every node.
	CRISocket string
}

// kubeletPatchFile is the name kubeadm's --patches looks for to patch the
// KubeletConfiguration of one node (target kubeletconfiguration, strategic
// merge).
const kubeletPatchFile = "kubeletconfiguration+strategic.yaml"

// KubeletOnThisMachine is the part of every node's KubeletConfiguration
// that this machine needs and a real node would not, each for its reason:
//   - failCgroupV1: false: the machines here have cgroup v1 only, which
//     kubelet 1.35+ refuses unless told (kubeadm's SystemVerification
//     check then has to be skipped too: ignorePreflightErrors);
//   - the eviction and image GC thresholds of kind: every node reports the
//     whole machine's disk and memory, which other nodes fill too;
//   - cgroupsPerQOS stays, the root is per node (NodePatch).
const KubeletOnThisMachine = `failCgroupV1: false
evictionHard:
  imagefs.available: "0%"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
imageGCHighThresholdPercent: 100
`

// InitConfig is the configuration of `kubeadm init` on node n.
func (c KubeadmCluster) InitConfig(n *Node) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: %s
  bindPort: 6443
nodeRegistration:
  name: %s
  criSocket: %s
  ignorePreflightErrors: [SystemVerification]
  kubeletExtraArgs:
  - name: node-ip
    value: %s
patches:
  directory: %s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %s
imageRepository: %s
controlPlaneEndpoint: %s:6443
networking:
  podSubnet: %s
  serviceSubnet: %s
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
`, n.IP, n.Name, c.CRISocket, n.IP, n.PatchDir(), c.Version, c.ImageRepository, n.IP, c.PodSubnet, c.ServiceSubnet)
	b.WriteString(KubeletOnThisMachine)
	b.WriteString("---\n")
	b.WriteString(KubeProxyOnThisMachine)
	return b.String()
}

// KubeProxyOnThisMachine is the KubeProxyConfiguration of a cluster whose
// nodes are network namespaces of one machine (what kind gives kube-proxy):
// iptables mode, and no conntrack sysctl written, since
// net.netfilter.nf_conntrack_max is read-only outside the machine's first
// netns (maxPerCore: 0 leaves it; the two timeouts 0s leave theirs, which
// are the machine's too).
const KubeProxyOnThisMachine = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`

// JoinConfig is the configuration of `kubeadm join` on node n, to the API
// server at apiServer (host:port) with a bootstrap token and the CA's
// public key hash (`kubeadm token create --print-join-command` gives both).
func (c KubeadmCluster) JoinConfig(n *Node, apiServer, token, caCertHash string) string {
	return fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: %s
    token: %s
    caCertHashes: [%s]
nodeRegistration:
  name: %s
  criSocket: %s
  ignorePreflightErrors: [SystemVerification]
  kubeletExtraArgs:
  - name: node-ip
    value: %s
patches:
  directory: %s
`, apiServer, token, caCertHash, n.Name, c.CRISocket, n.IP, n.PatchDir())
}

// PatchDir is the node's kubeadm patches directory (Dir/patches).
func (n *Node) PatchDir() string { return filepath.Join(n.Dir, "patches") }

// WriteKubeletPatch writes the node's own part of its KubeletConfiguration
// into PatchDir, which kubeadm init and join apply to the cluster's: its
// cgroup root, the one its engine's --cgroup-parent names (StartEngine),
// so that no kubelet takes another node's pods' cgroups for orphans.
func (n *Node) WriteKubeletPatch() error {
	if err := os.MkdirAll(n.PatchDir(), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.PatchDir(), kubeletPatchFile), []byte(n.kubeletPatch()), 0o644)
}

func (n *Node) kubeletPatch() string {
	return "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupRoot: /" + n.Name + "\n"
}

// KubeadmDeadline bounds one kubeadm init or join: the image pulls, the
// control plane's start (kubeadm's own wait is 4 minutes) and the addons.
const KubeadmDeadline = 10 * time.Minute

// KubeadmInit runs `kubeadm init --config` on n, kubeadm being on the
// node's PATH (InstallBinaries), with the node's kubelet patch written
// first. Its output is returned, also on failure.
func (c KubeadmCluster) KubeadmInit(ctx context.Context, n *Node) (string, error) {
	return c.kubeadm(ctx, n, "init", c.InitConfig(n))
}

// KubeadmJoin runs `kubeadm join --config` on n, to the API server at
// apiServer with the token and CA hash of KubeadmJoinToken.
func (c KubeadmCluster) KubeadmJoin(ctx context.Context, n *Node, apiServer, token, caCertHash string) (string, error) {
	return c.kubeadm(ctx, n, "join", c.JoinConfig(n, apiServer, token, caCertHash))
}

func (c KubeadmCluster) kubeadm(ctx context.Context, n *Node, verb, config string) (string, error) {
	if err := n.WriteKubeletPatch(); err != nil {
		return "", err
	}
	path := filepath.Join(n.Dir, "kubeadm-"+verb+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, KubeadmDeadline)
	defer cancel()
	out, err := n.Command(ctx, "kubeadm", verb, "--config", path, "-v=1").CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("node %s: kubeadm %s: %w", n.Name, verb, err)
	}
	return string(out), nil
}

// KubeadmJoinToken makes a bootstrap token on the control-plane node n and
// returns what `kubeadm join` needs: the API server, the token and the CA
// hash (parsed from --print-join-command, the line an operator copies).
func KubeadmJoinToken(ctx context.Context, n *Node) (apiServer, token, caCertHash string, err error) {
	out, err := n.Run(ctx, "kubeadm", "token", "create", "--print-join-command")
	if err != nil {
		return "", "", "", fmt.Errorf("node %s: kubeadm token create: %w: %s", n.Name, err, out)
	}
	return parseJoinCommand(out)
}

// parseJoinCommand reads `kubeadm join HOST:PORT --token T
// --discovery-token-ca-cert-hash H` (the last such line of out).
func parseJoinCommand(out string) (apiServer, token, caCertHash string, err error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "kubeadm" || f[1] != "join" {
			continue
		}
		apiServer, token, caCertHash = f[2], "", ""
		for i := 3; i+1 < len(f); i++ {
			switch f[i] {
			case "--token":
				token = f[i+1]
			case "--discovery-token-ca-cert-hash":
				caCertHash = f[i+1]
			}
		}
	}
	if apiServer == "" || token == "" || caCertHash == "" {
		return "", "", "", fmt.Errorf("no `kubeadm join HOST:PORT --token T --discovery-token-ca-cert-hash H` in %q", out)
	}
	return apiServer, token, caCertHash, nil
}

// Kubectl runs kubectl on the control-plane node n with kubeadm's admin
// kubeconfig (at most CommandDeadline).
func Kubectl(ctx context.Context, n *Node, args ...string) (string, error) {
	return KubectlStdin(ctx, n, nil, args...)
}

// KubectlStdin is Kubectl with stdin (`apply -f -` of a manifest).
func KubectlStdin(ctx context.Context, n *Node, stdin io.Reader, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, CommandDeadline)
	defer cancel()
	cmd := n.Command(ctx, "kubectl", append([]string{"--kubeconfig", "/etc/kubernetes/admin.conf"}, args...)...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	return string(out), err
}
