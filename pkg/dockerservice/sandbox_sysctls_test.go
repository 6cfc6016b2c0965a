package dockerservice

import (
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/podns"
)

// sysctlWrite is one call of the sysctl writer, and what existed then.
type sysctlWrite struct {
	paths   podns.Paths
	sysctls map[string]string
	// pinned says every path was a pinned namespace of its kind;
	// creates counts the Docker creates made before the call.
	pinned  bool
	creates int
}

// sysctlWriter stands in for podns.WriteSysctls: it records each call,
// among the network plugin's calls too ("WriteSysctls", so that the
// order against "SetUpPod" shows), and fails with err when set.
type sysctlWriter struct {
	mu    sync.Mutex
	calls []sysctlWrite
	err   error
}

func watchSysctls(e *testEnv) *sysctlWriter {
	w := &sysctlWriter{}
	e.ds.pins.writeSysctls = func(paths podns.Paths, sysctls map[string]string) error {
		e.plugin.record("WriteSysctls")
		pinned := true
		for k, p := range paths {
			pinned = pinned && podns.Verify(p, k) == nil
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.calls = append(w.calls, sysctlWrite{paths: maps.Clone(paths), sysctls: maps.Clone(sysctls), pinned: pinned, creates: e.docker.Count("ContainerCreate")})
		return w.err
	}
	return w
}

func (w *sysctlWriter) snapshot() []sysctlWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

// podSysctls are a pod's sysctls whose order against the ADD matters:
// eth0 inherits net.ipv4.conf.default.* only if it is written before the
// ADD makes it, and all.disable_ipv6 written after the ADD removes the
// pod's IPv6 address. The IPC one's order does not matter.
func podSysctls() map[string]string {
	return map[string]string{
		"net.ipv4.conf.default.rp_filter": "2",
		"net.ipv6.conf.all.disable_ipv6":  "1",
		"kernel.shm_rmid_forced":          "1",
	}
}

func sysctlPodConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := pauselessPodConfig(name)
	cfg.Linux.Sysctls = podSysctls()
	return cfg
}

func (e *testEnv) pluginCalls() []string {
	e.plugin.mu.Lock()
	defer e.plugin.mu.Unlock()
	return slices.Clone(e.plugin.calls)
}

// before says a call starting with first was made, and before any
// starting with then.
func before(calls []string, first, then string) bool {
	i := slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, first) })
	j := slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, then) })
	return i >= 0 && (j < 0 || i < j)
}

// In every mode the pod's sysctls are in its namespaces before the CNI
// ADD: runc writes them as the pause container starts (docker mode),
// netshim writes them into the pinned namespaces before anything runs in
// them (pinned: net.* only, the IPC ones stay the pause container's;
// pause-less: all, and the containers get none).
func TestPodSysctlsBeforeTheADD(t *testing.T) {
	for _, mode := range []string{SandboxNetNSDocker, SandboxNetNSPinned, SandboxNetNSPauseless} {
		t.Run(mode, func(t *testing.T) {
			var e *testEnv
			if mode == SandboxNetNSDocker {
				e = newTestEnv(t)
			} else {
				requireRoot(t)
				e, _ = newPinnedEnv(t, mode, true)
			}
			w := watchSysctls(e)
			e.docker.Do(func(s *fakedocker.State) { s.OnStart = func(string) { e.plugin.record("ContainerStart") } })
			id := e.run(t, sysctlPodConfig("web"))
			cp, err := e.ckpt.Get(id)
			if err != nil {
				t.Fatal(err)
			}
			calls, writes := e.pluginCalls(), w.snapshot()

			switch mode {
			case SandboxNetNSDocker:
				if len(writes) != 0 {
					t.Errorf("netshim wrote sysctls %+v: runc writes them in the docker mode", writes)
				}
				if !before(calls, "ContainerStart", "SetUpPod") {
					t.Errorf("calls %q: the pause container, which runc writes the sysctls in as it starts, did not start before the ADD", calls)
				}
				if hc := e.dockerHostConfig(t, id); !maps.Equal(hc.Sysctls, podSysctls()) {
					t.Errorf("pause container's sysctls %v, want the pod's %v", hc.Sysctls, podSysctls())
				}
				return
			case SandboxNetNSPinned:
				want := sysctlWrite{paths: podns.Paths{podns.Net: cp.NetNS}, sysctls: podSysctls(), pinned: true}
				if len(writes) != 1 || !sameWrite(writes[0], want) {
					t.Fatalf("sysctl writes %+v, want one %+v before any container", writes, want)
				}
				// runc would write the net.* ones again as the pause
				// container starts, along with the ADD.
				if hc := e.dockerHostConfig(t, id); !maps.Equal(hc.Sysctls, map[string]string{"kernel.shm_rmid_forced": "1"}) {
					t.Errorf("pause container's sysctls %v, want only the IPC one", hc.Sysctls)
				}
			case SandboxNetNSPauseless:
				pl := cp.Pauseless
				want := sysctlWrite{paths: podns.Paths{podns.Net: cp.NetNS, podns.IPC: pl.IPC, podns.UTS: pl.UTS}, sysctls: podSysctls(), pinned: true}
				if len(writes) != 1 || !sameWrite(writes[0], want) {
					t.Fatalf("sysctl writes %+v, want one %+v", writes, want)
				}
				if !maps.Equal(pl.Sysctls, podSysctls()) {
					t.Errorf("checkpoint sysctls %v, want the pod's", pl.Sysctls)
				}
				e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
				pe := &podEnv{testEnv: e, sandboxID: id, sandbox: sysctlPodConfig("web")}
				if _, hc := pe.createInspect(t, ctrConfig("app")); len(hc.Sysctls) != 0 {
					t.Errorf("container sysctls %v: runc would write them again, after the ADD, at each start", hc.Sysctls)
				}
			}
			if !before(calls, "WriteSysctls", "SetUpPod") || !slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, "SetUpPod") }) {
				t.Errorf("calls %q: want WriteSysctls before the ADD", calls)
			}
		})
	}
}

