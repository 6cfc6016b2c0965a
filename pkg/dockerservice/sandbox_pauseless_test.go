package dockerservice

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/metrics"
	"github.com/netshim/netshim/pkg/podns"
)

// newPauselessEnv is a service with --sandbox-netns=pauseless on an engine
// that has the wrapper, and its --netns-dir. Pinning needs root.
func newPauselessEnv(t *testing.T) (*testEnv, string) {
	t.Helper()
	requireRoot(t)
	return newPinnedEnv(t, SandboxNetNSPauseless, true) // which removes what a failed test left
}

// pauselessPodConfig is podConfig as kubelet sends it for a pod that does
// not share its pid namespace (CONTAINER: the CRI's zero value is POD),
// with namespaced sysctls of the kinds a pause-less sandbox hands to its
// containers.
func pauselessPodConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name)
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}}
	cfg.Linux.Sysctls = map[string]string{
		"net.ipv4.ip_unprivileged_port_start": "0",
		"kernel.shm_rmid_forced":              "1",
	}
	return cfg
}

// plFiles are the pause-less files a checkpoint names, as names in the
// netns directory, sorted.
func plFiles(cp *checkpoint.PodSandbox) []string {
	var out []string
	for _, f := range pauselessFiles(cp) {
		out = append(out, filepath.Base(f))
	}
	slices.Sort(out)
	return out
}

// plSandbox is the ListPodSandbox item of id, nil when it is not listed.
func plSandbox(t *testing.T, ds *DockerService, id string) *runtimeapi.PodSandbox {
	t.Helper()
	resp, err := ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.Items {
		if s.Id == id {
			return s
		}
	}
	return nil
}

// plState is the state ListPodSandbox and PodSandboxStatus agree on.
func plState(t *testing.T, ds *DockerService, id string) runtimeapi.PodSandboxState {
	t.Helper()
	listed := plSandbox(t, ds, id)
	if listed == nil {
		t.Fatalf("sandbox %s not listed", id)
	}
	st, err := ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State != listed.State {
		t.Fatalf("sandbox %s: status says %v, list says %v", id, st.Status.State, listed.State)
	}
	return listed.State
}

