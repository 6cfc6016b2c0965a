package dockerservice

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/system"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/podns"
)

// withWrapper gives the fake engine netshim's OCI wrapper (and runc).
func withWrapper(e *testEnv) {
	e.docker.Do(func(s *fakedocker.State) {
		s.Info.DefaultRuntime = "runc"
		s.Info.Runtimes = map[string]system.RuntimeWithStatus{"runc": {}, OCIWrapperRuntime: {}}
	})
}

// newPinnedEnv is a service in the mode, with a private --netns-dir,
// whose engine has the wrapper when wrapper is set.
func newPinnedEnv(t *testing.T, mode string, wrapper bool) (*testEnv, string) {
	t.Helper()
	return newPinnedEnvDefault(t, mode, wrapper, "runc")
}

// newPinnedEnvDefault is newPinnedEnv on an engine whose default runtime
// is defaultRuntime.
func newPinnedEnvDefault(t *testing.T, mode string, wrapper bool, defaultRuntime string) (*testEnv, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "netns")
	docker := newFakeDocker()
	docker.Do(func(s *fakedocker.State) {
		s.Info.Runtimes = map[string]system.RuntimeWithStatus{"runc": {}, defaultRuntime: {}}
		if wrapper {
			s.Info.Runtimes[OCIWrapperRuntime] = system.RuntimeWithStatus{}
		}
		s.Info.DefaultRuntime = defaultRuntime
	})
	e := newTestEnvWith(t, docker, func(c *Config) { c.SandboxNetNS, c.NetNSDir = mode, dir })
	// A failed test may leave mounts, which the temporary directory's
	// removal (registered earlier, so run later) cannot delete, and the
	// e2e leak audit later finds.
	t.Cleanup(func() {
		pinner := podns.NewPinner(dir)
		files, _ := pinner.List()
		for _, f := range files {
			_ = pinner.Remove(f)
		}
	})
	return e, dir
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("pinning a netns needs root")
	}
}

// listDir lists a netns dir but for the OCI wrapper's key, which stays.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Name() != podns.KeyFile {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestUsePinnedNetNS(t *testing.T) {
	for _, tc := range []struct {
		name           string
		mode           string
		wrapper        bool
		hostNetwork    bool
		handler        string
		defaultRuntime string
		want           bool
		wantCode       codes.Code
	}{
		{name: "auto, engine default is not runc", mode: SandboxNetNSAuto, wrapper: true, defaultRuntime: "runsc"},
		{name: "pinned, engine default is not runc: the operator's choice", mode: SandboxNetNSPinned, wrapper: true, defaultRuntime: "runsc", want: true},
		{name: "docker mode", mode: SandboxNetNSDocker, wrapper: true},
		{name: "auto with wrapper", mode: SandboxNetNSAuto, wrapper: true, want: true},
		{name: "auto without wrapper", mode: SandboxNetNSAuto},
		{name: "pinned with wrapper", mode: SandboxNetNSPinned, wrapper: true, want: true},
		{name: "pinned without wrapper", mode: SandboxNetNSPinned, wantCode: codes.FailedPrecondition},
		{name: "host network", mode: SandboxNetNSPinned, wrapper: true, hostNetwork: true},
		{name: "RuntimeClass handler", mode: SandboxNetNSPinned, wrapper: true, handler: "runc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := tc.defaultRuntime
			if def == "" {
				def = "runc"
			}
			e, _ := newPinnedEnvDefault(t, tc.mode, tc.wrapper, def)
			got, err := e.ds.usePinnedNetNS(context.Background(), tc.hostNetwork, tc.handler)
			if codeOf(err) != tc.wantCode {
				t.Fatalf("error = %v, want code %v", err, tc.wantCode)
			}
			if tc.wantCode == codes.FailedPrecondition && !strings.Contains(err.Error(), OCIWrapperRuntime) {
				t.Errorf("error %q does not say what to register", err)
			}
			if got != tc.want {
				t.Errorf("pinned = %v, want %v", got, tc.want)
			}
		})
	}
}