func sameWrite(a, b sysctlWrite) bool {
	return maps.Equal(a.paths, b.paths) && maps.Equal(a.sysctls, b.sysctls) && a.pinned == b.pinned && a.creates == b.creates
}

func (e *testEnv) dockerHostConfig(t *testing.T, id string) *container.HostConfig {
	t.Helper()
	c, err := e.docker.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c.HostConfig
}

// A sysctl the kernel refuses fails RunPodSandbox with InvalidArgument and
// what to change, and leaves nothing: no netns file, container,
// checkpoint, ADD or listed sandbox. The same pod runs once it is fixed.
func TestPodSysctlRefusedUndoesSandbox(t *testing.T) {
	requireRoot(t)
	enoent := &podns.SysctlError{Name: "net.ipv4.conf.eth0.rp_filter", Value: "2", Kind: podns.Net, Err: &os.PathError{Op: "open", Path: "/proc/sys/net/ipv4/conf/eth0/rp_filter", Err: syscall.ENOENT}}
	for _, mode := range []string{SandboxNetNSPinned, SandboxNetNSPauseless} {
		for _, tc := range []struct {
			name     string
			err      error
			wantCode codes.Code
			want     []string // in the message
		}{
			{"no such sysctl before the ADD", enoent, codes.InvalidArgument, []string{"net.ipv4.conf.eth0.rp_filter", "net.ipv4.conf.default.*", "tuning"}},
			{"no such IPC sysctl", &podns.SysctlError{Name: "kernel.shm_nope", Kind: podns.IPC, Err: syscall.ENOENT}, codes.InvalidArgument, []string{"kernel.shm_nope", "ipc namespace"}},
			{"a value the kernel refuses", &podns.SysctlError{Name: "net.ipv4.ip_forward", Value: "yes", Kind: podns.Net, Err: syscall.EINVAL}, codes.InvalidArgument, []string{"net.ipv4.ip_forward", `"yes"`}},
			{"read-only", &podns.SysctlError{Name: "net.ipv4.x", Kind: podns.Net, Err: syscall.EACCES}, codes.InvalidArgument, []string{"net.ipv4.x", "read-only"}},
			{"not the pod's fault", errors.New("entering the pod's pinned net namespace: operation not permitted"), codes.Unknown, []string{"operation not permitted"}},
		} {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				e, dir := newPinnedEnv(t, mode, true)
				w := watchSysctls(e)
				w.err = tc.err
				_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: sysctlPodConfig("web")})
				if code := codeOf(err); code != tc.wantCode {
					t.Fatalf("RunPodSandbox = %v (%v), want %v", err, code, tc.wantCode)
				}
				for _, s := range tc.want {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				if !errors.Is(err, tc.err) {
					t.Errorf("error %q does not wrap the writer's", err)
				}
				if len(w.snapshot()) != 1 {
					t.Errorf("%d sysctl writes, want 1", len(w.snapshot()))
				}
				if files := listDir(t, dir); len(files) != 0 {
					t.Errorf("files left in the netns dir: %v", files)
				}
				if ids := e.docker.ContainerIDs(); len(ids) != 0 {
					t.Errorf("containers left: %v", ids)
				}
				if ids, _ := e.ckpt.List(); len(ids) != 0 {
					t.Errorf("checkpoints left: %v", ids)
				}
				if calls := e.pluginCalls(); slices.ContainsFunc(calls, func(c string) bool { return !strings.HasPrefix(c, "WriteSysctls") }) {
					t.Errorf("network calls %q: nothing was to be set up or torn down", calls)
				}
				list, err := e.ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
				if err != nil || len(list.Items) != 0 {
					t.Errorf("sandboxes listed: %v, %v", list.GetItems(), err)
				}
				e.ds.pins.pinMu.Lock()
				pinning := len(e.ds.pins.pinning)
				e.ds.pins.pinMu.Unlock()
				if pinning != 0 {
					t.Errorf("%d files still held from the start-up sweep", pinning)
				}

				w.mu.Lock()
				w.err = nil
				w.mu.Unlock()
				id := e.run(t, sysctlPodConfig("web"))
				if cp, err := e.ckpt.Get(id); err != nil || !cp.NetworkReady() {
					t.Errorf("the fixed pod's checkpoint %+v, %v: want it ready", cp, err)
				}
			})
		}
	}
}

