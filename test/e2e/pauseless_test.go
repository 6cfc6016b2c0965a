//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/podns"
	"github.com/netshim/netshim/test/harness"
)

// pauselessFiles are the files a pause-less sandbox's checkpoint names.
func (e *env) pauselessFiles(id string) map[podns.Kind]string {
	e.t.Helper()
	cp := e.readCheckpoint(id)
	if cp.Data.Pauseless == nil {
		e.t.Fatalf("checkpoint of %s has no pauseless section: the sandbox was made with a pause container (is runtime netshim-oci registered? %s)", id,
			strings.TrimSpace(mustRun(e.t, "docker", "info", "--format", "{{json .Runtimes}}")))
	}
	return map[podns.Kind]string{podns.Net: cp.Data.NetNS, podns.IPC: cp.Data.Pauseless.IPC, podns.UTS: cp.Data.Pauseless.UTS, "shm": cp.Data.Pauseless.Shm}
}

// kubeletPod is how kubelet runs a pod that does not share its PID
// namespace (a zero NamespaceOption means POD for all three, sharing it);
// e.podConfig starts from it.
var kubeletPod = harness.WithPodNamespaceModes(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD)

// withPauseContainer makes a pod that has a pause container in every
// mode: one sharing its PID namespace. The tests of what happens when a
// pause container dies or is removed behind netshim's back use it.
var withPauseContainer = harness.WithPodNamespaceModes(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_POD)

// dockerExec runs a command in a container through docker exec.
func dockerExec(t *testing.T, id string, cmd ...string) string {
	t.Helper()
	return strings.TrimSpace(mustRun(t, "docker", append([]string{"exec", id}, cmd...)...))
}

