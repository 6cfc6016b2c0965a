package harness

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLanAddresses(t *testing.T) {
	l := &Lan{Name: "nslan", Prefix: netip.MustParsePrefix("10.131.0.0/24"), HostLink: "nslanh"}
	for _, tc := range []struct {
		got  netip.Addr
		want string
	}{
		{l.Gateway(), "10.131.0.1"}, {l.HostIP(), "10.131.0.254"}, {l.NodeIP(1), "10.131.0.11"}, {l.NodeIP(2), "10.131.0.12"},
	} {
		if tc.got.String() != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
	for _, p := range []string{"10.131.0.0/16", "fd00::/24"} {
		if err := lanPrefix(netip.MustParsePrefix(p)); err == nil {
			t.Errorf("lan subnet %s accepted", p)
		}
	}
	// The host's end is on the lan's bridge, in the lan's netns; the
	// gateway is the bridge's own address.
	cmds := lanCommands(l)
	joined := make([]string, len(cmds))
	for i, c := range cmds {
		joined[i] = strings.Join(c, " ")
	}
	all := strings.Join(joined, "\n")
	for _, want := range []string{
		"ip netns add nslan",
		"ip -n nslan addr add 10.131.0.1/24 dev br0",
		"ip link add nslanh type veth peer name host netns nslan",
		"ip -n nslan link set host master br0 up",
		"ip addr add 10.131.0.254/24 dev nslanh",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("lan commands lack %q:\n%s", want, all)
		}
	}
}

// The order of the node's mounts is what makes them work: the cgroup tree
// is set aside before the new sysfs hides it and moved back before the
// mounts turn shared (mount --move refuses a shared source); every bind
// comes from the node's own dir.
func TestNodeSetupScript(t *testing.T) {
	l := &Lan{Name: "nslan", Prefix: netip.MustParsePrefix("10.131.0.0/24")}
	n := &Node{Name: "node1", IP: l.NodeIP(1), Dir: "/tmp/nsnode.x/node1", lan: l}
	s := nodeSetupScript(n)
	order := []string{
		"mount --rbind /sys/fs/cgroup '/tmp/nsnode.x/node1/ns/cgroup'",
		"mount -t sysfs sysfs /sys",
		"mount --move '/tmp/nsnode.x/node1/ns/cgroup' /sys/fs/cgroup",
		"mount --make-rshared /",
		"mount -t tmpfs -o mode=755 tmpfs /run",
	}
	at := -1
	for _, want := range order {
		i := strings.Index(s, want)
		if i < 0 || i < at {
			t.Fatalf("script lacks %q after what comes before it:\n%s", want, s)
		}
		at = i
	}
	for _, d := range NodeBinds {
		want := "mount --bind '/tmp/nsnode.x/node1/root" + d + "' '" + d + "'"
		if i := strings.Index(s, want); i < at {
			t.Errorf("script lacks %q after the tmpfs on /run:\n%s", want, s)
		}
	}
	for _, want := range []string{
		"mount --bind '/tmp/nsnode.x/node1/machine-id' /etc/machine-id",
		"mount --bind '/tmp/nsnode.x/node1/hosts' /etc/hosts",
		"mount --bind '/tmp/nsnode.x/node1/resolv.conf' /etc/resolv.conf",
		"ip addr add 10.131.0.11/24 dev eth0",
		"ip route add default via 10.131.0.1",
		"sysctl -qw net.ipv4.ip_forward=1",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %q:\n%s", want, s)
		}
	}
	if h := nodeHosts("node1", n.IP); !strings.Contains(h, "10.131.0.11\tnode1\n") || !strings.HasPrefix(h, "127.0.0.1\tlocalhost\n") {
		t.Errorf("hosts = %q", h)
	}
	if got := shellQuote("a'b"); got != `'a'\''b'` {
		t.Errorf("shellQuote = %s", got)
	}
}

// A run killed with a node up leaves its netns and what runs in it: the
// next guard kills those processes and removes the netns file, and leaves
// processes in other namespaces alone.
func TestHostGuardRemovesANetnsAndWhatRunsInIt(t *testing.T) {
	host, roots := fakeHost(t)
	procRoot := filepath.Join(host, "proc")
	netnsRoot := filepath.Join(host, "netns")
	for _, d := range []string{procRoot, netnsRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(t.TempDir(), "state")
	g, err := NewHostGuard(state, roots, WithGuardLog(t.Logf), func(g *HostGuard) { g.procRoot, g.netnsRoot = procRoot, netnsRoot })
	if err != nil {
		t.Fatal(err)
	}
	if err := g.WatchNetns("ns-node1"); err != nil {
		t.Fatal(err)
	}
	if err := g.WatchNetns("a/b"); err == nil {
		t.Error("a netns name with a slash was accepted")
	}
	nsFile := filepath.Join(netnsRoot, "ns-node1")
	if err := os.WriteFile(nsFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(host, "other-ns")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Two real processes, each with a fake /proc entry whose ns/net is
	// (a hard link to) a namespace file: the inode is what is compared.
	start := func(ns string) *exec.Cmd {
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(procRoot, strconv.Itoa(cmd.Process.Pid))
		if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(ns, filepath.Join(dir, "ns", "net")); err != nil {
			t.Fatal(err)
		}
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "stat"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), stat, 0o644); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	inNode, outside := start(nsFile), start(other)
	t.Cleanup(func() { _ = outside.Process.Kill(); _ = outside.Wait() })
	// The fake /proc does not follow the real one: the killed process's
	// entry goes once it has died, as the kernel's would.
	died := make(chan struct{})
	go func() {
		_ = inNode.Wait()
		_ = os.RemoveAll(filepath.Join(procRoot, strconv.Itoa(inNode.Process.Pid)))
		close(died)
	}()
	t.Cleanup(func() { _ = inNode.Process.Kill(); <-died })
	if err := g.Restore(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(nsFile); !os.IsNotExist(err) {
		t.Errorf("netns file still there: %v", err)
	}
	select {
	case <-died:
	case <-time.After(10 * time.Second):
		t.Error("the process in the node's netns was not killed")
	}
	if err := outside.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the process in another netns was killed: %v", err)
	}
}

// Bad input is refused before anything is made: NewNode touches neither the
// guard (nil here) nor the host.
func TestNewNodeRefusesBadInput(t *testing.T) {
	l := &Lan{Name: "nslan", Prefix: netip.MustParsePrefix("10.131.0.0/24")}
	for _, tc := range []struct {
		name, node string
		ip         netip.Addr
		wantErr    string
	}{
		{"address off the lan", "node1", netip.MustParseAddr("10.131.1.11"), "not on the lan"},
		{"empty name", "", l.NodeIP(1), "want 1 to 13 characters"},
		{"name too long for its link", "node-with-a-long-name", l.NodeIP(1), "at most 15"},
		{"slash", "a/b", l.NodeIP(1), "without '/'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "n")
			if _, err := NewNode(nil, l, tc.node, tc.ip, dir); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewNode(%q, %s) = %v, want %q", tc.node, tc.ip, err, tc.wantErr)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s was made (%v)", dir, err)
			}
		})
	}
}