// The pinned mode end to end against the fake engine: the pause container
// runs under the wrapper with the marker, CNI gets the pinned netns at
// ADD and at DEL (after the container stopped), and Stop removes it.
func TestPinnedSandboxLifecycle(t *testing.T) {
	requireRoot(t)
	e, dir := newPinnedEnv(t, SandboxNetNSAuto, true)
	var startedWithNetnsReady bool
	e.docker.Do(func(s *fakedocker.State) {
		s.OnStart = func(id string) {
			cp, err := e.ckpt.Get(id)
			startedWithNetnsReady = err == nil && cp.NetNS != "" && podns.Verify(cp.NetNS, podns.Net) == nil
		}
	})
	id := e.run(t, podConfig("web"))
	if !startedWithNetnsReady {
		t.Error("the infra container started before its checkpoint named a pinned netns")
	}
	cp, err := e.ckpt.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(cp.NetNS) != dir || !cp.NetworkReady() {
		t.Fatalf("checkpoint netns %q (ready %v), want a file in %s", cp.NetNS, cp.NetworkReady(), dir)
	}
	c, err := e.docker.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.HostConfig.Runtime != OCIWrapperRuntime || c.HostConfig.NetworkMode != "none" {
		t.Errorf("runtime %q network %q, want %s and none", c.HostConfig.Runtime, c.HostConfig.NetworkMode, OCIWrapperRuntime)
	}
	if got := c.Config.Labels[labelNetNS]; got != cp.NetNS {
		t.Errorf("label %s = %q, want %s", labelNetNS, got, cp.NetNS)
	}
	// Signed with the key the wrapper reads: the one in --netns-dir.
	key, err := podns.ReadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := (podns.Paths{podns.Net: cp.NetNS}).Env(key); !slices.Contains(c.Config.Env, want) {
		t.Errorf("env %q lacks %q", c.Config.Env, want)
	}
	e.plugin.mu.Lock()
	atSetUp := e.plugin.netnsAtSetUp
	e.plugin.mu.Unlock()
	if atSetUp != cp.NetNS {
		t.Errorf("CNI ADD got netns %q, want the pinned %q", atSetUp, cp.NetNS)
	}

	// Stop: DEL with the pinned path, then the file goes.
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	e.plugin.mu.Lock()
	atDown := e.plugin.netnsAtDown
	e.plugin.mu.Unlock()
	if atDown != cp.NetNS {
		t.Errorf("CNI DEL got netns %q, want the pinned %q", atDown, cp.NetNS)
	}
	if files := listDir(t, dir); len(files) != 0 {
		t.Errorf("pinned netns files after Stop: %v", files)
	}
	for range 2 { // idempotent
		if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.ckpt.Get(id); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("checkpoint after Remove: %v", err)
	}
}

// Remove without Stop (kubelet's GC of a dead sandbox) tears down and
// removes the pinned netns too; a DEL that fails keeps it for the retry.
func TestPinnedNetnsKeptUntilTeardownSucceeds(t *testing.T) {
	requireRoot(t)
	e, dir := newPinnedEnv(t, SandboxNetNSPinned, true)
	id := e.run(t, podConfig("web"))
	e.plugin.mu.Lock()
	e.plugin.downErr = errors.New("plugin down")
	e.plugin.mu.Unlock()
	if _, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err == nil {
		t.Fatal("Remove with a failing DEL succeeded")
	}
	if files := listDir(t, dir); len(files) != 1 {
		t.Fatalf("pinned netns files after a failed DEL: %v, want it kept", files)
	}
	e.plugin.mu.Lock()
	e.plugin.downErr = nil
	e.plugin.mu.Unlock()
	if _, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	e.plugin.mu.Lock()
	atDown := e.plugin.netnsAtDown
	e.plugin.mu.Unlock()
	if !strings.HasPrefix(atDown, dir+"/") {
		t.Errorf("the retried DEL got netns %q, want the pinned one (the container is gone)", atDown)
	}
	if files := listDir(t, dir); len(files) != 0 {
		t.Errorf("pinned netns files after Remove: %v", files)
	}
}

