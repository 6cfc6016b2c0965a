package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A Node is a Kubernetes node on this machine without a VM or a nested
// container: a network namespace of its own and a persistent mount
// namespace of its own, in which its daemons (Docker 29, netshim, kubelet)
// run at their usual paths. Every command of the node is entered with
// `nsenter --net --mount` (Command): `ip netns exec` would give each
// command a fresh mount namespace, so kubelet's volume mounts would be
// invisible to the node's dockerd.
//
// Nodes are joined by a Lan: a bridge in a network namespace of its own
// (in the host's, Docker's FORWARD DROP policy with br_netfilter would drop
// node-to-node traffic), which the host reaches over one veth.
//
// Everything a Lan or Node changes outside its directory is recorded in the
// HostGuard first, so that a run killed half-way is undone by the next; the
// guard's Restore is also how a run takes them down (it kills what still
// runs in their netns), so they have no Close of their own.

// NodeBinds are the directories each node has its own copy of, bound over
// the host's in the node's mount namespace. kubelet hard-codes
// /var/lib/kubelet/device-plugins (and wipes it at start) and
// /var/log/containers whatever its flags say; kubeadm writes
// /etc/kubernetes and the etcd static pod /var/lib/etcd; the engine and
// netshim keep their state under /var/lib.
var NodeBinds = []string{
	"/var/lib/kubelet",
	"/var/log/pods",
	"/var/log/containers",
	"/etc/kubernetes",
	"/var/lib/etcd",
	"/etc/cni/net.d",
	"/var/lib/cni",
	"/etc/docker",
	"/var/lib/docker",
	"/var/lib/containerd",
	"/var/lib/netshim",
}

// Lan is the network that joins the nodes: a /24 whose .1 is the bridge in
// the lan's namespace (the nodes' default gateway, which routes nowhere
// else: traffic for addresses outside the test dies there) and whose .254 is
// the host's end, where the host serves what nodes fetch (the registry).
type Lan struct {
	// Name is the lan's network namespace, /run/netns/Name.
	Name string
	// Prefix is the lan's subnet, a /24.
	Prefix netip.Prefix
	// HostLink is the host's end of the veth into the lan.
	HostLink string
}

// lanBridge is the bridge's name inside the lan's namespace.
const lanBridge = "br0"

// Gateway is the bridge's address: .1.
func (l *Lan) Gateway() netip.Addr { return l.addr(1) }

// HostIP is the host's address on the lan: .254.
func (l *Lan) HostIP() netip.Addr { return l.addr(254) }

// NodeIP is the address of the i-th node (from 1 to 199): .10+i.
func (l *Lan) NodeIP(i int) netip.Addr { return l.addr(byte(10 + i%200)) }

func (l *Lan) addr(last byte) netip.Addr {
	a := l.Prefix.Masked().Addr().As4()
	a[3] = last
	return netip.AddrFrom4(a)
}

// lanPrefix checks that prefix is an IPv4 /24 (the addresses above assume it).
func lanPrefix(prefix netip.Prefix) error {
	if !prefix.Addr().Is4() || prefix.Bits() != 24 {
		return fmt.Errorf("lan subnet %s: want an IPv4 /24", prefix)
	}
	return nil
}

// lanCommands are the commands that make a lan (run in order on the host).
func lanCommands(l *Lan) [][]string {
	gw := l.Gateway().String() + "/24"
	host := l.HostIP().String() + "/24"
	return [][]string{
		{"ip", "netns", "add", l.Name},
		{"ip", "-n", l.Name, "link", "set", "lo", "up"},
		{"ip", "-n", l.Name, "link", "add", lanBridge, "type", "bridge"},
		{"ip", "-n", l.Name, "addr", "add", gw, "dev", lanBridge},
		{"ip", "-n", l.Name, "link", "set", lanBridge, "up"},
		{"ip", "link", "add", l.HostLink, "type", "veth", "peer", "name", "host", "netns", l.Name},
		{"ip", "-n", l.Name, "link", "set", "host", "master", lanBridge, "up"},
		{"ip", "addr", "add", host, "dev", l.HostLink},
		{"ip", "link", "set", l.HostLink, "up"},
	}
}