func (p *fakePlugin) callPrefixCount(prefix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func TestValidSandboxNetNSModePauseless(t *testing.T) {
	if err := ValidSandboxNetNSMode(SandboxNetNSPauseless); err != nil {
		t.Errorf("ValidSandboxNetNSMode(%q) = %v", SandboxNetNSPauseless, err)
	}
	if err := ValidSandboxNetNSMode("pause-less"); err == nil || !strings.Contains(err.Error(), "pauseless") {
		t.Errorf("a bad mode's error %v does not offer pauseless", err)
	}
}

func TestChooseSandboxController(t *testing.T) {
	nsCfg := func(ns *runtimeapi.NamespaceOption) *runtimeapi.PodSandboxConfig {
		cfg := podConfig("web")
		cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}
		return cfg
	}
	for _, tc := range []struct {
		name           string
		mode           string
		wrapper        bool
		defaultRuntime string
		cfg            *runtimeapi.PodSandboxConfig
		handler        string
		want           string // the controller's mode
		why            string // its modeReason code
		wantCode       codes.Code
	}{
		{name: "pauseless", mode: SandboxNetNSPauseless, wrapper: true, cfg: pauselessPodConfig("web"), want: SandboxNetNSPauseless, why: reasonNoPauseNeeded},
		{name: "pauseless, explicit CONTAINER pid and POD ipc and network", mode: SandboxNetNSPauseless, wrapper: true,
			cfg: nsCfg(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD, Network: runtimeapi.NamespaceMode_POD}), want: SandboxNetNSPauseless, why: reasonNoPauseNeeded},
		{name: "pauseless, engine default not runc: the operator's choice", mode: SandboxNetNSPauseless, wrapper: true, defaultRuntime: "runsc", cfg: pauselessPodConfig("web"), want: SandboxNetNSPauseless, why: reasonNoPauseNeeded},
		{name: "pauseless, shared pid namespace", mode: SandboxNetNSPauseless, wrapper: true,
			cfg: nsCfg(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}), want: SandboxNetNSPinned, why: reasonSharedPID},
		{name: "pauseless, no namespace options: pid POD, the CRI's zero value", mode: SandboxNetNSPauseless, wrapper: true, cfg: podConfig("web"), want: SandboxNetNSPinned, why: reasonSharedPID},
		{name: "pauseless, node pid namespace", mode: SandboxNetNSPauseless, wrapper: true,
			cfg: nsCfg(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE}), want: SandboxNetNSPauseless, why: reasonNoPauseNeeded},
		{name: "pauseless, node IPC", mode: SandboxNetNSPauseless, wrapper: true,
			cfg: nsCfg(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_NODE}), want: SandboxNetNSPinned, why: reasonNodeIPC},
		{name: "pauseless, host network", mode: SandboxNetNSPauseless, wrapper: true,
			cfg: nsCfg(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER, Network: runtimeapi.NamespaceMode_NODE}), want: SandboxNetNSDocker, why: reasonHostNetwork},
		{name: "pauseless, RuntimeClass handler", mode: SandboxNetNSPauseless, wrapper: true, cfg: pauselessPodConfig("web"), handler: "runc", want: SandboxNetNSDocker, why: reasonRuntimeHandler},
		{name: "pauseless without the wrapper", mode: SandboxNetNSPauseless, cfg: pauselessPodConfig("web"), wantCode: codes.FailedPrecondition},
		{name: "pauseless without the wrapper, host network", mode: SandboxNetNSPauseless,
			cfg: nsCfg(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER, Network: runtimeapi.NamespaceMode_NODE}), want: SandboxNetNSDocker, why: reasonHostNetwork},
		{name: "auto", mode: SandboxNetNSAuto, wrapper: true, cfg: pauselessPodConfig("web"), want: SandboxNetNSPauseless, why: reasonNoPauseNeeded},
		{name: "auto, shared pid namespace", mode: SandboxNetNSAuto, wrapper: true,
			cfg: nsCfg(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}), want: SandboxNetNSPinned, why: reasonSharedPID},
		{name: "auto, no namespace options", mode: SandboxNetNSAuto, wrapper: true, cfg: podConfig("web"), want: SandboxNetNSPinned, why: reasonSharedPID},
		{name: "auto, node IPC", mode: SandboxNetNSAuto, wrapper: true,
			cfg: nsCfg(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_NODE}), want: SandboxNetNSPinned, why: reasonNodeIPC},
		{name: "auto, host network", mode: SandboxNetNSAuto, wrapper: true,
			cfg: nsCfg(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER, Network: runtimeapi.NamespaceMode_NODE}), want: SandboxNetNSDocker, why: reasonHostNetwork},
		{name: "auto, RuntimeClass handler", mode: SandboxNetNSAuto, wrapper: true, cfg: pauselessPodConfig("web"), handler: "runc", want: SandboxNetNSDocker, why: reasonRuntimeHandler},
		{name: "auto, engine default not runc", mode: SandboxNetNSAuto, wrapper: true, defaultRuntime: "runsc", cfg: pauselessPodConfig("web"), want: SandboxNetNSDocker, why: reasonEngineDefaultRuntime},
		{name: "auto without the wrapper", mode: SandboxNetNSAuto, cfg: pauselessPodConfig("web"), want: SandboxNetNSDocker, why: reasonNoWrapper},
		{name: "pinned", mode: SandboxNetNSPinned, wrapper: true, cfg: pauselessPodConfig("web"), want: SandboxNetNSPinned, why: reasonConfigured},
		{name: "pinned, host network", mode: SandboxNetNSPinned, wrapper: true,
			cfg: nsCfg(&runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER, Network: runtimeapi.NamespaceMode_NODE}), want: SandboxNetNSDocker, why: reasonHostNetwork},
		{name: "docker", mode: SandboxNetNSDocker, wrapper: true, cfg: pauselessPodConfig("web"), want: SandboxNetNSDocker, why: reasonConfigured},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := tc.defaultRuntime
			if def == "" {
				def = "runc"
			}
			e, _ := newPinnedEnvDefault(t, tc.mode, tc.wrapper, def)
			ctl, why, err := e.ds.chooseSandboxController(context.Background(), tc.cfg, tc.handler)
			if codeOf(err) != tc.wantCode {
				t.Fatalf("error = %v, want code %v", err, tc.wantCode)
			}
			if err != nil {
				for _, want := range []string{OCIWrapperRuntime, "--sandbox-netns=" + SandboxNetNSPauseless} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %q", err, want)
					}
				}
				return
			}
			if got := ctl.mode(); got != tc.want || why != tc.why {
				t.Errorf("mode = %v (%s), want %v (%s)", got, why, tc.want, tc.why)
			}
			if strings.HasPrefix(modeReasonText(why), "made by") {
				t.Errorf("reason %q has no words of its own", why)
			}
		})
	}
}

// The mode in effect says pauseless, for crictl info and the start-up log.
func TestSandboxNetNSModePauseless(t *testing.T) {
	e, _ := newPinnedEnv(t, SandboxNetNSPauseless, true)
	if mode, reason := e.ds.SandboxNetNSMode(context.Background()); mode != SandboxNetNSPauseless || !strings.Contains(reason, OCIWrapperRuntime) {
		t.Errorf("mode %q (%s), want pauseless", mode, reason)
	}
	e, _ = newPinnedEnv(t, SandboxNetNSPauseless, false)
	if mode, reason := e.ds.SandboxNetNSMode(context.Background()); mode != "unavailable" || !strings.Contains(reason, "--sandbox-netns=pauseless") {
		t.Errorf("without the wrapper: mode %q (%s), want unavailable naming the flag", mode, reason)
	}
}

