package dockerservice

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/system"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
)

// fakeClock is the runtime catalog's clock in tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// runtimesEnv is a test env whose engine reports info, with the runtime
// catalog on a fake clock.
func runtimesEnv(t *testing.T, info system.Info) (*testEnv, *fakeClock) {
	t.Helper()
	e := newTestEnv(t)
	clk := newFakeClock()
	e.ds.engine.SetClock(clk.now)
	e.setInfo(info)
	return e, clk
}

func (e *testEnv) setInfo(info system.Info) {
	e.docker.Do(func(s *fakedocker.State) { s.Info = info })
}

func (e *testEnv) handlerNames(t *testing.T) []string {
	t.Helper()
	resp, err := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range resp.RuntimeHandlers {
		names = append(names, h.Name)
	}
	return names
}

// TestStatusRuntimeHandlersAreCached: kubelet polls Status every few
// seconds; docker info is read once, served for engine.RuntimesMaxAge, then
// refreshed in the background while the old answer is served.
func TestStatusRuntimeHandlersAreCached(t *testing.T) {
	e, clk := runtimesEnv(t, fakedocker.Docker29Info("6.1.0"))
	want := []string{"", "runc", "runc-alt"}
	for range 5 {
		if got := e.handlerNames(t); !slices.Equal(got, want) {
			t.Fatalf("handlers = %q, want %q", got, want)
		}
	}
	if n := e.docker.Count("Info"); n != 1 {
		t.Fatalf("%d docker info calls for 5 Status polls, want 1", n)
	}

	// A runtime is added; the cache ages; the next poll still answers
	// from it, and starts one refresh.
	info := fakedocker.Docker29Info("6.1.0")
	info.Runtimes["kata"] = system.RuntimeWithStatus{}
	e.setInfo(info)
	clk.advance(engine.RuntimesMaxAge - time.Second)
	if got := e.handlerNames(t); !slices.Equal(got, want) || e.docker.Count("Info") != 1 {
		t.Fatalf("within max age: handlers %q, %d info calls", got, e.docker.Count("Info"))
	}
	clk.advance(time.Second)
	e.handlerNames(t)
	testutil.Eventually(t, "the refreshed runtimes", func() bool {
		return slices.Equal(e.handlerNames(t), []string{"", "kata", "runc", "runc-alt"})
	})
	if n := e.docker.Count("Info"); n != 2 {
		t.Errorf("%d docker info calls, want 2", n)
	}
}

// TestStatusDoesNotWaitForAHungRefresh: once something is cached, Status
// answers from it even while docker info hangs.
func TestStatusDoesNotWaitForAHungRefresh(t *testing.T) {
	e, clk := runtimesEnv(t, fakedocker.Docker29Info("6.1.0"))
	e.handlerNames(t)
	gate := make(chan struct{})
	e.docker.Do(func(s *fakedocker.State) { s.InfoGate = gate })
	defer close(gate)
	clk.advance(engine.RuntimesMaxAge)
	e.handlerNames(t)
	testutil.Eventually(t, "the refresh to ask docker info", func() bool { return e.docker.Count("Info") == 2 })
	for range 3 {
		if got := e.handlerNames(t); !slices.Equal(got, []string{"", "runc", "runc-alt"}) {
			t.Fatalf("handlers = %q", got)
		}
	}
	if n := e.docker.Count("Info"); n != 2 {
		t.Errorf("%d docker info calls, want 2: one refresh at a time", n)
	}
}

// TestStatusRuntimeHandlersWhenInfoFails: the default handler is always
// listed; a failed read is retried after engine.RuntimesRetryAfter, not at every
// poll.
func TestStatusRuntimeHandlersWhenInfoFails(t *testing.T) {
	e, clk := runtimesEnv(t, fakedocker.Docker29Info("6.1.0"))
	e.docker.Do(func(s *fakedocker.State) { s.InfoErr = errors.New("engine busy") })
	for range 3 {
		if got := e.handlerNames(t); !slices.Equal(got, []string{""}) {
			t.Fatalf("handlers = %q, want only the default", got)
		}
	}
	if n := e.docker.Count("Info"); n != 1 {
		t.Fatalf("%d docker info calls, want 1 within the retry delay", n)
	}
	e.docker.Do(func(s *fakedocker.State) { s.InfoErr = nil })
	clk.advance(engine.RuntimesRetryAfter)
	if got := e.handlerNames(t); !slices.Equal(got, []string{"", "runc", "runc-alt"}) {
		t.Fatalf("after the retry delay: handlers = %q", got)
	}
}