// NewLan makes the lan name on prefix, the host's end being hostLink
// (at most 15 characters, a link name).
func NewLan(g *HostGuard, name string, prefix netip.Prefix, hostLink string) (*Lan, error) {
	if err := lanPrefix(prefix); err != nil {
		return nil, err
	}
	if len(hostLink) > 15 || hostLink == "" {
		return nil, fmt.Errorf("host link name %q: want 1 to 15 characters", hostLink)
	}
	l := &Lan{Name: name, Prefix: prefix.Masked(), HostLink: hostLink}
	if err := g.WatchNetns(name); err != nil {
		return nil, err
	}
	if err := g.WatchLink(hostLink); err != nil {
		return nil, err
	}
	for _, c := range lanCommands(l) {
		if out, err := RunCmd(c[0], c[1:]...); err != nil {
			return nil, fmt.Errorf("making lan %s: %s: %w: %s", name, strings.Join(c, " "), err, strings.TrimSpace(out))
		}
	}
	return l, nil
}

// Node is one node: see the package comment above NodeBinds.
type Node struct {
	// Name is the node's name (kubelet's --hostname-override, its cgroup
	// root /Name, its netns "ns-"+Name).
	Name string
	// IP is the node's address on the lan, on its eth0.
	IP netip.Addr
	// Dir holds the node's own copies of NodeBinds (under root/), its
	// machine-id and its mount namespace file (under ns/).
	Dir string
	// NetNS and MountNS are the namespace files nsenter enters.
	NetNS, MountNS string
	// Env is what every command of the node gets on top of the host's
	// environment (PATH with the node's binaries first, say).
	Env []string

	lan *Lan
}

// nodeNetnsName is the netns name of node name.
func nodeNetnsName(name string) string { return "ns-" + name }