// A RunPodSandbox whose container start or network setup fails leaves no
// netns, container or checkpoint, and tears down what the ADD took.
func TestPinnedRunFailuresUndoEverything(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name   string
		break_ func(e *testEnv)
	}{
		{"start fails", func(e *testEnv) {
			e.docker.Do(func(s *fakedocker.State) { s.StartErr = errors.New("OCI runtime create failed") })
		}},
		{"ADD fails", func(e *testEnv) { e.plugin.setUpErr = errors.New("no IPs left") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, dir := newPinnedEnv(t, SandboxNetNSPinned, true)
			tc.break_(e)
			_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("web")})
			if err == nil {
				t.Fatal("RunPodSandbox succeeded")
			}
			if files := listDir(t, dir); len(files) != 0 {
				t.Errorf("pinned netns files left: %v", files)
			}
			if ids := e.docker.ContainerIDs(); len(ids) != 0 {
				t.Errorf("containers left: %v", ids)
			}
			if ids, _ := e.ckpt.List(); len(ids) != 0 {
				t.Errorf("checkpoints left: %v", ids)
			}
			e.plugin.mu.Lock()
			calls := strings.Join(e.plugin.calls, ";")
			e.plugin.mu.Unlock()
			if !strings.Contains(calls, "TearDownPod") {
				t.Errorf("plugin calls %q: no teardown of the ADD", calls)
			}
		})
	}
}

// Without the wrapper: auto falls back to the docker mode, pinned refuses
// before anything is made.
func TestPinnedModeWithoutWrapper(t *testing.T) {
	e, dir := newPinnedEnv(t, SandboxNetNSAuto, false)
	id := e.run(t, podConfig("web"))
	c, err := e.docker.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.HostConfig.Runtime != "" || slices.ContainsFunc(c.Config.Env, podns.IsEnvEntry) {
		t.Errorf("auto without the wrapper: runtime %q env %q, want the docker mode", c.HostConfig.Runtime, c.Config.Env)
	}
	if files := listDir(t, dir); len(files) != 0 {
		t.Errorf("docker mode made netns files: %v", files)
	}

	e, dir = newPinnedEnv(t, SandboxNetNSPinned, false)
	_, err = e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("web")})
	if codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("pinned without the wrapper: %v, want FailedPrecondition", err)
	}
	if ids := e.docker.ContainerIDs(); len(ids) != 0 || len(listDir(t, dir)) != 0 {
		t.Errorf("a refused RunPodSandbox made containers %v or netns files %v", ids, listDir(t, dir))
	}
	// Registered later (SIGHUP): the next RunPodSandbox sees it, once
	// the forced re-read's minimum gap has passed.
	withWrapper(e)
	e.ds.engine.SetClock(func() time.Time { return time.Now().Add(2 * engine.RuntimesForcedMinGap) })
	if ok, err := e.ds.usePinnedNetNS(context.Background(), false, ""); err != nil || !ok {
		t.Errorf("after registering the wrapper: pinned %v, %v", ok, err)
	}
}

// Start-up removes the netns files no checkpoint names, and keeps the
// others.
func TestSweepPinnedNetNS(t *testing.T) {
	requireRoot(t)
	e, dir := newPinnedEnv(t, SandboxNetNSPinned, true)
	id := e.run(t, podConfig("web"))
	cp, err := e.ckpt.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	stray, err := podns.NewPinner(dir).Pin("pod-stray", podns.Net)
	if err != nil {
		t.Fatal(err)
	}
	half := filepath.Join(dir, "pod-half.net") // a mount point a crash left
	if err := os.WriteFile(half, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	ds, _ := e.restartWith(t, func(c *Config) { c.SandboxNetNS, c.NetNSDir = SandboxNetNSPinned, dir })
	got := listDir(t, dir)
	if len(got) != 1 || filepath.Join(dir, got[0]) != cp.NetNS {
		t.Errorf("after start-up: %v, want only the sandbox's %s (stray %s and %s removed)", got, cp.NetNS, stray[podns.Net], half)
	}
	if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Errorf("after Remove: %v", got)
	}
}

