package harness

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testCluster() (KubeadmCluster, *Node) {
	l := &Lan{Name: "nslan", Prefix: netip.MustParsePrefix("10.131.0.0/24")}
	n := &Node{Name: "node1", IP: l.NodeIP(1), Dir: "/tmp/nsnode.x/node1", lan: l}
	return KubeadmCluster{
		Version: "v1.36.3", ImageRepository: "10.131.0.254:5000/k8s",
		PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/12",
		CRISocket: "unix:///run/netshim/netshim.sock",
	}, n
}

// What an operator's kubeadm files say, with this machine's additions
// named: netshim's socket, the node's own address, the local registry, the
// per-node patches.
func TestKubeadmConfigs(t *testing.T) {
	c, n := testCluster()
	init := c.InitConfig(n)
	for _, want := range []string{
		"kind: InitConfiguration", "advertiseAddress: 10.131.0.11", "criSocket: unix:///run/netshim/netshim.sock",
		"name: node1", "directory: /tmp/nsnode.x/node1/patches", "kubernetesVersion: v1.36.3",
		"imageRepository: 10.131.0.254:5000/k8s", "podSubnet: 10.244.0.0/16", "kind: KubeletConfiguration",
		"failCgroupV1: false", "ignorePreflightErrors: [SystemVerification]", "name: node-ip\n    value: 10.131.0.11",
		"kind: KubeProxyConfiguration", "mode: iptables", "maxPerCore: 0",
	} {
		if !strings.Contains(init, want) {
			t.Errorf("init config lacks %q:\n%s", want, init)
		}
	}
	join := c.JoinConfig(n, "10.131.0.11:6443", "abcdef.0123456789abcdef", "sha256:00")
	for _, want := range []string{
		"kind: JoinConfiguration", "apiServerEndpoint: 10.131.0.11:6443", "token: abcdef.0123456789abcdef",
		"caCertHashes: [sha256:00]", "criSocket: unix:///run/netshim/netshim.sock", "value: 10.131.0.11",
	} {
		if !strings.Contains(join, want) {
			t.Errorf("join config lacks %q:\n%s", want, join)
		}
	}
	n.Dir = t.TempDir()
	if err := n.WriteKubeletPatch(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(n.PatchDir(), "kubeletconfiguration+strategic.yaml"))
	if err != nil || !strings.Contains(string(data), "cgroupRoot: /node1\n") {
		t.Errorf("kubelet patch %q, %v: want the node's cgroup root", data, err)
	}
}

// The join line kubeadm prints is read as an operator copies it; anything
// else is refused.
func TestParseJoinCommand(t *testing.T) {
	out := "W1206 warning\nkubeadm join 10.131.0.11:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:1234 \n"
	api, token, hash, err := parseJoinCommand(out)
	if err != nil || api != "10.131.0.11:6443" || token != "abcdef.0123456789abcdef" || hash != "sha256:1234" {
		t.Errorf("parseJoinCommand = %q, %q, %q, %v", api, token, hash, err)
	}
	for _, bad := range []string{"", "kubeadm join 10.131.0.11:6443 --token abc", "error: no token"} {
		if _, _, _, err := parseJoinCommand(bad); err == nil {
			t.Errorf("parseJoinCommand(%q) accepted it", bad)
		}
	}
}