// A pause-less sandbox end to end against the fake engine: no container,
// its namespaces and /dev/shm pinned, CNI in the pinned netns, reported
// like any sandbox, stopped and removed idempotently.
func TestPauselessSandboxLifecycle(t *testing.T) {
	e, dir := newPauselessEnv(t)
	ctx := context.Background()
	cfg := pauselessPodConfig("web")
	id := e.run(t, cfg)

	if b, err := hex.DecodeString(id); err != nil || len(b) != 32 {
		t.Errorf("sandbox ID %q: want 64 hex characters like Docker's", id)
	}
	if ids := e.docker.ContainerIDs(); len(ids) != 0 {
		t.Errorf("containers made: %v", ids)
	}
	for _, call := range []string{"ContainerCreate", "ContainerStart", "ImagePull", "ImageInspect " + testPauseImage} {
		if n := e.docker.Count(call); n != 0 {
			t.Errorf("%d %s calls for a pause-less sandbox", n, call)
		}
	}

	// The checkpoint, as written to disk.
	cp, err := e.ckpt.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	pl := cp.Pauseless
	if pl == nil {
		t.Fatalf("checkpoint %+v has no Pauseless", cp)
	}
	if !cp.NetworkReady() || !slices.Equal(cp.IPs, []string{"10.0.0.1"}) || len(cp.PortMappings) != 1 || cp.PortMappings[0].HostPort != 18080 {
		t.Errorf("checkpoint network: ready %v IPs %v ports %+v", cp.NetworkReady(), cp.IPs, cp.PortMappings)
	}
	if pl.Hostname != "web" || pl.CgroupParent != "/kubepods/pod1" || pl.Stopped {
		t.Errorf("checkpoint hostname %q cgroup parent %q stopped %v", pl.Hostname, pl.CgroupParent, pl.Stopped)
	}
	if pl.DNS == nil || !slices.Equal(pl.DNS.Servers, cfg.DnsConfig.Servers) || !slices.Equal(pl.DNS.Searches, cfg.DnsConfig.Searches) || !slices.Equal(pl.DNS.Options, cfg.DnsConfig.Options) {
		t.Errorf("checkpoint DNS %+v, want %v", pl.DNS, cfg.DnsConfig)
	}
	if !maps.Equal(pl.Sysctls, cfg.Linux.Sysctls) {
		t.Errorf("checkpoint sysctls %v, want %v", pl.Sysctls, cfg.Linux.Sysctls)
	}
	if info, _ := labelcodec.Decode(id, pl.Labels); info == nil {
		t.Errorf("checkpoint labels %v do not decode as a sandbox's", pl.Labels)
	} else if info.Metadata.Name != "web" || info.Metadata.Uid != "uid-web" || !maps.Equal(info.Labels, cfg.Labels) {
		t.Errorf("checkpoint labels decode to %+v", info)
	}

	// The files: net, ipc and uts namespaces and a tmpfs, of one name.
	name := strings.TrimSuffix(filepath.Base(cp.NetNS), ".net")
	want := []string{name + ".ipc", name + ".net", name + ".shm", name + ".uts"}
	if got := listDir(t, dir); !slices.Equal(got, want) || !strings.HasPrefix(name, "pod-") {
		t.Fatalf("netns dir holds %v, want %v", got, want)
	}
	if !slices.Equal(plFiles(cp), want) || filepath.Dir(cp.NetNS) != dir {
		t.Errorf("checkpoint names %v in %s, want %v in %s", plFiles(cp), filepath.Dir(cp.NetNS), want, dir)
	}
	for kind, path := range map[podns.Kind]string{podns.Net: cp.NetNS, podns.IPC: pl.IPC, podns.UTS: pl.UTS} {
		if err := podns.Verify(path, kind); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(pl.Shm, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Errorf("%s: filesystem type %#x (%v), want tmpfs", pl.Shm, st.Type, err)
	}
	if fi, err := os.Stat(pl.Shm); err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("%s: mode %v (%v), want 1777", pl.Shm, fi.Mode(), err)
	}

	e.plugin.mu.Lock()
	atSetUp := e.plugin.netnsAtSetUp
	e.plugin.mu.Unlock()
	if atSetUp != cp.NetNS {
		t.Errorf("CNI ADD got netns %q, want the pinned %q", atSetUp, cp.NetNS)
	}

	// Reported like a sandbox with an infra container.
	listed := plSandbox(t, e.ds, id)
	if listed == nil || listed.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("listed as %v, want READY", listed)
	}
	if listed.Metadata.Name != "web" || listed.Metadata.Namespace != "ns" || listed.Metadata.Uid != "uid-web" || listed.Metadata.Attempt != 1 ||
		!maps.Equal(listed.Labels, cfg.Labels) || !maps.Equal(listed.Annotations, cfg.Annotations) || listed.CreatedAt == 0 || listed.RuntimeHandler != "" {
		t.Errorf("listed as %v", listed)
	}
	status, err := e.ds.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	s := status.Status
	if s.State != runtimeapi.PodSandboxState_SANDBOX_READY || s.Network.GetIp() != "10.0.0.1" || s.Metadata.Name != "web" ||
		!maps.Equal(s.Labels, cfg.Labels) || !maps.Equal(s.Annotations, cfg.Annotations) {
		t.Errorf("status %v", s)
	}
	if !strings.Contains(status.Info["info"], `"pauseless"`) {
		t.Errorf("verbose info %s does not show the checkpoint's pauseless part", status.Info["info"])
	}
	if got, err := e.ds.PodNetNS(ctx, id); err != nil || got != cp.NetNS {
		t.Errorf("PodNetNS = %q, %v; want %s", got, err, cp.NetNS)
	}

	// A retry of the request gets the same sandbox, and makes nothing.
	if again := e.run(t, cfg); again != id {
		t.Errorf("a second RunPodSandbox gave %s, want %s", again, id)
	}
	if got := listDir(t, dir); !slices.Equal(got, want) {
		t.Errorf("after the retry the netns dir holds %v", got)
	}
	if n := e.plugin.callPrefixCount("SetUpPod"); n != 1 {
		t.Errorf("%d ADDs, want 1", n)
	}

	// Stop: DEL in the pinned netns, then every file goes.
	if _, err := e.ds.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	e.plugin.mu.Lock()
	atDown := e.plugin.netnsAtDown
	e.plugin.mu.Unlock()
	if atDown != cp.NetNS {
		t.Errorf("CNI DEL got netns %q, want %q", atDown, cp.NetNS)
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Errorf("after Stop the netns dir holds %v", got)
	}
	if got := plState(t, e.ds, id); got != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("after Stop: %v, want NOTREADY", got)
	}
	if stopped, err := e.ckpt.Get(id); err != nil || stopped.Pauseless == nil || !stopped.Pauseless.Stopped {
		t.Errorf("checkpoint after Stop: %+v, %v; want stopped", stopped, err)
	}
	if _, err := e.ds.PodNetNS(ctx, id); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("PodNetNS of a stopped sandbox: %v, want FailedPrecondition", err)
	}
	// Not ready, so a RunPodSandbox of the same attempt is a conflict.
	if _, err := e.ds.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg}); codeOf(err) != codes.AlreadyExists || !strings.Contains(err.Error(), id) {
		t.Errorf("RunPodSandbox of a stopped sandbox's attempt: %v, want AlreadyExists naming %s", err, id)
	}
	if _, err := e.ds.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if n := e.plugin.callPrefixCount("TearDownPod"); n != 1 {
		t.Errorf("%d DELs after two Stops, want 1", n)
	}

	for range 2 { // idempotent
		if _, err := e.ds.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
		if listed := plSandbox(t, e.ds, id); listed != nil {
			t.Errorf("listed after Remove: %v", listed)
		}
		if _, err := e.ds.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id}); codeOf(err) != codes.NotFound {
			t.Errorf("status after Remove: %v, want NotFound", err)
		}
		if _, err := e.ckpt.Get(id); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("checkpoint after Remove: %v", err)
		}
	}
	if ids := e.docker.ContainerIDs(); len(ids) != 0 || e.docker.Count("ContainerRemove") != 0 {
		t.Errorf("a pause-less sandbox's lifecycle touched Docker containers: %v, %d removes", ids, e.docker.Count("ContainerRemove"))
	}
	// The same attempt can run again once the old one is gone.
	if again := e.run(t, cfg); again == id {
		t.Errorf("a new sandbox got the removed one's ID %s", id)
	}
}

