package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
`, n.IP, n.Name, c.CRISocket, n.PatchDir(), c.Version, c.ImageRepository, n.IP, c.PodSubnet, c.ServiceSubnet)
	b.WriteString(KubeletOnThisMachine)
	return b.String()
}

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