// TestRunPodSandboxRuntimeHandler: a handler names a Docker runtime, which
// the sandbox and its containers run with, and which status and list
// report; an unknown one is refused before anything is made.
func TestRunPodSandboxRuntimeHandler(t *testing.T) {
	for _, tc := range []struct {
		handler     string
		wantRuntime string
		wantErr     []string
	}{
		{handler: "", wantRuntime: ""},
		{handler: "runc", wantRuntime: "runc"},
		{handler: "runc-alt", wantRuntime: "runc-alt"},
		{handler: "kata", wantErr: []string{`unknown runtime handler "kata"`, "runtimes runc, runc-alt", "daemon.json"}},
		{handler: "RUNC", wantErr: []string{`"RUNC"`}},
		{handler: strings.Repeat("x", 5000), wantErr: []string{"(5000 bytes)"}},
	} {
		t.Run(handlerTestName(tc.handler), func(t *testing.T) {
			e, _ := runtimesEnv(t, fakedocker.Docker29Info("6.1.0"))
			e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
			cfg := podConfig("rc")
			resp, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: tc.handler})
			if tc.wantErr != nil {
				if codeOf(err) != codes.InvalidArgument {
					t.Fatalf("got %v, want InvalidArgument", err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("message %q does not say %q", err, w)
					}
				}
				if n := e.docker.Count("ContainerCreate"); n != 0 {
					t.Errorf("%d containers created", n)
				}
				if ids, _ := e.ckpt.List(); len(ids) != 0 {
					t.Errorf("checkpoints left: %v", ids)
				}
				return
			}
			if err != nil {
				t.Fatalf("RunPodSandbox: %v", err)
			}
			id := resp.PodSandboxId
			pe := &podEnv{testEnv: e, sandboxID: id, sandbox: cfg}
			if got := pe.dockerInspect(t, id).HostConfig.Runtime; got != tc.wantRuntime {
				t.Errorf("sandbox runs with Docker runtime %q, want %q", got, tc.wantRuntime)
			}
			_, hc := pe.createInspect(t, ctrConfig("app"))
			if hc.Runtime != tc.wantRuntime {
				t.Errorf("container runs with Docker runtime %q, want %q", hc.Runtime, tc.wantRuntime)
			}
			st, err := e.ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			if err != nil {
				t.Fatal(err)
			}
			if st.Status.RuntimeHandler != tc.handler {
				t.Errorf("status says handler %q, want %q", st.Status.RuntimeHandler, tc.handler)
			}
			list, err := e.ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 1 || list.Items[0].RuntimeHandler != tc.handler {
				t.Errorf("list = %v, want one sandbox with handler %q", list.Items, tc.handler)
			}
		})
	}
}

// TestRunPodSandboxDefaultHandlerNeedsNoInfo: the default handler is
// Docker's default runtime; nothing needs to be looked up.
func TestRunPodSandboxDefaultHandlerNeedsNoInfo(t *testing.T) {
	e, _ := runtimesEnv(t, fakedocker.Docker29Info("6.1.0"))
	e.run(t, podConfig("plain"))
	if n := e.docker.Count("Info"); n != 0 {
		t.Errorf("%d docker info calls for the default handler", n)
	}
}

// TestRunPodSandboxSeesANewRuntimeAtOnce: a handler the cache does not
// know makes it read docker info again at once (a runtime added to
// daemon.json is usable without waiting), but a misspelt handler retried
// in a loop costs at most one read per engine.RuntimesForcedMinGap.
func TestRunPodSandboxSeesANewRuntimeAtOnce(t *testing.T) {
	e, clk := runtimesEnv(t, fakedocker.Docker29Info("6.1.0"))
	e.handlerNames(t)
	info := fakedocker.Docker29Info("6.1.0")
	info.Runtimes["runc-new"] = system.RuntimeWithStatus{}
	e.setInfo(info)
	clk.advance(engine.RuntimesForcedMinGap)
	if _, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("new"), RuntimeHandler: "runc-new"}); err != nil {
		t.Fatalf("RunPodSandbox with a runtime added since the last read: %v", err)
	}
	if n := e.docker.Count("Info"); n != 2 {
		t.Fatalf("%d docker info calls, want 2", n)
	}
	for range 3 {
		_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("typo"), RuntimeHandler: "runc-nwe"})
		if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "runc, runc-alt, runc-new") {
			t.Fatalf("got %v, want InvalidArgument listing the runtimes", err)
		}
	}
	if n := e.docker.Count("Info"); n != 2 {
		t.Errorf("%d docker info calls after 3 refused pods within the gap, want still 2", n)
	}
}

// TestRunPodSandboxRuntimesUnknown: with docker info failing, a named
// handler cannot be checked: Unavailable (retry), nothing made.
func TestRunPodSandboxRuntimesUnknown(t *testing.T) {
	e, _ := runtimesEnv(t, fakedocker.Docker29Info("6.1.0"))
	e.docker.Do(func(s *fakedocker.State) { s.InfoErr = errors.New("engine busy") })
	_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("x"), RuntimeHandler: "runc"})
	if codeOf(err) != codes.Unavailable || !strings.Contains(err.Error(), "engine busy") {
		t.Fatalf("got %v, want Unavailable with Docker's error", err)
	}
	if n := e.docker.Count("ContainerCreate"); n != 0 {
		t.Errorf("%d containers created", n)
	}
}