// nodeSetupScript is what NewNode runs inside the node's namespaces, as
// sh -ec. The order matters: a fresh sysfs (whose /sys/class/net lists the
// node's links, not the host's) hides the host's cgroup tree, which is bound
// aside first and moved back; mount --move refuses a shared source, so the
// mounts become shared (kubelet's mount propagation into containers needs
// it, as on a systemd host) only after that.
func nodeSetupScript(n *Node) string {
	q := shellQuote
	aside := filepath.Join(n.Dir, "ns", "cgroup")
	var b strings.Builder
	fmt.Fprintf(&b, "mkdir -p %s\n", q(aside))
	fmt.Fprintf(&b, "mount --rbind /sys/fs/cgroup %s\n", q(aside))
	b.WriteString("mount -t sysfs sysfs /sys\n")
	fmt.Fprintf(&b, "mount --move %s /sys/fs/cgroup\n", q(aside))
	b.WriteString("mount --make-rshared /\n")
	// The node's /run: its sockets, PID files, netns pins, flannel's subnet.env.
	b.WriteString("mount -t tmpfs -o mode=755 tmpfs /run\n")
	for _, d := range NodeBinds {
		fmt.Fprintf(&b, "mount --bind %s %s\n", q(filepath.Join(n.Dir, "root", d)), q(d))
	}
	fmt.Fprintf(&b, "mount --bind %s /etc/machine-id\n", q(filepath.Join(n.Dir, "machine-id")))
	// Its own name resolution: its name in /etc/hosts (kubeadm's preflight
	// looks it up), and as nameserver the lan's gateway, where nothing
	// answers (no query leaves the test's namespaces; pods' DNS is
	// CoreDNS's, whose upstream this is).
	fmt.Fprintf(&b, "mount --bind %s /etc/hosts\n", q(filepath.Join(n.Dir, "hosts")))
	fmt.Fprintf(&b, "mount --bind %s /etc/resolv.conf\n", q(filepath.Join(n.Dir, "resolv.conf")))
	// Network: the lan address, the lan's bridge as the default route (so
	// that Service IPs route; they die there unless kube-proxy DNATs them).
	b.WriteString("ip link set lo up\n")
	fmt.Fprintf(&b, "ip addr add %s/%d dev eth0\n", n.IP, n.lan.Prefix.Bits())
	b.WriteString("ip link set eth0 up\n")
	fmt.Fprintf(&b, "ip route add default via %s\n", n.lan.Gateway())
	// What kubeadm's preflight wants and its docs have an operator set
	// (/etc/sysctl.d/k8s.conf): the node forwards its pods' packets.
	b.WriteString("sysctl -qw net.ipv4.ip_forward=1\n")
	return b.String()
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// NewNode makes node name with address ip on lan, its state in dir (which
// the caller made and recorded in g as a temp dir, so that everything
// mounted under it is undone). Host directories NodeBinds names that do not
// exist are made (and recorded for removal), the node's cgroup root /name is
// recorded for removal in every hierarchy, and the node's netns for
// deletion.
func NewNode(g *HostGuard, lan *Lan, name string, ip netip.Addr, dir string) (*Node, error) {
	if !lan.Prefix.Contains(ip) {
		return nil, fmt.Errorf("node %s: address %s is not on the lan %s", name, ip, lan.Prefix)
	}
	// Checked before anything is made: bad input changes nothing.
	lanPort := "n-" + name
	if name == "" || len(lanPort) > 15 || strings.ContainsAny(name, "/ \t\n") {
		return nil, fmt.Errorf("node name %q: want 1 to 13 characters without '/' or white space (its link on the lan is %q, at most 15)", name, lanPort)
	}
	n := &Node{
		Name: name, IP: ip, Dir: dir,
		NetNS:   filepath.Join("/run/netns", nodeNetnsName(name)),
		MountNS: filepath.Join(dir, "ns", "mnt"),
		lan:     lan,
	}
	if err := g.WatchNetns(nodeNetnsName(name)); err != nil {
		return nil, err
	}
	if err := g.WatchDirs(NodeBinds...); err != nil {
		return nil, err
	}
	if err := g.WatchCgroups(name); err != nil {
		return nil, err
	}
	for _, d := range NodeBinds {
		for _, p := range []string{d, filepath.Join(dir, "root", d)} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return nil, fmt.Errorf("node %s: %w", name, err)
			}
		}
	}
	if err := writeMachineID(filepath.Join(dir, "machine-id")); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(nodeHosts(name, ip)), 0o644); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver "+lan.Gateway().String()+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	if err := makeCgroupRoot(name); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	nsDir := filepath.Join(dir, "ns")
	steps := [][]string{
		{"ip", "netns", "add", nodeNetnsName(name)},
		{"ip", "link", "add", "eth0", "netns", nodeNetnsName(name), "type", "veth", "peer", "name", lanPort, "netns", lan.Name},
		{"ip", "-n", lan.Name, "link", "set", lanPort, "master", lanBridge, "up"},
		// unshare --mount=FILE needs FILE on a private mount.
		{"mkdir", "-p", nsDir},
		{"mount", "--bind", nsDir, nsDir},
		{"mount", "--make-private", nsDir},
		{"touch", n.MountNS},
		{"unshare", "--mount=" + n.MountNS, "--propagation", "slave", "true"},
	}
	for _, c := range steps {
		if out, err := RunCmd(c[0], c[1:]...); err != nil {
			return nil, fmt.Errorf("making node %s: %s: %w: %s", name, strings.Join(c, " "), err, strings.TrimSpace(out))
		}
	}
	if out, err := n.Run(context.Background(), "sh", "-ec", nodeSetupScript(n)); err != nil {
		return nil, fmt.Errorf("setting up node %s: %w: %s", name, err, strings.TrimSpace(out))
	}
	return n, nil
}