// A pod without a pause container (--sandbox-netns=pauseless) on the real
// engine, through the real netshim-oci: no Docker container stands for
// the sandbox; its two containers run in the net, IPC and UTS namespaces
// netshim pinned (the net one holding the pod's IP), share the pod's
// /dev/shm, and get the pod's hostname, DNS settings and sysctls, with no
// marker in their environment. A pod sharing its PID namespace keeps a
// pause container. Stop frees the IP and removes every file; Remove the
// checkpoint.
func TestPauselessSandbox(t *testing.T) {
	e := newEnv(t, envOptions{extraFlags: []string{"--sandbox-netns=pauseless"}})
	e.start()
	vethsBefore := e.vethsOnBridge()
	podID, podCfg := e.runPodWith("pl", harness.WithHostname("pl-host"),
		harness.WithPodDNS([]string{"192.0.2.53"}, []string{"pl.example"}, []string{"ndots:3"}),
		harness.WithSysctls(map[string]string{"net.ipv4.ip_unprivileged_port_start": "1001", "kernel.shm_rmid_forced": "1"}))
	files := e.pauselessFiles(podID)
	if ids := e.pauseContainers(); len(ids) != 0 {
		t.Errorf("pause containers %v for a pause-less pod", ids)
	}
	if _, err := runCmd("docker", "inspect", podID); err == nil {
		t.Errorf("docker inspect %s succeeded: the sandbox ID names a Docker container", podID)
	}
	st := e.inspectp(podID)
	if st.State != stateReady || st.Network == nil {
		t.Fatalf("inspectp: state %s network %+v, want READY with an IP", st.State, st.Network)
	}
	ip := st.Network.IP
	e.requireInSubnet("inspectp "+podID, ip)
	ping(t, ip)
	if out := mustRun(t, "nsenter", "--net="+files[podns.Net], "ip", "-o", "-4", "addr", "show", "dev", "eth0"); !strings.Contains(out, " "+ip+"/") {
		t.Errorf("eth0 in the pinned netns: %q, want %s", out, ip)
	}
	if info := e.mustCrictl("info"); !regexp.MustCompile(`\\?"mode\\?":\s*\\?"pauseless`).MatchString(info) {
		t.Errorf("crictl info does not report the pauseless mode:\n%s", info)
	}
	if pods := e.crictlPods(); pods[podID].State != stateReady {
		t.Errorf("crictl pods: %+v, want %s READY", pods, podID)
	}

	a := e.startContainer(podID, podCfg, "a", harness.WithCommand("sleep", "300"))
	b := e.startContainer(podID, podCfg, "b", harness.WithCommand("sleep", "300"))
	for _, kind := range []podns.Kind{podns.Net, podns.IPC, podns.UTS} {
		want := fmt.Sprintf("%s:[%d]", kind, nsInode(t, files[kind]))
		for _, id := range []string{a, b} {
			if got := dockerExec(t, id, "readlink", "/proc/1/ns/"+string(kind)); got != want {
				t.Errorf("container %.12s: %s namespace %s, want the pinned %s", id, kind, got, want)
			}
		}
	}
	if rt := strings.TrimSpace(mustRun(t, "docker", "inspect", "--format", "{{.HostConfig.Runtime}}", a)); rt != "netshim-oci" {
		t.Errorf("container runtime %q, want netshim-oci", rt)
	}
	if h := dockerExec(t, b, "hostname"); h != "pl-host" {
		t.Errorf("hostname %q, want pl-host", h)
	}
	resolv := dockerExec(t, b, "cat", "/etc/resolv.conf")
	for _, want := range []string{"nameserver 192.0.2.53", "search pl.example", "ndots:3"} {
		if !strings.Contains(resolv, want) {
			t.Errorf("resolv.conf lacks %q:\n%s", want, resolv)
		}
	}
	for path, want := range map[string]string{"/proc/sys/net/ipv4/ip_unprivileged_port_start": "1001", "/proc/sys/kernel/shm_rmid_forced": "1"} {
		if got := dockerExec(t, a, "cat", path); got != want {
			t.Errorf("%s = %q in the pod, want %q", path, got, want)
		}
	}
	if env := dockerExec(t, b, "env"); strings.Contains(env, podns.EnvKey) {
		t.Errorf("the container sees netshim's marker: %s", env)
	}
	dockerExec(t, a, "sh", "-c", "echo shared > /dev/shm/x")
	if got := dockerExec(t, b, "cat", "/dev/shm/x"); got != "shared" {
		t.Errorf("/dev/shm/x in b = %q: the pod's containers do not share /dev/shm", got)
	}

	// A pod whose containers share a PID namespace needs a first process
	// that is none of them: it keeps a pause container.
	shared, _ := e.runPodWith("pl-pid", withPauseContainer)
	if ids := e.pauseContainers(); len(ids) != 1 || ids[0] != shared {
		t.Errorf("pause containers %v, want only the PID-sharing pod's %s", ids, shared)
	}
	e.mustCrictl("stopp", shared)
	e.mustCrictl("rmp", shared)

	e.mustCrictl("stopp", podID)
	e.requireIPReleased(ip, podID)
	if st := e.inspectp(podID); st.State != stateNotReady {
		t.Errorf("after stopp: %s, want NOTREADY", st.State)
	}
	for _, id := range []string{a, b} {
		if s := e.containerState(id); s != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("container %.12s after stopp: %s", id, s)
		}
	}
	for kind, f := range files {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s file %s after stopp: %v, want it removed", kind, f, err)
		}
	}
	if cp := e.readCheckpoint(podID); cp.Data.Pauseless == nil || !cp.Data.Pauseless.Stopped {
		t.Error("the checkpoint does not say the sandbox is stopped")
	}
	if !harness.Eventually(startDeadline, func() bool { return len(e.vethsOnBridge()) == len(vethsBefore) }) {
		t.Errorf("bridge %s: interfaces %v after stopp, want %v", e.bridge, e.vethsOnBridge(), vethsBefore)
	}
	e.mustCrictl("stopp", podID) // idempotent
	e.mustCrictl("rmp", podID)
	ctx, cancel := e.rpcCtx()
	defer cancel()
	if _, err := e.client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Errorf("a second RemovePodSandbox: %v, want success", err)
	}
	e.requireNoCheckpoint(podID)
	if ids := dockerIDs(t, "label=netshim.io/sandbox-id="+podID); len(ids) != 0 {
		t.Errorf("containers %v of the removed pod remain", ids)
	}
	if left := podFilesIn(t, e.ns.NetNSDir); len(left) != 0 {
		t.Errorf("%s after rmp holds %q", e.ns.NetNSDir, left)
	}
}