// In the pinned and pause-less modes the engine's defaults for a network
// namespace of a container's own go into the pod's netns with the pod's
// sysctls, before the ADD; a pod's own value of one wins, in either name
// form. (The wrapper drops them from the containers' configs:
// podns.TestApplyToConfigDropsSysctlsOfPinnedNamespaces.)
func TestPodSysctlsWithEngineDefaults(t *testing.T) {
	requireRoot(t)
	defaults := map[string]string{"net.ipv4.ping_group_range": "0 2147483647", "net.ipv4.ip_unprivileged_port_start": "0"}
	for _, mode := range []string{SandboxNetNSPinned, SandboxNetNSPauseless} {
		t.Run(mode, func(t *testing.T) {
			e, _ := newPinnedEnv(t, mode, true)
			e.ds.pins.netSysctlDefaults = defaults
			w := watchSysctls(e)
			cfg := sysctlPodConfig("web")
			cfg.Linux.Sysctls["net/ipv4/ip_unprivileged_port_start"] = "1001"
			e.run(t, cfg)
			writes := w.snapshot()
			if len(writes) != 1 {
				t.Fatalf("sysctl writes %+v, want one", writes)
			}
			want := maps.Clone(cfg.Linux.Sysctls)
			want["net.ipv4.ping_group_range"] = "0 2147483647"
			if !maps.Equal(writes[0].sysctls, want) {
				t.Errorf("sysctls written %v, want %v: the pod's with the engine's defaults it does not set", writes[0].sysctls, want)
			}
		})
	}
}

func TestEngineNetSysctlDefaults(t *testing.T) {
	has := map[string]bool{"net.ipv4.ping_group_range": true}
	got := engineNetSysctlDefaults(func(name string) bool { return has[name] })
	if want := map[string]string{"net.ipv4.ping_group_range": "0 2147483647"}; !maps.Equal(got, want) {
		t.Errorf("defaults %v, want %v (only what the kernel has)", got, want)
	}
	if !hostHasSysctl("net.ipv4.ip_forward") || hostHasSysctl("net.ipv4.no_such_setting") || hostHasSysctl("net..x") {
		t.Errorf("hostHasSysctl: want true for net.ipv4.ip_forward only")
	}
	for _, tc := range []struct {
		name              string
		sysctls, defaults map[string]string
		want              map[string]string
	}{
		{name: "no defaults", sysctls: map[string]string{"a.b": "1"}, want: map[string]string{"a.b": "1"}},
		{name: "no pod sysctls", defaults: map[string]string{"net.x": "0"}, want: map[string]string{"net.x": "0"}},
		{name: "pod's value wins, slashed form", sysctls: map[string]string{"net/x": "5"}, defaults: map[string]string{"net.x": "0", "net.y": "1"}, want: map[string]string{"net/x": "5", "net.y": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := maps.Clone(tc.sysctls)
			if got := withDefaults(tc.sysctls, tc.defaults); !maps.Equal(got, tc.want) {
				t.Errorf("withDefaults = %v, want %v", got, tc.want)
			}
			if !maps.Equal(in, tc.sysctls) {
				t.Errorf("withDefaults changed its argument: %v", tc.sysctls)
			}
		})
	}
}