// Remove without Stop (kubelet's GC) stops the pod's containers, tears
// the network down and releases every file.
func TestPauselessRemoveWithoutStop(t *testing.T) {
	e, dir := newPauselessEnv(t)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	cfg := pauselessPodConfig("web")
	id := e.run(t, cfg)
	resp, err := e.ds.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: ctrConfig("app"), SandboxConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ds.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if n := e.plugin.callPrefixCount("TearDownPod " + id); n != 1 {
		t.Errorf("%d DELs, want 1", n)
	}
	if e.docker.Count("ContainerStop "+resp.ContainerId) != 1 || len(e.docker.ContainerIDs()) != 0 {
		t.Errorf("the pod's container was not stopped and removed: %v", e.docker.ContainerIDs())
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Errorf("netns dir holds %v after Remove", got)
	}
	if ids, _ := e.ckpt.List(); len(ids) != 0 {
		t.Errorf("checkpoints left: %v", ids)
	}
	if _, ok := e.ds.store().Get(id); ok {
		t.Error("the index still holds the removed sandbox")
	}
}

// A RunPodSandbox whose ADD fails undoes everything; when the undo's DEL
// fails too, the sandbox stays, NOTREADY, with the checkpoint and files
// a later Stop or Remove needs to free what the ADD took.
func TestPauselessRunFailureUndo(t *testing.T) {
	t.Run("ADD fails", func(t *testing.T) {
		e, dir := newPauselessEnv(t)
		e.plugin.setUpErr = errors.New("no IPs left")
		_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: pauselessPodConfig("web")})
		if err == nil || !strings.Contains(err.Error(), "no IPs left") {
			t.Fatalf("RunPodSandbox: %v, want the ADD's error", err)
		}
		if got := listDir(t, dir); len(got) != 0 {
			t.Errorf("netns dir holds %v", got)
		}
		if ids, _ := e.ckpt.List(); len(ids) != 0 {
			t.Errorf("checkpoints left: %v", ids)
		}
		if recs := e.ds.store().List(store.KindSandbox); len(recs) != 0 {
			t.Errorf("index holds %d sandboxes", len(recs))
		}
		resp, err := e.ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
		if err != nil || len(resp.Items) != 0 {
			t.Errorf("listed: %v, %v", resp.GetItems(), err)
		}
		if n := e.plugin.callPrefixCount("TearDownPod"); n != 1 {
			t.Errorf("%d DELs of the failed ADD, want 1", n)
		}
		// The retry starts afresh.
		e.plugin.mu.Lock()
		e.plugin.setUpErr = nil
		e.plugin.mu.Unlock()
		id := e.run(t, pauselessPodConfig("web"))
		if got := plState(t, e.ds, id); got != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("retry: %v, want READY", got)
		}
	})
	t.Run("ADD and the undo's DEL fail", func(t *testing.T) {
		e, dir := newPauselessEnv(t)
		e.plugin.setUpErr = errors.New("no IPs left")
		e.plugin.downErr = errors.New("plugin down")
		if _, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: pauselessPodConfig("web")}); err == nil {
			t.Fatal("RunPodSandbox succeeded")
		}
		ids, err := e.ckpt.List()
		if err != nil || len(ids) != 1 {
			t.Fatalf("checkpoints %v (%v), want the failed sandbox's kept", ids, err)
		}
		id := ids[0]
		cp, err := e.ckpt.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if cp.NetworkReady() || cp.Pauseless == nil || !cp.Pauseless.Stopped {
			t.Errorf("kept checkpoint: ready %v pauseless %+v; want pending and stopped", cp.NetworkReady(), cp.Pauseless)
		}
		if got := listDir(t, dir); !slices.Equal(got, plFiles(cp)) || len(got) != 4 {
			t.Errorf("netns dir holds %v, want the kept sandbox's %v", got, plFiles(cp))
		}
		if got := plState(t, e.ds, id); got != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Errorf("kept sandbox: %v, want NOTREADY", got)
		}
		// kubelet's clean-up, once the plugin works.
		e.plugin.mu.Lock()
		e.plugin.downErr, e.plugin.setUpErr = nil, nil
		e.plugin.mu.Unlock()
		if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
		if got := listDir(t, dir); len(got) != 0 {
			t.Errorf("netns dir holds %v after Remove", got)
		}
		if ids, _ := e.ckpt.List(); len(ids) != 0 {
			t.Errorf("checkpoints after Remove: %v", ids)
		}
	})
}