// nodeHosts is a node's /etc/hosts: localhost and its own name.
func nodeHosts(name string, ip netip.Addr) string {
	return "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + ip.String() + "\t" + name + "\n"
}

// writeMachineID writes a random machine-id (32 hex digits), as
// systemd-machine-id-setup would on a new machine: kubelet reports it as
// the node's machine ID, and two nodes sharing one confuses tools that key
// on it.
func writeMachineID(path string) error {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o444)
}

// makeCgroupRoot makes /name in every cgroup v1 hierarchy (kubelet refuses a
// cgroupRoot that is missing in any) or in the v2 tree.
func makeCgroupRoot(name string) error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		roots = []string{"/sys/fs/cgroup"}
	}
	for _, r := range roots {
		if fi, err := os.Lstat(r); err != nil || !fi.IsDir() {
			continue // a symlink like cpu -> cpu,cpuacct
		}
		if err := os.Mkdir(filepath.Join(r, name), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup root %s: %w", filepath.Join(r, name), err)
		}
	}
	return nil
}

// Command is name run inside the node (not started).
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := n.argv(name, args)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), n.Env...)
	return cmd
}

// argv is the command line that runs name in the node. A Node without
// namespace files (unit tests' only) runs it as it is.
func (n *Node) argv(name string, args []string) []string {
	if n.NetNS == "" && n.MountNS == "" {
		return append([]string{name}, args...)
	}
	return append([]string{"nsenter", "--net=" + n.NetNS, "--mount=" + n.MountNS, "--", name}, args...)
}

