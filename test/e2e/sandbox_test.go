//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

const (
	stateReady    = "SANDBOX_READY"
	stateNotReady = "SANDBOX_NOTREADY"
)

var dnChainRE = regexp.MustCompile(`-j (CNI-DN-[0-9a-f]+)`)

// podWithPort is a pod started with `crictl runp` with one TCP port
// mapping, and what the host shows of it.
type podWithPort struct {
	id       string
	ip       string
	hostPort int32
	dnChain  string // portmap's per-pod DNAT chain
}

// runpWithPort starts a pod with hostPort → 80/TCP through crictl and
// checks everything case 1 asks for: IP on the subnet and pingable,
// checkpoint with the mapping, Ready in `crictl pods`, the IP in
// host-local's store, one more veth on the bridge, and portmap's DNAT
// rule.
func (e *env) runpWithPort(name string, hostPort int32, opts ...harness.PodOption) podWithPort {
	e.t.Helper()
	t := e.t
	vethsBefore := e.vethsOnBridge()

	id := e.runp(e.writePodJSON(name, append([]harness.PodOption{harness.WithHostPort(80, hostPort, runtimeapi.Protocol_TCP)}, opts...)...))
	p := podWithPort{id: id, hostPort: hostPort}

	st := e.inspectp(id)
	if st.ID != id || st.Metadata.Name != name || st.Metadata.Namespace != e.namespace {
		t.Fatalf("crictl inspectp %s: id %q metadata %s/%s, want %s and %s/%s", id, st.ID, st.Metadata.Namespace, st.Metadata.Name, id, e.namespace, name)
	}
	if st.State != stateReady {
		t.Fatalf("crictl inspectp %s: state %q, want %s", id, st.State, stateReady)
	}
	if st.Network == nil {
		t.Fatalf("crictl inspectp %s: no network status", id)
	}
	p.ip = st.Network.IP
	e.requireInSubnet("crictl inspectp "+id, p.ip)

	ping(t, p.ip)

	cp := e.readCheckpoint(id)
	if !strings.HasPrefix(cp.Checksum, "sha256:") {
		t.Errorf("checkpoint of %s: checksum %q, want sha256:...", id, cp.Checksum)
	}
	if cp.Data.SandboxID != id || cp.Data.Name != name || cp.Data.Namespace != e.namespace || cp.Data.UID != e.namespace+"-"+name || cp.Data.HostNetwork {
		t.Errorf("checkpoint of %s: identity %+v, want sandbox %s pod %s/%s uid %s, not host network", id, cp.Data, id, e.namespace, name, e.namespace+"-"+name)
	}
	if len(cp.Data.PortMappings) != 1 {
		t.Fatalf("checkpoint of %s: port mappings %+v, want exactly one", id, cp.Data.PortMappings)
	}
	if pm := cp.Data.PortMappings[0]; !strings.EqualFold(pm.Protocol, "tcp") || pm.ContainerPort != 80 || pm.HostPort != hostPort {
		t.Fatalf("checkpoint of %s: port mapping %+v, want tcp 80 → host %d", id, pm, hostPort)
	}
	if !slices.Contains(cp.Data.IPs, p.ip) {
		t.Errorf("checkpoint of %s: ips %v, want them to hold %s", id, cp.Data.IPs, p.ip)
	}

	pod, ok := e.crictlPods()[id]
	if !ok {
		t.Fatalf("crictl pods does not list %s", id)
	}
	if pod.State != stateReady {
		t.Fatalf("crictl pods: %s is %q, want %s", id, pod.State, stateReady)
	}

	if holder := e.ipamStore()[p.ip]; holder != id {
		t.Fatalf("host-local store %s: %s is held by %q, want sandbox %s", e.ipamStoreDir(), p.ip, holder, id)
	}

	if got := e.vethsOnBridge(); len(got) != len(vethsBefore)+1 {
		t.Fatalf("bridge %s: interfaces %v after runp, want one more than %v", e.bridge, got, vethsBefore)
	}

	// A pause-less sandbox (--sandbox-netns=pauseless) has none.
	wantPause := 1
	if e.readCheckpoint(id).Data.Pauseless != nil {
		wantPause = 0
	}
	if pause := dockerIDs(t, "id="+id, "label=netshim.io/type=podsandbox"); len(pause) != wantPause {
		t.Fatalf("docker ps: pause containers with ID %s: %v, want %d", id, pause, wantPause)
	}

	rules := natRules(t)
	dnat := grepRules(rulesForPort(rules, hostPort), "-j DNAT", fmt.Sprintf("--to-destination %s:80", p.ip))
	if len(dnat) == 0 {
		t.Fatalf("iptables -t nat: no DNAT rule for host port %d → %s:80; rules for that port: %q", hostPort, p.ip, rulesForPort(rules, hostPort))
	}
	for _, r := range grepRules(rules, id) {
		if m := dnChainRE.FindStringSubmatch(r); m != nil {
			p.dnChain = m[1]
		}
	}
	if p.dnChain == "" {
		t.Fatalf("iptables -t nat: no rule naming sandbox %s jumps to a CNI-DN chain: %q", id, grepRules(rules, id))
	}
	return p
}