// A checkpoint that cannot be written fails RunPodSandbox before the ADD,
// and the namespaces made for it go.
func TestPauselessCheckpointWriteFails(t *testing.T) {
	e, dir := newPauselessEnv(t)
	ckptDir := e.ckpt.Dir()
	if err := os.RemoveAll(ckptDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ckptDir, nil, 0o600); err != nil { // not a directory
		t.Fatal(err)
	}
	if _, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: pauselessPodConfig("web")}); err == nil {
		t.Fatal("RunPodSandbox succeeded without its checkpoint")
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Errorf("netns dir holds %v", got)
	}
	if n := e.plugin.callPrefixCount("SetUpPod"); n != 0 {
		t.Errorf("%d ADDs for a sandbox with no checkpoint", n)
	}
	if recs := e.ds.store().List(store.KindSandbox); len(recs) != 0 {
		t.Errorf("index holds %d sandboxes", len(recs))
	}
}

// A Stop whose DEL fails still stops the sandbox, keeps its files (the
// DEL needs the netns) and reports the failure; the next Stop retries.
func TestPauselessStopWithFailingDEL(t *testing.T) {
	e, dir := newPauselessEnv(t)
	id := e.run(t, pauselessPodConfig("web"))
	files := listDir(t, dir)
	e.plugin.mu.Lock()
	e.plugin.downErr = errors.New("plugin down")
	e.plugin.mu.Unlock()
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err == nil {
		t.Fatal("Stop with a failing DEL succeeded")
	}
	if got := plState(t, e.ds, id); got != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("after the failed Stop: %v, want NOTREADY", got)
	}
	if got := listDir(t, dir); !slices.Equal(got, files) {
		t.Errorf("netns dir holds %v, want %v kept for the retry", got, files)
	}
	e.plugin.mu.Lock()
	e.plugin.downErr = nil
	e.plugin.mu.Unlock()
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	e.plugin.mu.Lock()
	atDown := e.plugin.netnsAtDown
	e.plugin.mu.Unlock()
	if atDown != filepath.Join(dir, files[1]) {
		t.Errorf("the retried DEL got netns %q, want %s", atDown, filepath.Join(dir, files[1]))
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Errorf("netns dir holds %v after the retried Stop", got)
	}
}