func TestWrapperIsNoRuntimeHandler(t *testing.T) {
	e, _ := newPinnedEnv(t, SandboxNetNSAuto, true)
	cfg := podConfig("web")
	_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: OCIWrapperRuntime})
	if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "internal") {
		t.Errorf("RunPodSandbox with handler %s: %v, want InvalidArgument", OCIWrapperRuntime, err)
	}
	st, err := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range st.RuntimeHandlers {
		if h.Name == OCIWrapperRuntime {
			t.Errorf("Status offers %s as a runtime handler", OCIWrapperRuntime)
		}
	}
	var m netnsMode
	if err := json.Unmarshal([]byte(st.Info["sandboxNetns"]), &m); err != nil || m.Mode != SandboxNetNSPauseless {
		t.Errorf("Status info sandboxNetns = %q (%v), want mode pauseless (auto with the wrapper)", st.Info["sandboxNetns"], err)
	}
	if st, _ := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{}); len(st.Info) != 0 {
		t.Errorf("non-verbose Status has info %v", st.Info)
	}
}

// A pinned sandbox whose checkpoint was damaged while netshim was down
// gets its netns back from its container's label: the sweep leaves the
// file, and Stop DELs in it and removes it. A file no sandbox names goes.
func TestPinnedNetnsOfDamagedCheckpoint(t *testing.T) {
	requireRoot(t)
	e, dir := newPinnedEnv(t, SandboxNetNSPinned, true)
	id := e.run(t, podConfig("web"))
	cp, err := e.ckpt.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.ckpt.Dir(), id+".json"), []byte(`{"checksum":"sha256:00","data":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(dir, "pod-stray.net")
	if err := os.WriteFile(stray, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	ds, plugin := e.restartWith(t, func(c *Config) { c.SandboxNetNS, c.NetNSDir = SandboxNetNSPinned, dir })
	if got := ds.getCheckpoint(id); got == nil || got.NetNS != cp.NetNS {
		t.Fatalf("rebuilt checkpoint %+v, want netns %s from the container's label", got, cp.NetNS)
	}
	if got := listDir(t, dir); len(got) != 1 || filepath.Join(dir, got[0]) != cp.NetNS {
		t.Errorf("after start-up: %v, want only %s", got, cp.NetNS)
	}
	if _, err := ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	plugin.mu.Lock()
	atDown := plugin.netnsAtDown
	plugin.mu.Unlock()
	if atDown != cp.NetNS {
		t.Errorf("DEL got netns %q, want %s", atDown, cp.NetNS)
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Errorf("after Stop: %v", got)
	}
}

// netshim killed between the infra container's create and its checkpoint:
// the container names the pinned netns in its label, so the start-up sweep
// leaves the file, and RemovePodSandbox of that sandbox removes it.
func TestPinnedNetnsOfSandboxWithoutCheckpoint(t *testing.T) {
	requireRoot(t)
	e, dir := newPinnedEnv(t, SandboxNetNSPinned, true)
	id := e.run(t, podConfig("web"))
	if err := os.Remove(filepath.Join(e.ckpt.Dir(), id+".json")); err != nil {
		t.Fatal(err)
	}
	ds, _ := e.restartWith(t, func(c *Config) { c.SandboxNetNS, c.NetNSDir = SandboxNetNSPinned, dir })
	if got := listDir(t, dir); len(got) != 1 {
		t.Fatalf("after start-up: %v, want the sandbox's file kept (its container names it)", got)
	}
	if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Errorf("after Remove: %v, want none", got)
	}
}