// TestCreateContainerRecursiveReadOnlyPerHandler: a recursive read-only
// mount is made with ReadOnlyForceRecursive when the pod's runtime can,
// and refused, naming why, when the kernel or the runtime is known not to.
func TestCreateContainerRecursiveReadOnlyPerHandler(t *testing.T) {
	for _, tc := range []struct {
		name    string
		info    system.Info
		api     string
		handler string
		wantErr string
	}{
		{name: "docker 29", info: fakedocker.Docker29Info("6.1.0"), api: "1.51", handler: "runc-alt"},
		{name: "default handler", info: fakedocker.Docker29Info("6.1.0"), api: "1.51"},
		{name: "API 1.41", info: fakedocker.Docker29Info("6.1.0"), api: "1.41", wantErr: "API 1.44"},
		{name: "old kernel", info: fakedocker.Docker29Info("5.10.0"), api: "1.51", wantErr: "older than 5.12"},
		{name: "runtime without rro", info: fakedocker.RuntimesInfo("6.1.0", "runc", map[string]string{"runc": fakedocker.RROFeatures, "old": `{"mountOptions":["ro"]}`}), api: "1.51", handler: "old", wantErr: `"rro"`},
		{name: "runtime without features", info: fakedocker.RuntimesInfo("6.1.0", "runc", map[string]string{"runc": ""}), api: "1.51", wantErr: "no OCI features"},
		// Unknown kernel: Docker decides at start.
		{name: "kernel unknown", info: fakedocker.Docker29Info(""), api: "1.51"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := runtimesEnv(t, tc.info)
			e.useEngineAPI(tc.api)
			e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
			cfg := podConfig("rro")
			resp, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: tc.handler})
			if err != nil {
				t.Fatal(err)
			}
			pe := &podEnv{testEnv: e, sandboxID: resp.PodSandboxId, sandbox: cfg}
			c := ctrConfig("rro")
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/src", ContainerPath: "/dst", Readonly: true, RecursiveReadOnly: true}}
			if tc.wantErr != "" {
				_, err := pe.createErr(c)
				if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v (code %v), want InvalidArgument mentioning %q", err, codeOf(err), tc.wantErr)
				}
				if n := e.docker.Count("ContainerCreate"); n != 1 {
					t.Errorf("%d creates, want only the sandbox's", n)
				}
				return
			}
			_, hc := pe.createInspect(t, c)
			if len(hc.Mounts) != 1 || hc.Mounts[0].BindOptions == nil || !hc.Mounts[0].BindOptions.ReadOnlyForceRecursive || hc.Runtime != tc.handler {
				t.Errorf("mounts %+v runtime %q", hc.Mounts, hc.Runtime)
			}
		})
	}
}

func handlerTestName(h string) string {
	if h == "" {
		return "default"
	}
	return h[:min(len(h), 10)]
}

// TestRunPodSandboxRefusesAMisregisteredWrapper: while the engine runs the
// wrapper as its default runtime, pods fail with FailedPrecondition naming
// the fix, nothing is made, and crictl info says why.
func TestRunPodSandboxRefusesAMisregisteredWrapper(t *testing.T) {
	e, _ := runtimesEnv(t, system.Info{DefaultRuntime: OCIWrapperRuntime, Runtimes: map[string]system.RuntimeWithStatus{
		"runc": {Runtime: system.Runtime{Path: "runc"}}, OCIWrapperRuntime: {Runtime: system.Runtime{Path: "/usr/bin/netshim-oci"}},
	}})
	e.handlerNames(t) // Status reads the runtimes, as kubelet's polls do
	for _, handler := range []string{"", "runc"} {
		_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("p"), RuntimeHandler: handler})
		if codeOf(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "default runtime") {
			t.Fatalf("handler %q: got %v, want FailedPrecondition naming the default runtime", handler, err)
		}
	}
	if n := e.docker.Count("ContainerCreate"); n != 0 {
		t.Errorf("%d containers created", n)
	}
	if mode, reason := e.ds.SandboxNetNSMode(context.Background()); mode != "unavailable" || !strings.Contains(reason, "netshim's OCI wrapper") {
		t.Errorf("sandbox netns mode %q (%s), want unavailable with the reason", mode, reason)
	}
}

// TestRunPodSandboxRefusesAMisregisteredWrapperUnread: a pinned pod that
// comes before any Status read the runtimes is refused all the same.
func TestRunPodSandboxRefusesAMisregisteredWrapperUnread(t *testing.T) {
	requireRoot(t)
	e, _ := newPinnedEnvDefault(t, SandboxNetNSPinned, true, OCIWrapperRuntime)
	_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("p")})
	if codeOf(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "default runtime") {
		t.Fatalf("got %v, want FailedPrecondition naming the default runtime", err)
	}
	if n := e.docker.Count("ContainerCreate"); n != 0 {
		t.Errorf("%d containers created", n)
	}
}