// requireNoPortmapRules fails if any nat rule still serves the pod's host
// port, names its sandbox ID or its DNAT chain.
func (e *env) requireNoPortmapRules(p podWithPort) {
	e.t.Helper()
	rules := natRules(e.t)
	if left := rulesForPort(rules, p.hostPort); len(left) > 0 {
		e.t.Errorf("iptables -t nat: rules for host port %d remain: %q", p.hostPort, left)
	}
	if left := grepRules(rules, p.id); len(left) > 0 {
		e.t.Errorf("iptables -t nat: rules naming sandbox %s remain: %q", p.id, left)
	}
	if p.dnChain != "" {
		if left := grepRules(rules, p.dnChain); len(left) > 0 {
			e.t.Errorf("iptables -t nat: chain %s of sandbox %s remains: %q", p.dnChain, p.id, left)
		}
	}
}

// Case 1: crictl runp with a port mapping gives a Ready pod with a
// reachable IP on the test subnet, recorded in the checkpoint, in
// host-local's store and in portmap's DNAT rules.
func TestRunPodSandboxWithPortMapping(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start()
	p := e.runpWithPort("web", e.hostPort(1))
	t.Logf("pod %s: IP %s, host port %d → 80 via %s", p.id, p.ip, p.hostPort, p.dnChain)
}

// Case 2: crictl stopp releases the network (IP, veth, portmap rules) and
// leaves the pod NotReady; crictl rmp removes the pause container and the
// checkpoint; Stop and Remove of the removed sandbox still succeed.
func TestStopAndRemovePodSandbox(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start()
	vethsBefore := e.vethsOnBridge()
	p := e.runpWithPort("stopme", e.hostPort(2))

	e.mustCrictl("stopp", p.id)

	pod, ok := e.crictlPods()[p.id]
	if !ok {
		t.Fatalf("crictl pods does not list %s after stopp", p.id)
	}
	if pod.State != stateNotReady {
		t.Errorf("crictl pods: %s is %q after stopp, want %s", p.id, pod.State, stateNotReady)
	}
	e.requireIPReleased(p.ip, p.id)
	if got := e.vethsOnBridge(); len(got) != len(vethsBefore) {
		t.Errorf("bridge %s: interfaces %v after stopp, want as many as before runp: %v", e.bridge, got, vethsBefore)
	}
	e.requireNoPortmapRules(p)
	if cp := e.readCheckpoint(p.id); cp.Data.Pauseless != nil {
		if !cp.Data.Pauseless.Stopped {
			t.Errorf("checkpoint of pause-less sandbox %s does not say stopped after stopp", p.id)
		}
	} else if running := strings.TrimSpace(mustRun(t, "docker", "inspect", "--format", "{{.State.Running}}", p.id)); running != "false" {
		t.Errorf("docker inspect %s: pause container running=%s after stopp, want false", p.id, running)
	}

	e.mustCrictl("rmp", p.id)

	if left := dockerIDs(t, "id="+p.id); len(left) > 0 {
		t.Errorf("docker ps -a: pause container %s still exists after rmp", p.id)
	}
	e.requireNoCheckpoint(p.id)
	if _, ok := e.crictlPods()[p.id]; ok {
		t.Errorf("crictl pods still lists %s after rmp", p.id)
	}

	// Idempotency, through the RPCs (crictl rmp asks for the status first
	// and would fail on a removed sandbox).
	ctx, cancel := e.rpcCtx()
	defer cancel()
	if _, err := e.client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.id}); err != nil {
		t.Errorf("second StopPodSandbox %s: %v, want success", p.id, err)
	}
	if _, err := e.client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.id}); err != nil {
		t.Errorf("second RemovePodSandbox %s: %v, want success", p.id, err)
	}
	if _, err := e.client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.id}); status.Code(err) != codes.NotFound {
		t.Errorf("PodSandboxStatus of removed %s: %v, want NotFound", p.id, err)
	}
}