// A netshim restarted over the same checkpoints and --netns-dir lists its
// pause-less sandboxes as they are: READY with their IP while their
// namespaces exist, NOTREADY when stopped or when the namespaces are gone
// (a reboot). The start-up sweep keeps every file of a live sandbox and
// removes the others.
func TestPauselessSandboxesAfterRestart(t *testing.T) {
	e, dir := newPauselessEnv(t)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	ready := e.run(t, pauselessPodConfig("ready"))
	stopped := e.run(t, pauselessPodConfig("stopped"))
	gone := e.run(t, pauselessPodConfig("gone"))
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: stopped}); err != nil {
		t.Fatal(err)
	}
	readyCP, err := e.ckpt.Get(ready)
	if err != nil {
		t.Fatal(err)
	}
	goneCP, err := e.ckpt.Get(gone)
	if err != nil {
		t.Fatal(err)
	}
	pinner := podns.NewPinner(dir)
	for _, f := range pauselessFiles(goneCP) {
		if err := pinner.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	// Strays: a pod's worth of files no checkpoint names, and a mount
	// point a crash left.
	if _, err := pinner.Pin("pod-stray", podns.Net, podns.IPC, podns.UTS); err != nil {
		t.Fatal(err)
	}
	if _, err := pinner.MountShm("pod-stray", 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pod-half.uts"), nil, 0o444); err != nil {
		t.Fatal(err)
	}

	ds, plugin := e.restartWith(t, func(c *Config) { c.SandboxNetNS, c.NetNSDir = SandboxNetNSPauseless, dir })
	if got, want := listDir(t, dir), plFiles(readyCP); !slices.Equal(got, want) {
		t.Errorf("after start-up the netns dir holds %v, want only the live sandbox's %v", got, want)
	}
	for id, want := range map[string]runtimeapi.PodSandboxState{
		ready:   runtimeapi.PodSandboxState_SANDBOX_READY,
		stopped: runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
		gone:    runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
	} {
		if got := plState(t, ds, id); got != want {
			t.Errorf("sandbox %s: %v, want %v", id, got, want)
		}
	}
	st, err := ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: ready})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.Network.GetIp() != readyCP.IPs[0] || st.Status.Metadata.Name != "ready" || st.Status.Labels["app"] != "ready" {
		t.Errorf("restored status %v, want IP %s and the CRI metadata", st.Status, readyCP.IPs[0])
	}
	if got, err := ds.PodNetNS(context.Background(), ready); err != nil || got != readyCP.NetNS {
		t.Errorf("PodNetNS after restart = %q, %v", got, err)
	}

	// The live one takes containers; the one whose namespaces are gone
	// does not, and the start-up teardown frees its IP.
	cfg := ctrConfig("app")
	if _, err := ds.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: ready, Config: cfg, SandboxConfig: pauselessPodConfig("ready")}); err != nil {
		t.Errorf("CreateContainer in the restored sandbox: %v", err)
	}
	if _, err := ds.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: gone, Config: cfg, SandboxConfig: pauselessPodConfig("gone")}); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("CreateContainer in a sandbox whose namespaces are gone: %v, want FailedPrecondition", err)
	}
	testutil.Eventually(t, "the start-up teardown of the sandbox whose namespaces are gone", func() bool {
		return plugin.callPrefixCount("TearDownPod "+gone) == 1
	})
	if n := plugin.callPrefixCount("TearDownPod " + ready); n != 0 {
		t.Errorf("the start-up teardown DELed the live sandbox %d times", n)
	}
	for _, id := range []string{ready, stopped, gone} {
		if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Errorf("netns dir holds %v after removing every sandbox", got)
	}
	if ids, _ := e.ckpt.List(); len(ids) != 0 {
		t.Errorf("checkpoints after removing every sandbox: %v", ids)
	}
}

// netshim killed during a pause-less sandbox's ADD: the next one lists it
// NOTREADY (its namespaces exist, its setup never completed), refuses a
// retry of the same attempt, tears the ADD down and releases the files
// at start-up, and kubelet's Stop and Remove leave nothing.
func TestPauselessKilledDuringAddIsNeverReady(t *testing.T) {
	e, dir := newPauselessEnv(t)
	e.plugin.setUpGate = make(chan struct{})
	cfg := pauselessPodConfig("slow")
	done := make(chan error, 1)
	go func() {
		_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		done <- err
	}()
	testutil.Eventually(t, "the ADD to start", func() bool { return e.plugin.held() == 1 })
	ids, err := e.ckpt.List()
	if err != nil || len(ids) != 1 {
		t.Fatalf("checkpoints during the ADD: %v, %v", ids, err)
	}
	id := ids[0]
	cp, err := e.ckpt.Get(id)
	if err != nil || cp.Setup != checkpoint.SetupPending || cp.Pauseless == nil {
		t.Fatalf("checkpoint during the ADD: %+v, %v; want a pending pause-less one", cp, err)
	}
	if got := listDir(t, dir); !slices.Equal(got, plFiles(cp)) {
		t.Fatalf("netns dir during the ADD: %v, want %v", got, plFiles(cp))
	}

	// "SIGKILL": a new netshim on the same state.
	ds, plugin := e.restartWith(t, func(c *Config) { c.SandboxNetNS, c.NetNSDir = SandboxNetNSPauseless, dir })
	if got := plState(t, ds, id); got != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("after restart: %v, want NOTREADY", got)
	}
	if _, err := ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg}); codeOf(err) != codes.AlreadyExists {
		t.Errorf("retried RunPodSandbox: %v, want AlreadyExists", err)
	}
	testutil.Eventually(t, "the start-up teardown to release the ADD and the files", func() bool {
		return plugin.callCount("TearDownPod "+id) == 1 && len(listDir(t, dir)) == 0
	})
	if _, err := ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := e.ckpt.List(); len(ids) != 0 {
		t.Errorf("checkpoints left: %v", ids)
	}
	if listed := plSandbox(t, ds, id); listed != nil {
		t.Errorf("listed after Remove: %v", listed)
	}

	// The killed daemon's call ends (its ADD failing) without bringing
	// anything back.
	e.plugin.mu.Lock()
	e.plugin.setUpErr = errors.New("killed")
	e.plugin.mu.Unlock()
	close(e.plugin.setUpGate)
	if err := <-done; err == nil {
		t.Error("the interrupted RunPodSandbox succeeded")
	}
	if ids, _ := e.ckpt.List(); len(ids) != 0 || len(listDir(t, dir)) != 0 {
		t.Errorf("after the old call's undo: checkpoints %v, files %v", ids, listDir(t, dir))
	}
}