// Run runs name inside the node (at most CommandDeadline) and returns its
// combined output.
func (n *Node) Run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, CommandDeadline)
	defer cancel()
	out, err := n.Command(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// NodeDockerSock and NodeNetshimSock are where the node's engine and
// netshim serve, at the paths an operator's node has them (in the node's
// own /run).
const (
	NodeDockerSock  = "/var/run/docker.sock"
	NodeNetshimSock = "/run/netshim/netshim.sock"
)

// HostPath is where the host reaches path of the node's mount namespace:
// through the root of a process running in it (pid, e.g. a NodeDaemon's).
func HostPath(pid int, path string) string {
	return filepath.Join("/proc", fmt.Sprint(pid), "root", path)
}

// StartEngine starts the node's Docker engine: dockerdBin (Docker 29: its
// directory, with its containerd and runc, comes first on its PATH) on
// NodeDockerSock, its data in the node's /var/lib/docker, its containers'
// cgroups under the node's cgroup root (kubelet's cgroupRoot must be the
// same, or one node's kubelet cleans up the other's pods), netshim's OCI
// wrapper registered when wrapper is not empty, and extra flags
// (--insecure-registry for the lan's registry, say). No bridge and no
// iptables rules of Docker's own: pods get their network from CNI,
// Services from kube-proxy.
func (n *Node) StartEngine(dockerdBin, wrapper string, extra ...string) (*NodeDaemon, error) {
	args := []string{
		"--host", "unix://" + NodeDockerSock,
		"--cgroup-parent", "/" + n.Name,
		"--bridge", "none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
	}
	if wrapper != "" {
		args = append(args, "--add-runtime", OCIWrapperRuntime+"="+wrapper)
	}
	args = append(args, extra...)
	n.prependPath(filepath.Dir(dockerdBin))
	d, err := n.StartDaemon("dockerd", false, dockerdBin, args...)
	if err != nil {
		return nil, err
	}
	if !Eventually(StartTimeout, func() bool {
		_, err := n.Run(context.Background(), "docker", "-H", "unix://"+NodeDockerSock, "version", "--format", "{{.Server.Version}}")
		return err == nil
	}) {
		_ = d.Stop(StopTimeout)
		return nil, fmt.Errorf("node %s: dockerd did not answer within %s\n%s", n.Name, StartTimeout, d.LogTail(30))
	}
	return d, nil
}

// Docker runs the docker CLI against the node's engine.
func (n *Node) Docker(ctx context.Context, args ...string) (string, error) {
	return n.Run(ctx, "docker", append([]string{"-H", "unix://" + NodeDockerSock}, args...)...)
}

// StartNetshim starts netshim (bin) in the node with its defaults, as a
// packaged node runs it (state in /var/lib/netshim, CNI config in
// /etc/cni/net.d, serving NodeNetshimSock), plus args, and waits until it
// answers the CRI.
func (n *Node) StartNetshim(bin string, args ...string) (*NodeDaemon, error) {
	d, err := n.StartDaemon("netshim", false, bin, args...)
	if err != nil {
		return nil, err
	}
	if !Eventually(StartTimeout, func() bool {
		pid := d.Pid()
		if pid == 0 {
			return false
		}
		c, err := DialCRI(HostPath(pid, NodeNetshimSock))
		if err != nil {
			return false
		}
		defer c.Conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = c.Runtime.Version(ctx, &runtimeapi.VersionRequest{})
		return err == nil
	}) {
		_ = d.Stop(StopTimeout)
		return nil, fmt.Errorf("node %s: netshim did not answer within %s\n%s", n.Name, StartTimeout, d.LogTail(30))
	}
	return d, nil
}

// InstallBinaries makes the node's bin dir (Dir/bin, first on the PATH of
// every later command of the node) hold links to the given binaries under
// their names (name -> path), as a package would install them in
// /usr/bin: kubeadm runs `kubelet --version` and its preflight looks for
// the tools it needs on PATH.
func (n *Node) InstallBinaries(bins map[string]string) error {
	dir := filepath.Join(n.Dir, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, path := range bins {
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		link := filepath.Join(dir, name)
		_ = os.Remove(link)
		if err := os.Symlink(abs, link); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	n.prependPath(dir)
	return nil
}

// prependPath puts dir first on the PATH the node's commands get.
func (n *Node) prependPath(dir string) {
	path := os.Getenv("PATH")
	for i := len(n.Env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(n.Env[i], "PATH="); ok {
			path = v
			break
		}
	}
	n.Env = append(n.Env, "PATH="+dir+string(os.PathListSeparator)+path)
}

// kubeadmKubeletScript is kubelet as kubeadm's packages start it: the
// systemd drop-in 10-kubeadm.conf's command line, with the flags kubeadm
// writes into /var/lib/kubelet/kubeadm-flags.env at init or join. Until
// both that file and config.yaml exist it exits, and the daemon restarts
// it. On a real node kubeadm stops the service while it writes them; here
// `systemctl stop` fails, and a kubelet started between the two writes
// ran without the flags (--hostname-override: node2 registered under the
// machine's hostname), so it waits for both.
const kubeadmKubeletScript = `[ -f /var/lib/kubelet/kubeadm-flags.env ] && [ -f /var/lib/kubelet/config.yaml ] || exit 1
. /var/lib/kubelet/kubeadm-flags.env
exec kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`

// StartKubeadmKubelet starts the node's kubelet service as kubeadm expects
// it: restarted whenever it exits, kubelet found on the node's PATH
// (InstallBinaries), extraArgs as /etc/default/kubelet's
// KUBELET_EXTRA_ARGS. kubeadm restarts the service through the init
// system, which these nodes lack: it warns, and the crash-looping kubelet
// finds its configuration at its next start.
func (n *Node) StartKubeadmKubelet(extraArgs string) (*NodeDaemon, error) {
	// The directory kubeadm's packages make for static pods; kubelet logs
	// an error every second while it is missing (on a worker).
	if _, err := n.Run(context.Background(), "mkdir", "-p", "/etc/kubernetes/manifests"); err != nil {
		return nil, fmt.Errorf("node %s: /etc/kubernetes/manifests: %w", n.Name, err)
	}
	if extraArgs != "" {
		n.Env = append(n.Env, "KUBELET_EXTRA_ARGS="+extraArgs)
	}
	return n.StartDaemon("kubelet", true, "sh", "-c", kubeadmKubeletScript)
}
