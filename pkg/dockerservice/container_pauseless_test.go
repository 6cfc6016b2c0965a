package dockerservice

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/podns"
)

// pauselessPodEnv is a podEnv whose sandbox is pause-less, with its
// checkpoint.
type pauselessPodEnv struct {
	*podEnv
	cp *checkpoint.PodSandbox
}

func newPauselessPodEnv(t *testing.T) *pauselessPodEnv {
	t.Helper()
	e, _ := newPauselessEnv(t)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	cfg := pauselessPodConfig("web")
	cfg.LogDirectory = filepath.Join(t.TempDir(), "pods", "web")
	id := e.run(t, cfg)
	cp, err := e.ckpt.Get(id)
	if err != nil || cp.Pauseless == nil {
		t.Fatalf("checkpoint %+v, %v: want a pause-less one", cp, err)
	}
	return &pauselessPodEnv{podEnv: &podEnv{testEnv: e, sandboxID: id, sandbox: cfg}, cp: cp}
}

// withNamespaces is ctrConfig with the container's namespace options.
func withNamespaces(cfg *runtimeapi.ContainerConfig, ns *runtimeapi.NamespaceOption) *runtimeapi.ContainerConfig {
	cfg.Linux.SecurityContext.NamespaceOptions = ns
	return cfg
}

// A container of a pause-less sandbox is created under the wrapper, with
// Docker's namespaces of its own that the marker replaces by the pod's
// pinned ones, and with what a pause container would have given it, all
// from the checkpoint: no inspect of a sandbox container.
func TestCreateContainerInPauselessSandbox(t *testing.T) {
	e := newPauselessPodEnv(t)
	pl := e.cp.Pauseless
	e.docker.ResetCalls()
	config, hc := e.createInspect(t, ctrConfig("app"))

	if n := e.docker.Count("ContainerInspect " + e.sandboxID); n != 0 {
		t.Errorf("%d inspects of the sandbox, which has no container", n)
	}
	if hc.Runtime != OCIWrapperRuntime || hc.NetworkMode != "none" || hc.IpcMode != "private" || hc.UTSMode != "" || hc.PidMode != "" {
		t.Errorf("runtime %q network %q ipc %q uts %q pid %q; want %s, none, private, own, own",
			hc.Runtime, hc.NetworkMode, hc.IpcMode, hc.UTSMode, hc.PidMode, OCIWrapperRuntime)
	}
	marker := (podns.Paths{podns.Net: e.cp.NetNS, podns.IPC: pl.IPC, podns.UTS: pl.UTS}).Env(e.ds.pins.ociKey)
	var markers []string
	for _, kv := range config.Env {
		if podns.IsEnvEntry(kv) {
			markers = append(markers, kv)
		}
	}
	if !slices.Equal(markers, []string{marker}) {
		t.Errorf("marker env %q, want exactly %q", markers, marker)
	}
	if config.Hostname != "web" {
		t.Errorf("hostname %q, want the pod's", config.Hostname)
	}
	dns := e.sandbox.DnsConfig
	if !slices.Equal(hc.DNS, dns.Servers) || !slices.Equal(hc.DNSSearch, dns.Searches) || !slices.Equal(hc.DNSOptions, dns.Options) {
		t.Errorf("DNS %v %v %v, want %v", hc.DNS, hc.DNSSearch, hc.DNSOptions, dns)
	}
	if len(hc.Sysctls) != 0 {
		t.Errorf("sysctls %v: the pod's are in its namespaces already, written before the ADD", hc.Sysctls)
	}
	if hc.CgroupParent != "/kubepods/pod1" {
		t.Errorf("cgroup parent %q, want the pod's", hc.CgroupParent)
	}
	if shm := pl.Shm + ":/dev/shm"; !slices.Contains(hc.Binds, shm) {
		t.Errorf("binds %q lack the pod's /dev/shm %q", hc.Binds, shm)
	}
	for _, b := range hc.Binds {
		if strings.HasSuffix(b, ":/etc/resolv.conf") || strings.HasSuffix(b, ":/etc/hosts") {
			t.Errorf("bind %q: there is no infra container's file to share", b)
		}
	}

	// Listed in its pod, and started like any container.
	resp, err := e.ds.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: e.sandboxID}})
	if err != nil || len(resp.Containers) != 1 {
		t.Fatalf("containers of the sandbox: %v, %v", resp.GetContainers(), err)
	}
	e.start(t, resp.Containers[0].Id)
	if st := e.status(t, resp.Containers[0].Id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("state %v, want running", st.State)
	}
}

