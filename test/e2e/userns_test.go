//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/podns"
	"github.com/netshim/netshim/test/harness"
)

// usernsHostID is where the tests' pods map their 65536 ids on the node: a
// range kubelet could give (a multiple of 65536) and no user of the node has.
const usernsHostID, usernsLength = 1 << 22, 65536

// usernsEngineSupport says whether the engine under test can run pods with
// their own user namespace: its wrapper's runc must make idmapped mounts.
// Docker 20.10 as Debian ships it (runc 1.1.5) cannot; the engines of
// ENGINE=docker29 and docker20-runc143 (runc 1.4.3) can. The Makefile says
// which engine runs (E2E_ENGINE); a run without it fails, not skips.
func usernsEngineSupport(t *testing.T) bool {
	t.Helper()
	switch e := os.Getenv("E2E_ENGINE"); e {
	case "docker20":
		return false
	case "docker29", "docker20-runc143":
		return true
	default:
		t.Fatalf("E2E_ENGINE=%q: want docker20, docker20-runc143 or docker29 (make e2e sets it)", e)
		return false
	}
}

// A pod with hostUsers: false, in each sandbox mode that pins its
// namespaces. Where the engine can (runc 1.2+ behind the wrapper): Status
// says so; its container is uid 0 inside and the pod's mapped uid on the
// node (/proc/PID/uid_map, the owner of its /proc entry and of its files
// seen from the node), writes to its image's /etc and to an idmapped
// directory (where the file lands as the node's root, through the
// idmapping), cannot read a root-only file of the node that a plain
// hostPath mount shows it, and ContainerStatus reports uid 0; stop and
// remove leave no pinned file and no idmapped mount. Where it cannot:
// Status says so, and RunPodSandbox fails with FailedPrecondition naming
// what is missing, having made nothing. Bad mappings fail with
// InvalidArgument, having made nothing, on every engine.
func TestPodUserNamespace(t *testing.T) {
	supported := usernsEngineSupport(t)
	for _, mode := range []string{"pinned", "pauseless"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, envOptions{extraFlags: []string{"--sandbox-netns=" + mode}})
			e.start()
			if got := e.handlerSupportsUserns(); got != supported {
				t.Fatalf("Status: the default handler's user_namespaces is %v, want %v on E2E_ENGINE=%s", got, supported, os.Getenv("E2E_ENGINE"))
			}
			e.requireBadMappingsRefused()
			if !supported {
				e.requireUsernsRefused()
				return
			}
			e.runUsernsPod(mode)
		})
	}
}

// handlerSupportsUserns is Status's user_namespaces of the default handler.
func (e *env) handlerSupportsUserns() bool {
	e.t.Helper()
	ctx, cancel := e.rpcCtx()
	defer cancel()
	st, err := e.client.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		e.t.Fatalf("Status: %v", err)
	}
	for _, h := range st.GetRuntimeHandlers() {
		if h.GetName() == "" {
			return h.GetFeatures().GetUserNamespaces()
		}
	}
	e.t.Fatalf("Status lists no default runtime handler: %v", st.GetRuntimeHandlers())
	return false
}

// requireNothingMade checks that a refused RunPodSandbox left no
// container, checkpoint or pinned file.
func (e *env) requireNothingMade(what string, filesBefore []string) {
	e.t.Helper()
	if ids := e.listPodIDs(); len(ids) != 0 {
		e.t.Errorf("%s: sandboxes %v exist", what, ids)
	}
	if cps := e.checkpointFiles(); len(cps) != 0 {
		e.t.Errorf("%s: checkpoints %v exist", what, cps)
	}
	if got := podFilesIn(e.t, e.ns.NetNSDir); len(got) != len(filesBefore) {
		e.t.Errorf("%s: %s holds %q, want %q", what, e.ns.NetNSDir, got, filesBefore)
	}
}