// A Docker listing knows nothing of a pause-less sandbox: the resync after
// an engine restart, or any full listing, must not drop it.
func TestPauselessSandboxSurvivesDockerResync(t *testing.T) {
	e, _ := newPauselessEnv(t)
	id := e.run(t, pauselessPodConfig("web"))
	lists := e.docker.Count("ContainerList")
	e.docker.SetDown(true)
	testutil.Eventually(t, "the index to notice the engine is down", func() bool { r, _ := e.ds.index.Health(); return !r })
	e.docker.SetDown(false)
	testutil.Eventually(t, "the index resynced", func() bool {
		r, _ := e.ds.index.Health()
		return r && e.docker.Count("ContainerList") > lists
	})
	if got := plState(t, e.ds, id); got != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("after a resync: %v, want READY", got)
	}
	// A listing the store applies directly, with nothing in it.
	e.ds.store().Replace(nil, e.ds.store().Generation())
	if got := plState(t, e.ds, id); got != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("after an empty listing: %v, want READY", got)
	}
}

// A pause-less sandbox gives the events of a sandbox with an infra
// container (kubelet's evented PLEG follows pods by them): CREATED, then
// STARTED once READY, whenever the events loop looks at it during its
// setup (several sandboxes: the loop runs alongside RunPodSandbox).
func TestPauselessSandboxEvents(t *testing.T) {
	e, _ := newPauselessEnv(t)
	c := serveCRI(t, e.ds)
	ev := subscribeEvents(t, c)
	ctx := context.Background()

	var sb string
	for i := range 20 {
		before := time.Now()
		run, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pauselessPodConfig(fmt.Sprintf("web-%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		sb = run.PodSandboxId
		ev.expect(t, sb, evCreated, before)
		started := ev.expect(t, sb, evStarted, before)
		if st := started.PodSandboxStatus; st.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Network.GetIp() == "" {
			t.Errorf("sandbox STARTED before it is ready with an IP: %v", st)
		}
	}

	before := time.Now()
	if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	if got := ev.expect(t, sb, evStopped, before); got.PodSandboxStatus.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("sandbox STOPPED carries %v", got.PodSandboxStatus)
	}
	before = time.Now()
	if _, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	if got := ev.expect(t, sb, evDeleted, before); got.PodSandboxStatus.Id != sb || got.PodSandboxStatus.Metadata.GetUid() != "uid-web-19" {
		t.Errorf("sandbox DELETED carries %v", got.PodSandboxStatus)
	}
	settleEvents(t, e.ds)
	select {
	case extra := <-ev.events:
		t.Errorf("unexpected %s event for %.12s", extra.ContainerEventType, extra.ContainerId)
	default:
	}
}

// TestPauselessFilesGoneIsNotReady: a pause-less sandbox whose pinned
// files are unmounted behind netshim's back, while netshim runs, is
// NOTREADY at the next list or status (not only after a restart), and a
// new container of it is refused; the other sandbox stays READY.
func TestPauselessFilesGoneIsNotReady(t *testing.T) {
	for _, kind := range []string{"net", "ipc", "uts"} {
		t.Run(kind, func(t *testing.T) {
			e, _ := newPauselessEnv(t)
			id := e.run(t, pauselessPodConfig("gone-"+kind))
			other := e.run(t, pauselessPodConfig("kept-"+kind))
			if s := plState(t, e.ds, id); s != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Fatalf("sandbox %s, want READY before its file goes", s)
			}
			cp := e.ds.getCheckpoint(id)
			path := map[string]string{"net": cp.NetNS, "ipc": cp.Pauseless.IPC, "uts": cp.Pauseless.UTS}[kind]
			if err := podns.NewPinner(filepath.Dir(path)).Remove(path); err != nil {
				t.Fatal(err)
			}
			if s := plState(t, e.ds, id); s != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
				t.Errorf("sandbox %s after its %s file went, want NOTREADY", s, kind)
			}
			if s := plState(t, e.ds, other); s != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Errorf("the other sandbox %s, want READY", s)
			}
		})
	}
}