// The container's own namespace options, against a pause-less pod: what
// it shares with the pod comes through the marker, what it takes from the
// node does not.
func TestPauselessContainerNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ns    *runtimeapi.NamespaceOption
		check func(t *testing.T, e *pauselessPodEnv, config *container.Config, hc *container.HostConfig)
	}{
		// The pod has no pid namespace to share: its own, as kubelet asks
		// in a pod that does not share one (POD is also the zero value).
		{name: "pid POD", ns: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD},
			check: func(t *testing.T, e *pauselessPodEnv, config *container.Config, hc *container.HostConfig) {
				pl := e.cp.Pauseless
				if hc.PidMode != "" || hc.NetworkMode != "none" || hc.IpcMode != "private" {
					t.Errorf("pid %q network %q ipc %q, want own, none, private", hc.PidMode, hc.NetworkMode, hc.IpcMode)
				}
				if want := (podns.Paths{podns.Net: e.cp.NetNS, podns.IPC: pl.IPC, podns.UTS: pl.UTS}).Env(e.ds.pins.ociKey); !slices.Contains(config.Env, want) {
					t.Errorf("env %q lacks %q", config.Env, want)
				}
			}},
		{name: "pid NODE", ns: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE},
			check: func(t *testing.T, e *pauselessPodEnv, config *container.Config, hc *container.HostConfig) {
				if hc.PidMode != "host" || hc.NetworkMode != "none" {
					t.Errorf("pid %q network %q, want host and none", hc.PidMode, hc.NetworkMode)
				}
			}},
		{name: "network NODE", ns: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER},
			check: func(t *testing.T, e *pauselessPodEnv, config *container.Config, hc *container.HostConfig) {
				pl := e.cp.Pauseless
				if hc.NetworkMode != "host" || hc.UTSMode != "host" || hc.IpcMode != "private" {
					t.Errorf("network %q uts %q ipc %q, want host, host, private", hc.NetworkMode, hc.UTSMode, hc.IpcMode)
				}
				if want := (podns.Paths{podns.IPC: pl.IPC}).Env(e.ds.pins.ociKey); !slices.Contains(config.Env, want) {
					t.Errorf("env %q lacks %q", config.Env, want)
				}
				if config.Hostname != "" || hc.DNS != nil {
					t.Errorf("hostname %q DNS %v: the node's network keeps the node's", config.Hostname, hc.DNS)
				}
				if len(hc.Sysctls) != 0 {
					t.Errorf("sysctls %v, want none (the pod's IPC ones are in its namespace, and no network sysctl goes on the node's network)", hc.Sysctls)
				}
			}},
		{name: "IPC NODE", ns: &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER},
			check: func(t *testing.T, e *pauselessPodEnv, config *container.Config, hc *container.HostConfig) {
				pl := e.cp.Pauseless
				if hc.IpcMode != "host" || hc.NetworkMode != "none" {
					t.Errorf("ipc %q network %q, want host and none", hc.IpcMode, hc.NetworkMode)
				}
				if want := (podns.Paths{podns.Net: e.cp.NetNS, podns.UTS: pl.UTS}).Env(e.ds.pins.ociKey); !slices.Contains(config.Env, want) {
					t.Errorf("env %q lacks %q", config.Env, want)
				}
				if len(hc.Sysctls) != 0 {
					t.Errorf("sysctls %v, want none (the pod's network ones are in its netns, and no IPC sysctl goes in the node's IPC namespace)", hc.Sysctls)
				}
				if slices.ContainsFunc(hc.Binds, func(b string) bool { return strings.HasSuffix(b, ":/dev/shm") }) {
					t.Errorf("binds %q: the node's IPC namespace keeps its own /dev/shm", hc.Binds)
				}
			}},
		// Under the wrapper still: the marker, naming nothing, overrides
		// one the image's ENV may have.
		{name: "network and IPC NODE", ns: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER},
			check: func(t *testing.T, e *pauselessPodEnv, config *container.Config, hc *container.HostConfig) {
				if hc.Runtime != OCIWrapperRuntime || hc.NetworkMode != "host" || hc.IpcMode != "host" {
					t.Errorf("runtime %q network %q ipc %q, want %s, host, host", hc.Runtime, hc.NetworkMode, hc.IpcMode, OCIWrapperRuntime)
				}
				if want := podns.EnvKey + "="; !slices.Contains(config.Env, want) {
					t.Errorf("env %q lacks the empty marker %q", config.Env, want)
				}
				if len(hc.Sysctls) != 0 {
					t.Errorf("sysctls %v, want none in the node's namespaces", hc.Sysctls)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newPauselessPodEnv(t)
			c := e.dockerInspect(t, e.create(t, withNamespaces(ctrConfig("app"), tc.ns)))
			tc.check(t, e, c.Config, c.HostConfig)
		})
	}
}