// requireBadMappingsRefused: mappings kubelet would never send are
// InvalidArgument, before anything is made.
func (e *env) requireBadMappingsRefused() {
	e.t.Helper()
	before := podFilesIn(e.t, e.ns.NetNSDir)
	m := func(c, h, l uint32) *runtimeapi.IDMapping {
		return &runtimeapi.IDMapping{ContainerId: c, HostId: h, Length: l}
	}
	for _, tc := range []struct {
		name string
		u    *runtimeapi.UserNamespace
		want string
	}{
		{"two ranges", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
			Uids: []*runtimeapi.IDMapping{m(0, usernsHostID, 1000), m(1000, usernsHostID+1000, 1000)}, Gids: []*runtimeapi.IDMapping{m(0, usernsHostID, 2000)}}, "2 uid mapping ranges"},
		{"root unmapped", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
			Uids: []*runtimeapi.IDMapping{m(1, usernsHostID, 100)}, Gids: []*runtimeapi.IDMapping{m(1, usernsHostID, 100)}}, "container id 0"},
		{"onto the node's root", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
			Uids: []*runtimeapi.IDMapping{m(0, 0, 65536)}, Gids: []*runtimeapi.IDMapping{m(0, 0, 65536)}}, "host id 0"},
		{"mode CONTAINER", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER}, "mode CONTAINER"},
		{"mode TARGET", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_TARGET}, "mode TARGET"},
	} {
		cfg := e.podConfig("userns-bad", kubeletPod, harness.WithPodSecurityContext(func(sc *runtimeapi.LinuxSandboxSecurityContext) {
			sc.NamespaceOptions.UsernsOptions = tc.u
		}))
		ctx, cancel := e.rpcCtx()
		_, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		cancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			e.t.Errorf("%s: RunPodSandbox: %v, want InvalidArgument mentioning %q", tc.name, err, tc.want)
		}
		e.requireNothingMade(tc.name, before)
	}
}

// requireUsernsRefused: on an engine that cannot, a good pod is refused
// with FailedPrecondition naming the runc it needs, and nothing is made.
func (e *env) requireUsernsRefused() {
	e.t.Helper()
	before := podFilesIn(e.t, e.ns.NetNSDir)
	cfg := e.podConfig("userns-no", kubeletPod, harness.WithUserNamespace(usernsHostID, usernsLength))
	ctx, cancel := e.rpcCtx()
	defer cancel()
	_, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "runc 1.2 or later") {
		e.t.Errorf("RunPodSandbox with hostUsers: false on an engine whose runc cannot idmap: %v, want FailedPrecondition naming runc 1.2", err)
	}
	e.requireNothingMade("refused user namespace pod", before)
}