// Case 3: 20 pods started in parallel get 20 distinct IPs on the subnet;
// stopping and removing them in parallel releases all.
func TestParallelPodSandboxes(t *testing.T) {
	const n = 20
	e := newEnv(t, envOptions{})
	e.start()

	ids := e.runPodsParallel("par", n)

	byIP := map[string]string{}
	for i, id := range ids {
		st := e.mustStatus(id)
		if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("par-%02d (%s): state %v, want READY", i, id, st.State)
		}
		ip := st.GetNetwork().GetIp()
		e.requireInSubnet(fmt.Sprintf("PodSandboxStatus par-%02d", i), ip)
		if other, dup := byIP[ip]; dup {
			t.Fatalf("IP %s given to both %s and %s", ip, other, id)
		}
		byIP[ip] = id
	}
	store := e.ipamStore()
	if len(store) != n {
		t.Errorf("host-local store holds %d IPs, want %d: %v", len(store), n, store)
	}
	for ip, id := range byIP {
		if store[ip] != id {
			t.Errorf("host-local store: %s held by %q, want %s", ip, store[ip], id)
		}
	}
	if got := len(e.vethsOnBridge()); got != n {
		t.Errorf("bridge %s has %d interfaces, want %d", e.bridge, got, n)
	}
	t.Logf("%d pods, IPs %v", n, slices.Sorted(maps.Keys(byIP)))

	errs := make([]error, n)
	parallel(n, func(i int) {
		ctx, cancel := e.rpcCtx()
		defer cancel()
		if _, err := e.client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: ids[i]}); err != nil {
			errs[i] = fmt.Errorf("StopPodSandbox: %w", err)
			return
		}
		if _, err := e.client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: ids[i]}); err != nil {
			errs[i] = fmt.Errorf("RemovePodSandbox: %w", err)
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("par-%02d (%s): %v", i, ids[i], err)
		}
	}
	if store := e.ipamStore(); len(store) != 0 {
		t.Errorf("host-local store still holds %v after all pods were removed", store)
	}
	if files := e.checkpointFiles(); len(files) != 0 {
		t.Errorf("checkpoint dir still holds %v after all pods were removed", files)
	}
	if left := e.pauseContainers(); len(left) != 0 {
		t.Errorf("pause containers left after all pods were removed: %v", left)
	}
	if left := e.vethsOnBridge(); len(left) != 0 {
		t.Errorf("bridge %s still has interfaces %v after all pods were removed", e.bridge, left)
	}
}

// Case 4: when the CNI chain fails (a plugin that does not exist, after
// bridge has already taken an IP), RunPodSandbox fails with an error that
// names the plugin and leaves nothing behind: no container, no
// checkpoint, no IP (the rollback's DEL must reach bridge), no veth.
func TestNetworkSetupFailureLeavesNothing(t *testing.T) {
	const missing = "nonexistent-plugin-xyz"
	e := newEnv(t, envOptions{extraPlugins: []map[string]any{{"type": missing}}})
	e.start()
	vethsBefore := e.vethsOnBridge()

	ctx, cancel := e.rpcCtx()
	defer cancel()
	resp, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: e.podConfig("broken")})
	if err == nil {
		t.Fatalf("RunPodSandbox with a chain naming %s succeeded (sandbox %s), want an error", missing, resp.PodSandboxId)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Errorf("RunPodSandbox error does not name the missing plugin %q: %v", missing, err)
	}
	t.Logf("RunPodSandbox failed as expected: %v", err)

	if left := dockerIDs(t, "label=netshim.io/pod-namespace="+e.namespace, "label=netshim.io/pod-name=broken"); len(left) > 0 {
		t.Errorf("pause container(s) of the failed pod left: %v", left)
	}
	if left := dockerIDs(t, "name=k8s_POD_broken_"+e.namespace+"_"); len(left) > 0 {
		t.Errorf("container(s) named k8s_POD_broken_%s_* left: %v", e.namespace, left)
	}
	if files := e.checkpointFiles(); len(files) != 0 {
		t.Errorf("checkpoint dir holds %v after the failed RunPodSandbox, want nothing", files)
	}
	if store := e.ipamStore(); len(store) != 0 {
		t.Errorf("host-local store still holds %v after the failed RunPodSandbox (the rollback's CNI DEL did not release the IP bridge took)", store)
	}
	if got := e.vethsOnBridge(); len(got) != len(vethsBefore) {
		t.Errorf("bridge %s: interfaces %v after the failed RunPodSandbox, want as before: %v", e.bridge, got, vethsBefore)
	}
	if left := e.listPodIDs(); len(left) != 0 {
		t.Errorf("ListPodSandbox still lists %v after the failed RunPodSandbox", left)
	}
}

// Case 5: netshim is SIGKILLed while a pod runs, the pause container is
// then removed by hand, and netshim restarts: stopp and rmp still release
// the IP and the port mapping, from the checkpoint and libcni's cache.
func TestTeardownAfterCrashAndPauseContainerGone(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start()
	p := e.runpWithPort("crash", e.hostPort(3), withPauseContainer)

	e.mustStop(syscall.SIGKILL)
	mustRun(t, "docker", "rm", "-f", p.id)
	if left := dockerIDs(t, "id="+p.id); len(left) > 0 {
		t.Fatalf("docker rm -f %s did not remove it", p.id)
	}
	if holder := e.ipamStore()[p.ip]; holder != p.id {
		t.Fatalf("host-local store: %s held by %q before teardown, want %s (the test cannot tell a release apart)", p.ip, holder, p.id)
	}

	e.start()
	pod, ok := e.crictlPods()[p.id]
	if !ok {
		t.Fatalf("crictl pods does not list %s after the restart (its checkpoint remains)", p.id)
	}
	if pod.State != stateNotReady {
		t.Errorf("crictl pods: %s is %q after its pause container was removed, want %s", p.id, pod.State, stateNotReady)
	}

	e.mustCrictl("stopp", p.id)
	e.requireIPReleased(p.ip, p.id)
	e.requireNoPortmapRules(p)

	e.mustCrictl("rmp", p.id)
	e.requireNoCheckpoint(p.id)
	if _, ok := e.crictlPods()[p.id]; ok {
		t.Errorf("crictl pods still lists %s after rmp", p.id)
	}
}