// A container that mounts its own /dev/shm (an emptyDir of medium Memory)
// does not get the pod's bound over it.
func TestPauselessContainerOwnDevShm(t *testing.T) {
	e := newPauselessPodEnv(t)
	for i, dst := range []string{"/dev/shm", "/dev/shm/"} {
		cfg := ctrConfig(fmt.Sprintf("own-%d", i))
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: t.TempDir(), ContainerPath: dst}}
		_, hc := e.createInspect(t, cfg)
		if slices.Contains(hc.Binds, e.cp.Pauseless.Shm+":/dev/shm") {
			t.Errorf("mount at %q: binds %q still have the pod's /dev/shm", dst, hc.Binds)
		}
	}
}

// Containers are only created in a ready pause-less sandbox.
func TestCreateContainerInNotReadyPauselessSandbox(t *testing.T) {
	t.Run("stopped", func(t *testing.T) {
		e := newPauselessPodEnv(t)
		if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: e.sandboxID}); err != nil {
			t.Fatal(err)
		}
		e.docker.ResetCalls()
		if _, err := e.createErr(ctrConfig("app")); codeOf(err) != codes.FailedPrecondition {
			t.Errorf("CreateContainer after Stop: %v, want FailedPrecondition", err)
		}
		if n := e.docker.Count("ContainerCreate"); n != 0 {
			t.Errorf("%d creates", n)
		}
	})
	t.Run("namespaces gone", func(t *testing.T) {
		e := newPauselessPodEnv(t)
		if err := podns.NewPinner(filepath.Dir(e.cp.NetNS)).Remove(e.cp.NetNS); err != nil {
			t.Fatal(err)
		}
		e.docker.ResetCalls()
		_, err := e.createErr(ctrConfig("app"))
		if codeOf(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), e.cp.NetNS) {
			t.Errorf("CreateContainer without the pod's netns: %v, want FailedPrecondition naming it", err)
		}
		if n := e.docker.Count("ContainerCreate"); n != 0 {
			t.Errorf("%d creates", n)
		}
	})
}

// A pod without a hostname gets one for all its containers, the one a
// pause container would have had (Docker names a container without one
// by its short ID): given none, Docker would name each container by its
// own ID, and each would set that in the shared UTS namespace as it
// starts.
func TestPauselessPodWithoutHostname(t *testing.T) {
	e, _ := newPauselessEnv(t)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	cfg := pauselessPodConfig("web")
	cfg.Hostname = ""
	id := e.run(t, cfg)
	p := &podEnv{testEnv: e, sandboxID: id, sandbox: cfg}
	for _, name := range []string{"a", "b"} {
		config, _ := p.createInspect(t, ctrConfig(name))
		if config.Hostname != id[:12] {
			t.Errorf("container %s: hostname %q, want the pod's %q", name, config.Hostname, id[:12])
		}
	}
}
