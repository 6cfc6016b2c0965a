//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/netshim/netshim/pkg/podns"
	"github.com/netshim/netshim/test/harness"
)

// nsInode is the inode of the namespace a path (a pinned file or
// /proc/PID/ns/net) refers to: two paths of one namespace have the same.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

// podFilesIn lists what a netns dir holds for pods: Pinner.List, which
// leaves out netshim's key (podns.KeyFile), there for the next pod.
func podFilesIn(t *testing.T, dir string) []string {
	t.Helper()
	files, err := podns.NewPinner(dir).List()
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// The pinned sandbox netns (--sandbox-netns=pinned) on the real engine,
// through the real netshim-oci: the pause container runs in the netns
// netshim made, which holds the pod's IP, with no marker left in its
// environment; after the pause container is removed behind netshim's
// back, stopp still DELs in the real netns (the veth and IP go), and
// the pinned file goes with it.
func TestPinnedSandboxNetNS(t *testing.T) {
	e := newEnv(t, envOptions{extraFlags: []string{"--sandbox-netns=pinned"}})
	e.start()
	vethsBefore := e.vethsOnBridge()
	p := e.runpWithPort("pinned", e.hostPort(1))

	cp := e.readCheckpoint(p.id)
	netnsDir := e.ns.NetNSDir
	if filepath.Dir(cp.Data.NetNS) != netnsDir {
		t.Fatalf("checkpoint netns %q, want a file in %s (is runtime netshim-oci registered? %s)", cp.Data.NetNS, netnsDir,
			strings.TrimSpace(mustRun(t, "docker", "info", "--format", "{{json .Runtimes}}")))
	}
	if rt := strings.TrimSpace(mustRun(t, "docker", "inspect", "--format", "{{.HostConfig.Runtime}}", p.id)); rt != "netshim-oci" {
		t.Errorf("pause container runtime %q, want netshim-oci", rt)
	}
	pid := e.pausePid(p.id)
	if nsInode(t, cp.Data.NetNS) != nsInode(t, fmt.Sprintf("/proc/%d/ns/net", pid)) {
		t.Errorf("the pause container (pid %d) is not in the pinned netns %s", pid, cp.Data.NetNS)
	}
	out := mustRun(t, "nsenter", "--net="+cp.Data.NetNS, "ip", "-o", "-4", "addr", "show", "dev", "eth0")
	if !strings.Contains(out, " "+p.ip+"/") {
		t.Errorf("eth0 in the pinned netns: %q, want %s", out, p.ip)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(environ), "NETSHIM_OCI_NAMESPACES") {
		t.Errorf("the pause process sees netshim's marker: %q", environ)
	}
	// crictl info says the mode.
	if info := e.mustCrictl("info"); !regexp.MustCompile(`\\?"mode\\?":\s*\\?"pinned`).MatchString(info) {
		t.Errorf("crictl info does not report the pinned mode:\n%s", info)
	}

	// The pause container vanishes; the pinned netns keeps the pod's
	// veth and IP until the DEL, which must reach it.
	mustRun(t, "docker", "rm", "-f", p.id)
	e.mustCrictl("stopp", p.id)
	e.requireIPReleased(p.ip, p.id)
	e.requireNoPortmapRules(p)
	if !harness.Eventually(10*time.Second, func() bool { return len(e.vethsOnBridge()) == len(vethsBefore) }) {
		t.Errorf("bridge %s: interfaces %v after stopp, want %v: the pod's veth was not deleted", e.bridge, e.vethsOnBridge(), vethsBefore)
	}
	if _, err := os.Stat(cp.Data.NetNS); !os.IsNotExist(err) {
		t.Errorf("pinned netns %s after stopp: %v, want it removed", cp.Data.NetNS, err)
	}
	e.mustCrictl("rmp", p.id)
	e.requireNoCheckpoint(p.id)
	if left := podFilesIn(t, netnsDir); len(left) != 0 {
		t.Errorf("%s after rmp holds %q", netnsDir, left)
	}
}

// A netshim killed after it pinned a pod's netns restarts without the
// file leaking: a sandbox it ran is torn down with it, and files no
// checkpoint names are swept.
func TestPinnedNetNSSurvivesRestart(t *testing.T) {
	e := newEnv(t, envOptions{extraFlags: []string{"--sandbox-netns=pinned"}})
	e.start()
	p := e.runpWithPort("restart", e.hostPort(2))
	cp := e.readCheckpoint(p.id)
	if cp.Data.NetNS == "" {
		t.Fatal("no pinned netns in the checkpoint")
	}
	stray := filepath.Join(e.ns.NetNSDir, "pod-stray.net")
	if err := os.WriteFile(stray, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	e.mustStop(unix.SIGKILL)
	e.start()
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("stray %s after restart: %v, want it swept", stray, err)
	}
	if st := e.inspectp(p.id); st.State != stateReady || st.Network == nil || st.Network.IP != p.ip {
		t.Fatalf("after restart: state %s network %+v, want READY with %s", st.State, st.Network, p.ip)
	}
	ping(t, p.ip)
	e.mustCrictl("stopp", p.id)
	e.requireIPReleased(p.ip, p.id)
	e.mustCrictl("rmp", p.id)
	if _, err := os.Stat(cp.Data.NetNS); !os.IsNotExist(err) {
		t.Errorf("pinned netns %s after rmp: %v", cp.Data.NetNS, err)
	}
}