// runUsernsPod runs the pod and checks what the container is and sees.
func (e *env) runUsernsPod(mode string) {
	t := e.t
	t.Helper()
	hostDir := filepath.Join(e.dir, "host")
	idmapDir := filepath.Join(e.dir, "idmapped")
	for _, d := range []string{hostDir, idmapDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(hostDir, "root-only")
	if err := os.WriteFile(secret, []byte("node secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	podID, podCfg := e.runPodWith("userns", kubeletPod, harness.WithUserNamespace(usernsHostID, usernsLength))
	cp := e.readCheckpoint(podID)
	userFile := cp.Data.UserNS
	if userFile == "" || !strings.HasPrefix(userFile, e.ns.NetNSDir+"/") {
		t.Fatalf("checkpoint of %s names user namespace %q, want a file in %s", podID, userFile, e.ns.NetNSDir)
	}
	if err := podns.Verify(userFile, podns.User); err != nil {
		t.Fatalf("pinned user namespace: %v", err)
	}
	if ids := e.pauseContainers(); (mode == "pauseless") != (len(ids) == 0) {
		t.Errorf("mode %s: pause containers %v", mode, ids)
	}
	// Another pod's range may share none of its ids.
	before := podFilesIn(t, e.ns.NetNSDir)
	overlapping := e.podConfig("userns-overlap", kubeletPod, harness.WithUserNamespace(usernsHostID+usernsLength/2, usernsLength))
	ctx, cancel := e.rpcCtx()
	_, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: overlapping})
	cancel()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "overlaps that of pod") {
		t.Errorf("RunPodSandbox with a range overlapping a running pod's: %v, want InvalidArgument", err)
	}
	if got := podFilesIn(t, e.ns.NetNSDir); len(got) != len(before) {
		t.Errorf("the refused pod left files: %q, want %q", got, before)
	}
	ns := podCfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	m := ns.GetUsernsOptions().GetUids()
	id := e.startContainer(podID, podCfg, "app",
		harness.WithCommand("sh", "-c", "echo written > /etc/userns-test && echo idmapped > /idmapped/f && exec sleep 300"),
		harness.WithSecurityContext(func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.NamespaceOptions = ns }),
		harness.WithMounts(
			&runtimeapi.Mount{HostPath: hostDir, ContainerPath: "/host", Readonly: true},
			&runtimeapi.Mount{HostPath: idmapDir, ContainerPath: "/idmapped", UidMappings: m, GidMappings: m},
		))
	if rt := strings.TrimSpace(mustRun(t, "docker", "inspect", "--format", "{{.HostConfig.Runtime}}", id)); rt != "netshim-oci" {
		t.Errorf("container runtime %q, want netshim-oci", rt)
	}
	idmapped := filepath.Join(idmapDir, "f")
	if !harness.Eventually(startDeadline, func() bool { _, err := os.Stat(idmapped); return err == nil }) {
		t.Fatalf("the container did not write %s: %s", idmapped, mustRun(t, "docker", "logs", id))
	}
	if got := dockerExec(t, id, "id", "-u"); got != "0" {
		t.Errorf("id -u in the container: %q, want 0", got)
	}
	pidOut := strings.TrimSpace(mustRun(t, "docker", "inspect", "--format", "{{.State.Pid}}", id))
	pid, err := strconv.Atoi(pidOut)
	if err != nil || pid <= 0 {
		t.Fatalf("container pid %q", pidOut)
	}
	uidMap, err := os.ReadFile("/proc/" + pidOut + "/uid_map")
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(uidMap)); len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(usernsHostID) || f[2] != strconv.Itoa(usernsLength) {
		t.Errorf("/proc/%d/uid_map = %q, want 0 %d %d", pid, uidMap, usernsHostID, usernsLength)
	}
	owner := func(path string) uint32 {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatalf("stat %s: %v", path, err)
		}
		return st.Sys().(*syscall.Stat_t).Uid
	}
	if u := owner("/proc/" + pidOut); u != usernsHostID {
		t.Errorf("/proc/%d is owned by %d on the node, want the mapped %d", pid, u, usernsHostID)
	}
	// The image's /etc, written by container root: its root on the node
	// is the mapped uid, which owns the file as the node sees it.
	if got := dockerExec(t, id, "cat", "/etc/userns-test"); got != "written" {
		t.Errorf("/etc/userns-test in the container: %q", got)
	}
	if u := owner("/proc/" + pidOut + "/root/etc/userns-test"); u != usernsHostID {
		t.Errorf("/etc/userns-test is owned by %d on the node, want the mapped %d", u, usernsHostID)
	}
	if got := dockerExec(t, id, "stat", "-c", "%u", "/etc/passwd"); got != "0" {
		t.Errorf("the image's /etc/passwd is owned by %q in the container, want 0 (an idmapped image)", got)
	}
	// Through the idmapped mount container root is the node's root.
	if u := owner(idmapped); u != 0 {
		t.Errorf("%s (written through an idmapped mount) is owned by %d on the node, want 0", idmapped, u)
	}
	if out, err := runCmd("docker", "exec", id, "cat", "/host/root-only"); err == nil || strings.Contains(out, "node secret") {
		t.Errorf("the container read a root-only file of the node through a hostPath mount: %q, %v", out, err)
	}
	ctx, cancel = e.rpcCtx()
	st, err := e.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if u := st.GetStatus().GetUser().GetLinux(); u == nil || u.GetUid() != 0 || u.GetGid() != 0 {
		t.Errorf("ContainerStatus user %+v, want uid 0 gid 0 as the container sees them", u)
	}
	if env := dockerExec(t, id, "env"); strings.Contains(env, podns.EnvKey) {
		t.Errorf("the container sees netshim's marker: %s", env)
	}

	e.mustCrictl("stop", id)
	e.mustCrictl("rm", id)
	e.mustCrictl("stopp", podID)
	e.mustCrictl("rmp", podID)
	if _, err := os.Stat(userFile); !os.IsNotExist(err) {
		t.Errorf("user namespace file %s after rmp: %v, want it removed", userFile, err)
	}
	if left := podFilesIn(t, e.ns.NetNSDir); len(left) != 0 {
		t.Errorf("%s after rmp holds %q", e.ns.NetNSDir, left)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, "netshim-rootfs") || strings.Contains(l, ".netshim-idmap") {
			t.Errorf("an idmapped mount is left: %s", l)
		}
	}
}