// TestPauselessSurvivesANewNetnsDir: netshim restarted with another
// --netns-dir still serves the pods made in the old one (whose directory
// holds its key): they stay READY, a new container's marker is signed
// with the old directory's key (the one the wrapper will check), and
// Stop and Remove remove the old files: nothing strands, nothing leaks.
func TestPauselessSurvivesANewNetnsDir(t *testing.T) {
	e, oldDir := newPauselessEnv(t)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	cfg := pauselessPodConfig("moved")
	id := e.run(t, cfg)
	newDir := filepath.Join(t.TempDir(), "netns2")
	ds, _ := e.restartWith(t, func(c *Config) { c.SandboxNetNS, c.NetNSDir = SandboxNetNSPauseless, newDir })
	if s := plState(t, ds, id); s != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandbox %s after the restart with a new --netns-dir, want READY", s)
	}
	oldKey, err := podns.ReadKey(oldDir)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ds.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: ctrConfig("app"), SandboxConfig: cfg})
	if err != nil {
		t.Fatalf("CreateContainer in a pod of the old --netns-dir: %v", err)
	}
	c, err := e.docker.ContainerInspect(context.Background(), resp.ContainerId)
	if err != nil {
		t.Fatal(err)
	}
	cp := ds.getCheckpoint(id)
	want := (podns.Paths{podns.Net: cp.NetNS, podns.IPC: cp.Pauseless.IPC, podns.UTS: cp.Pauseless.UTS}).Env(oldKey)
	if !slices.Contains(c.Config.Env, want) {
		t.Errorf("env %q lacks the marker signed with the old directory's key %q", c.Config.Env, want)
	}
	if _, err := ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if left := listDir(t, oldDir); len(left) != 0 {
		t.Errorf("old netns dir holds %q after the pod was removed", left)
	}
}

// With --sandbox-netns=auto and the wrapper, each pod gets the fastest
// mode it allows; its checkpoint, its verbose status and the
// netshim_sandbox_modes counts say which and why.
func TestAutoModePerPodRecorded(t *testing.T) {
	e, _ := newPinnedEnv(t, SandboxNetNSAuto, true)
	ctx := context.Background()
	shared := podConfig("shared") // no namespace options: PID namespace POD
	for _, tc := range []struct {
		cfg        *runtimeapi.PodSandboxConfig
		mode, why  string
		detailWord string
	}{
		{pauselessPodConfig("fast"), SandboxNetNSPauseless, reasonNoPauseNeeded, "no pause container"},
		{shared, SandboxNetNSPinned, reasonSharedPID, "PID namespace"},
	} {
		resp, err := e.ds.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: tc.cfg})
		if err != nil {
			t.Fatalf("%s: %v", tc.cfg.Metadata.Name, err)
		}
		id := resp.PodSandboxId
		if cp := e.ds.getCheckpoint(id); cp == nil || cp.Mode != tc.mode || cp.ModeReason != tc.why {
			t.Errorf("%s: checkpoint %+v, want mode %s reason %s", tc.cfg.Metadata.Name, cp, tc.mode, tc.why)
		}
		st, err := e.ds.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Mode sandboxModeInfo `json:"sandboxMode"`
		}
		if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
			t.Fatalf("verbose info: %v\n%s", err, st.Info["info"])
		}
		if info.Mode.Mode != tc.mode || info.Mode.Reason != tc.why || !strings.Contains(info.Mode.Detail, tc.detailWord) {
			t.Errorf("%s: verbose sandboxMode %+v, want %s/%s saying %q", tc.cfg.Metadata.Name, info.Mode, tc.mode, tc.why, tc.detailWord)
		}
	}
	want := map[metrics.SandboxMode]int{{Mode: SandboxNetNSPauseless, Reason: reasonNoPauseNeeded}: 1, {Mode: SandboxNetNSPinned, Reason: reasonSharedPID}: 1}
	if got := e.ds.countByMode(); !maps.Equal(got, want) {
		t.Errorf("countByMode = %v, want %v", got, want)
	}
	if got := e.ds.SandboxModeCounts(); !maps.Equal(got, want) {
		t.Errorf("SandboxModeCounts = %v, want %v", got, want)
	}
	st, err := e.ds.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Info["sandboxModes"], `{"pauseless/no-pause-needed":1,"pinned/shared-pid-namespace":1}`; got != want {
		t.Errorf("Status info sandboxModes = %s, want %s", got, want)
	}
}

// A checkpoint written before the mode was recorded: the mode comes from
// what the sandbox has, the reason says it was not recorded.
func TestSandboxModeOfUnrecorded(t *testing.T) {
	e, _ := newPinnedEnv(t, SandboxNetNSAuto, true)
	for _, tc := range []struct {
		cp   *checkpoint.PodSandbox
		want string
	}{
		{&checkpoint.PodSandbox{SandboxID: "a", Pauseless: &checkpoint.Pauseless{}}, SandboxNetNSPauseless},
		{&checkpoint.PodSandbox{SandboxID: "b", NetNS: "/run/netshim/netns/pod-b"}, SandboxNetNSPinned},
		{&checkpoint.PodSandbox{SandboxID: "c"}, SandboxNetNSDocker},
		{&checkpoint.PodSandbox{SandboxID: "d", Mode: SandboxNetNSPinned}, SandboxNetNSPinned},
	} {
		mode, why := e.ds.sandboxModeOf(nil, tc.cp)
		if mode != tc.want || why != reasonUnrecorded {
			t.Errorf("%s: %s/%s, want %s/%s", tc.cp.SandboxID, mode, why, tc.want, reasonUnrecorded)
		}
	}
}