// A pause-less pod outlives a netshim killed under it: after the restart
// it is READY with its IP (the index rebuilt it from its checkpoint), its
// container still runs in it, a new container joins it, and it is torn
// down as usual. Files no checkpoint names are swept; its own are not.
func TestPauselessSurvivesRestart(t *testing.T) {
	e := newEnv(t, envOptions{extraFlags: []string{"--sandbox-netns=pauseless"}})
	e.start()
	podID, podCfg := e.runPodWith("pl-restart")
	files := e.pauselessFiles(podID)
	ip := e.inspectp(podID).Network.IP
	a := e.startContainer(podID, podCfg, "a", harness.WithCommand("sleep", "300"))

	e.mustStop(unix.SIGKILL)
	e.start()
	if st := e.inspectp(podID); st.State != stateReady || st.Network == nil || st.Network.IP != ip {
		t.Fatalf("after restart: state %s network %+v, want READY with %s", st.State, st.Network, ip)
	}
	for kind, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s file %s of a live pod after restart: %v", kind, f, err)
		}
	}
	if s := e.containerState(a); s != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after restart: %s", s)
	}
	b := e.startContainer(podID, podCfg, "b", harness.WithCommand("sleep", "300"))
	want := fmt.Sprintf("net:[%d]", nsInode(t, files[podns.Net]))
	if got := dockerExec(t, b, "readlink", "/proc/1/ns/net"); got != want {
		t.Errorf("container made after the restart: netns %s, want the pod's %s", got, want)
	}
	ping(t, ip)
	e.mustCrictl("stopp", podID)
	e.requireIPReleased(ip, podID)
	e.mustCrictl("rmp", podID)
	e.requireNoCheckpoint(podID)
	if left := podFilesIn(t, e.ns.NetNSDir); len(left) != 0 {
		t.Errorf("%s after rmp holds %q", e.ns.NetNSDir, left)
	}
}

// --sandbox-netns=auto on an engine with the wrapper gives each pod the
// fastest mode it allows, and says which and why: a pod of kubelet's
// (PID namespace CONTAINER) is pause-less, one sharing its PID namespace
// keeps a pause container in a pinned netns, a host-network pod is in the
// docker mode. PodSandboxStatus's verbose info (`crictl inspectp`) has each
// pod's mode and reason, and netshim_sandbox_modes counts them.
func TestAutoModePerPod(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	e := newEnv(t, envOptions{extraFlags: []string{"--sandbox-netns=auto", "--metrics-bind-address=" + addr}})
	e.start()
	type want struct{ mode, reason string }
	pods := map[string]want{}
	fast, _ := e.runPodWith("auto-fast")
	pods[fast] = want{"pauseless", "no-pause-needed"}
	shared, _ := e.runPodWith("auto-pid", withPauseContainer)
	pods[shared] = want{"pinned", "shared-pid-namespace"}
	host, _ := e.runPodWith("auto-host", harness.WithHostNetwork())
	pods[host] = want{"docker", "host-network"}

	for id, w := range pods {
		ctx, cancel := e.rpcCtx()
		resp, err := e.client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
		cancel()
		if err != nil {
			t.Fatalf("PodSandboxStatus %s: %v", id, err)
		}
		var info struct {
			SandboxMode struct{ Mode, Reason, Detail string } `json:"sandboxMode"`
		}
		if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
			t.Fatalf("verbose info of %s: %v\n%s", id, err, resp.Info["info"])
		}
		if got := info.SandboxMode; got.Mode != w.mode || got.Reason != w.reason || got.Detail == "" {
			t.Errorf("pod %s: sandboxMode %+v, want %s (%s) with words", resp.Status.Metadata.Name, got, w.mode, w.reason)
		}
		_, dockerErr := runCmd("docker", "inspect", "--type", "container", id)
		if hasPause := dockerErr == nil; hasPause != (w.mode != "pauseless") {
			t.Errorf("pod %s (%s): a Docker container for the sandbox: %v", resp.Status.Metadata.Name, w.mode, hasPause)
		}
	}
	samples := scrape(t, "http://"+addr)
	for _, w := range pods {
		if n := sum(samples, "netshim_sandbox_modes", map[string]string{"mode": w.mode, "reason": w.reason}); n != 1 {
			t.Errorf("netshim_sandbox_modes{mode=%q,reason=%q} = %v, want 1", w.mode, w.reason, n)
		}
	}
	for id := range pods {
		e.mustCrictl("stopp", id)
		e.mustCrictl("rmp", id)
	}
}
