//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// altRuntime is the second name runc has on the test's engine.
const altRuntime = harness.AltRuntime

// TestRuntimeClass runs pods with a runtime handler other than the default
// on a private engine (the Docker under test: E2E_DOCKERD) that has runc
// registered a second time as netshim-alt:
//   - Status (and `crictl info`) lists "", runc and netshim-alt, claiming
//     recursive read-only mounts exactly when this engine and kernel can
//     make them (API 1.44+, Linux 5.12+);
//   - RunPodSandbox and `crictl runp --runtime` with netshim-alt run the
//     sandbox and its container with Docker runtime netshim-alt, and
//     status, list and `crictl inspectp` say so;
//   - an unknown handler is InvalidArgument naming the engine's runtimes,
//     and creates nothing;
//   - a read-only mount is read-only at its top only, and, where the
//     feature is claimed, a recursive read-only one all the way down (else
//     it is refused).
func TestRuntimeClass(t *testing.T) {
	requireWorkloadImage(t)
	d := harness.StartPrivateDockerd(t, harness.WithImages(pauseImage, workloadImage), harness.WithRuntime(altRuntime, ""))
	e := newEnv(t, envOptions{dockerEndpoint: d.Endpoint()})
	e.start()
	wantRRO := engineCanRecursiveReadOnly(t, d)

	// Status lists every runtime of the engine after the default handler.
	ctx, cancel := e.rpcCtx()
	st, err := e.client.Status(ctx, &runtimeapi.StatusRequest{})
	cancel()
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	handlers := map[string]*runtimeapi.RuntimeHandlerFeatures{}
	for _, h := range st.RuntimeHandlers {
		handlers[h.Name] = h.GetFeatures()
	}
	t.Logf("runtime handlers: %v (recursive read-only expected: %v)", st.RuntimeHandlers, wantRRO)
	// Only the default handler's pods run under netshim's OCI wrapper,
	// which gives them a user namespace where its runc makes idmapped
	// mounts: this private engine's wrapper execs the runc beside its
	// dockerd, 1.4.3 for Docker 29, Debian's 1.1.5 for Docker 20.10.
	wantUserns := os.Getenv("E2E_DOCKERD") != ""
	for _, name := range []string{"", "runc", altRuntime} {
		f, ok := handlers[name]
		if !ok {
			t.Fatalf("Status lists no handler %q: %v", name, st.RuntimeHandlers)
		}
		if f.GetRecursiveReadOnlyMounts() != wantRRO || f.GetUserNamespaces() != (name == "" && wantUserns) {
			t.Errorf("handler %q features %v, want recursive read-only %v and user namespaces %v", name, f, wantRRO, name == "" && wantUserns)
		}
	}
	if len(st.RuntimeHandlers) == 0 || st.RuntimeHandlers[0].Name != "" {
		t.Errorf("the default handler is not listed first: %v", st.RuntimeHandlers)
	}

	// A pod with the alt handler: sandbox and container run with it.
	cfg := e.podConfig("alt")
	ctx, cancel = e.rpcCtx()
	resp, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: altRuntime})
	cancel()
	if err != nil {
		t.Fatalf("RunPodSandbox with handler %s: %v\n%s", altRuntime, err, e.logTail(30))
	}
	podID := resp.PodSandboxId
	if got := dockerRuntime(t, d, podID); got != altRuntime {
		t.Errorf("sandbox runs with Docker runtime %q, want %q", got, altRuntime)
	}
	if got := e.mustStatus(podID).RuntimeHandler; got != altRuntime {
		t.Errorf("PodSandboxStatus says handler %q, want %q", got, altRuntime)
	}
	ctrID := e.startContainer(podID, cfg, "sleeper", harness.WithCommand("sleep", "300"))
	if got := dockerRuntime(t, d, ctrID); got != altRuntime {
		t.Errorf("container runs with Docker runtime %q, want %q", got, altRuntime)
	}

	// The default handler is Docker's default runtime; in the pinned
	// netns mode the sandbox's pause container runs under netshim's OCI
	// wrapper, which execs that runc.
	// A pause-less sandbox has no container to ask.
	defaultPod, _ := e.runPod("default")
	want := "runc"
	if e.readCheckpoint(defaultPod).Data.NetNS != "" {
		want = "netshim-oci"
	}
	if e.readCheckpoint(defaultPod).Data.Pauseless == nil {
		if got := dockerRuntime(t, d, defaultPod); got != want {
			t.Errorf("sandbox of the default handler runs with Docker runtime %q, want %s", got, want)
		}
	}

	// An unknown handler: refused, naming the runtimes, nothing made.
	before := d.MustDocker(t, "ps", "-aq")
	ctx, cancel = e.rpcCtx()
	_, err = e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: e.podConfig("nope"), RuntimeHandler: "netshim-nope"})
	cancel()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"netshim-nope"`) || !strings.Contains(err.Error(), altRuntime) || !strings.Contains(err.Error(), "runc") {
		t.Errorf("unknown handler: %v, want InvalidArgument naming it and the engine's runtimes", err)
	}
	if after := d.MustDocker(t, "ps", "-aq"); after != before {
		t.Errorf("the refused pod left containers: before %q, after %q", before, after)
	}

	e.checkReadOnlyMounts(podID, cfg, wantRRO)
	e.checkRuntimeClassWithCrictl(d, wantRRO)
}

// engineCanRecursiveReadOnly is what netshim must claim: Docker can be
// asked for recursive read-only binds from API 1.44 (Docker 25, whose
// runc 1.1+ has "rro"), and the kernel makes them from 5.12.
func engineCanRecursiveReadOnly(t *testing.T, d *harness.Dockerd) bool {
	t.Helper()
	api := strings.TrimSpace(d.MustDocker(t, "version", "--format", "{{.Server.APIVersion}}"))
	kernel := strings.TrimSpace(d.MustDocker(t, "info", "--format", "{{.KernelVersion}}"))
	major, minor := versionPair(t, api)
	kmajor, kminor := versionPair(t, kernel)
	t.Logf("engine API %s, kernel %s", api, kernel)
	return (major > 1 || major == 1 && minor >= 44) && (kmajor > 5 || kmajor == 5 && kminor >= 12)
}

// versionPair reads "A.B..." (trailing text after B's digits ignored).
func versionPair(t *testing.T, v string) (int, int) {
	t.Helper()
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		t.Fatalf("version %q is not A.B", v)
	}
	minor := parts[1]
	if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = minor[:i]
	}
	a, err1 := strconv.Atoi(parts[0])
	b, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		t.Fatalf("version %q is not A.B", v)
	}
	return a, b
}

func dockerRuntime(t *testing.T, d *harness.Dockerd, id string) string {
	t.Helper()
	return strings.TrimSpace(d.MustDocker(t, "inspect", "--format", "{{.HostConfig.Runtime}}", id))
}

// checkReadOnlyMounts mounts a host directory with a tmpfs under it
// read-only into containers of the pod: a plain read-only mount leaves
// the tmpfs writable (the CRI's meaning), a recursive read-only one makes
// it read-only too, or is refused where the engine cannot.
func (e *env) checkReadOnlyMounts(podID string, podCfg *runtimeapi.PodSandboxConfig, wantRRO bool) {
	t := e.t
	t.Helper()
	src := filepath.Join(e.dir, "rosrc")
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "mount", "-t", "tmpfs", "-o", "size=1m", "nse2e-rro", filepath.Join(src, "sub"))
	t.Cleanup(func() {
		if out, err := runCmd("umount", "-l", filepath.Join(src, "sub")); err != nil {
			t.Logf("cleanup: umount: %v\n%s", err, out)
		}
	})
	probe := []string{"sh", "-c", "touch /data/sub/probe 2>/dev/null && exit 0; exit 42"}

	plain := e.runToExit(podID, podCfg, "ro-plain", probe, &runtimeapi.Mount{HostPath: src, ContainerPath: "/data", Readonly: true})
	if plain != 0 {
		t.Errorf("a plain read-only mount made its submount read-only too (exit %d): the CRI asks for the top only", plain)
	}

	rro := &runtimeapi.Mount{HostPath: src, ContainerPath: "/data", Readonly: true, RecursiveReadOnly: true}
	if !wantRRO {
		ctx, cancel := e.rpcCtx()
		defer cancel()
		_, err := e.client.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, SandboxConfig: podCfg,
			Config: harness.Container("ro-recursive", workloadImage, harness.WithCommand(probe...), harness.WithMounts(rro))})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "1.44") {
			t.Errorf("recursive read-only mount on an engine that cannot: %v, want InvalidArgument naming API 1.44", err)
		}
		return
	}
	if code := e.runToExit(podID, podCfg, "ro-recursive", probe, rro); code != 42 {
		t.Errorf("a recursive read-only mount left its submount writable (exit %d, want 42)", code)
	}
}

// runToExit runs a container with one mount until it exits and returns
// its exit code.
func (e *env) runToExit(podID string, podCfg *runtimeapi.PodSandboxConfig, name string, cmd []string, m *runtimeapi.Mount) int32 {
	t := e.t
	t.Helper()
	ctx, cancel := e.rpcCtx()
	defer cancel()
	resp, err := e.client.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, SandboxConfig: podCfg,
		Config: harness.Container(name, workloadImage, harness.WithCommand(cmd...), harness.WithMounts(m))})
	if err != nil {
		t.Fatalf("CreateContainer %s: %v\n%s", name, err, e.logTail(30))
	}
	id := resp.ContainerId
	if _, err := e.client.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer %s: %v\n%s", name, err, e.logTail(30))
	}
	var st *runtimeapi.ContainerStatus
	if !poll(startDeadline, func() bool {
		ctx, cancel := e.rpcCtx()
		defer cancel()
		r, err := e.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("ContainerStatus %s: %v", name, err)
		}
		st = r.Status
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED
	}) {
		t.Fatalf("container %s did not exit within %s: %v", name, startDeadline, st)
	}
	return st.ExitCode
}

// checkRuntimeClassWithCrictl does the same through crictl: `crictl info`
// lists the handlers, `crictl runp --runtime` runs a pod with one, and an
// unknown one fails with the engine's runtimes in the message.
func (e *env) checkRuntimeClassWithCrictl(d *harness.Dockerd, wantRRO bool) {
	t := e.t
	t.Helper()
	var info struct {
		RuntimeHandlers []struct {
			Name     string `json:"name"`
			Features struct {
				RecursiveReadOnlyMounts bool `json:"recursive_read_only_mounts"`
			} `json:"features"`
		} `json:"runtimeHandlers"`
	}
	out := e.mustCrictl("info")
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("parsing crictl info: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, h := range info.RuntimeHandlers {
		seen[h.Name] = true
		if h.Features.RecursiveReadOnlyMounts != wantRRO {
			t.Errorf("crictl info: handler %q recursive read-only %v, want %v", h.Name, h.Features.RecursiveReadOnlyMounts, wantRRO)
		}
	}
	if !seen[""] || !seen["runc"] || !seen[altRuntime] {
		t.Errorf("crictl info lists handlers %v, want \"\", runc and %s", info.RuntimeHandlers, altRuntime)
	}

	id := strings.TrimSpace(e.mustCrictl("runp", "--runtime", altRuntime, e.writePodJSON("crictl-alt")))
	if got := dockerRuntime(t, d, id); got != altRuntime {
		t.Errorf("crictl runp --runtime %s: sandbox runs with Docker runtime %q", altRuntime, got)
	}
	var v struct {
		Status struct {
			RuntimeHandler string `json:"runtimeHandler"`
		} `json:"status"`
	}
	out = e.mustCrictl("inspectp", "-o", "json", id)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("parsing crictl inspectp: %v\n%s", err, out)
	}
	if v.Status.RuntimeHandler != altRuntime {
		t.Errorf("crictl inspectp says handler %q, want %q", v.Status.RuntimeHandler, altRuntime)
	}

	_, stderr, err := e.crictl("runp", "--runtime", "netshim-nope", e.writePodJSON("crictl-nope"))
	if err == nil || !strings.Contains(stderr, "unknown runtime handler") || !strings.Contains(stderr, altRuntime) {
		t.Errorf("crictl runp --runtime netshim-nope: err %v, stderr %q; want a failure naming the engine's runtimes", err, stderr)
	}
}
