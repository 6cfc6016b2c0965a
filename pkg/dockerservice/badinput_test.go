package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/system"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// This file sends every RPC of both CRI services malformed and hostile
// requests through a real gRPC server and client, so the codes are the
// ones kubelet sees, and checks that each is answered with the precise
// code, a message naming what is wrong, and no change anywhere.

// criClients talks to a DockerService served in-process over gRPC, with
// the interceptor and codec the daemon uses.
type criClients struct {
	rt  runtimeapi.RuntimeServiceClient
	img runtimeapi.ImageServiceClient
}

func serveCRI(t *testing.T, ds *DockerService) criClients {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(crirpc.UnaryInterceptor), grpc.ChainStreamInterceptor(crirpc.StreamInterceptor), grpc.ForceServerCodecV2(ds.Codec()))
	ds.Register(srv)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("gRPC server: %v", err)
		}
	})
	return criClients{rt: runtimeapi.NewRuntimeServiceClient(conn), img: runtimeapi.NewImageServiceClient(conn)}
}

// badInputFixture is a pod with containers, some IDs to misuse, and the
// clients.
type badInputFixture struct {
	*podEnv
	c criClients
	// created is a created, never started container; running a running one.
	created, running string
	// ambiguous is an ID prefix of at least two of the IDs netshim knows.
	ambiguous string
	// unknown is a well-formed ID nothing has.
	unknown string
	logRoot string
}

func newBadInputFixture(t *testing.T) *badInputFixture {
	t.Helper()
	e := newPodEnv(t)
	f := &badInputFixture{podEnv: e, unknown: strings.Repeat("0f", 32), logRoot: filepath.Dir(e.sandbox.LogDirectory)}
	// 17 IDs in 16 hex digits: two share their first digit.
	ids := []string{e.sandboxID}
	for i := range 16 {
		ids = append(ids, e.create(t, ctrConfig(fmt.Sprintf("c%d", i))))
	}
	f.created, f.running = ids[1], ids[2]
	e.start(t, f.running)
	seen := map[byte]bool{}
	for _, id := range ids {
		if seen[id[0]] {
			f.ambiguous = id[:1]
			break
		}
		seen[id[0]] = true
	}
	// Docker's root for ImageFsInfo (the fake has no filesystem of its
	// own) and its cgroup driver for RuntimeConfig.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "overlay2"), 0o700); err != nil {
		t.Fatal(err)
	}
	f.docker.Do(func(s *fakedocker.State) {
		s.Info = system.Info{DockerRootDir: root, Driver: "overlay2", CgroupDriver: "cgroupfs"}
	})
	f.quiesce(t)
	f.c = serveCRI(t, e.ds)
	return f
}

// worldState is everything a refused request must leave as it was.
type worldState struct {
	index       map[string]store.State
	checkpoints map[string]string
	logFiles    []string
	images      []string
	pluginCalls int
}

func (f *badInputFixture) snapshot(t *testing.T) worldState {
	t.Helper()
	w := worldState{index: map[string]store.State{}, checkpoints: map[string]string{}}
	for _, k := range []store.Kind{store.KindSandbox, store.KindContainer} {
		for _, r := range f.ds.store().List(k) {
			w.index[r.ID] = r.State
		}
	}
	entries, err := os.ReadDir(f.ckpt.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		data, err := os.ReadFile(filepath.Join(f.ckpt.Dir(), en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		w.checkpoints[en.Name()] = string(data)
	}
	err = filepath.WalkDir(f.logRoot, func(p string, _ os.DirEntry, err error) error {
		w.logFiles = append(w.logFiles, p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f.docker.Do(func(s *fakedocker.State) { w.images = slices.Sorted(maps.Keys(s.Images)) })
	f.plugin.mu.Lock()
	w.pluginCalls = len(f.plugin.calls)
	f.plugin.mu.Unlock()
	return w
}

// mutatingDockerCalls are the fake's calls that change Docker's state.
var mutatingDockerCalls = []string{"ContainerCreate", "ContainerStart", "ContainerStop", "ContainerRemove", "ContainerUpdate", "ContainerExecCreate", "ImagePull", "ImageRemove"}

func (f *badInputFixture) assertUnchanged(t *testing.T, before worldState, callsBefore int) {
	t.Helper()
	for _, c := range f.docker.Calls()[callsBefore:] {
		for _, m := range mutatingDockerCalls {
			if strings.HasPrefix(c, m) {
				t.Errorf("the request made Docker call %s", c)
			}
		}
	}
	after := f.snapshot(t)
	if !maps.Equal(before.index, after.index) {
		t.Errorf("index changed: %v -> %v", before.index, after.index)
	}
	if !maps.Equal(before.checkpoints, after.checkpoints) {
		t.Errorf("checkpoints changed: %v -> %v", slices.Collect(maps.Keys(before.checkpoints)), slices.Collect(maps.Keys(after.checkpoints)))
	}
	if !slices.Equal(before.logFiles, after.logFiles) {
		t.Errorf("log files changed: %v -> %v", before.logFiles, after.logFiles)
	}
	if !slices.Equal(before.images, after.images) {
		t.Errorf("images changed: %v -> %v", before.images, after.images)
	}
	if after.pluginCalls != before.pluginCalls {
		t.Errorf("the network plugin was called %d times", after.pluginCalls-before.pluginCalls)
	}
}

// badCase is one request and the answer it must get.
type badCase struct {
	name string
	// method is the RPC, for the check that every RPC is covered.
	method string
	call   func(ctx context.Context) error
	code   codes.Code
	// msg are parts the message must hold: the field or value at fault.
	msg []string
	// noDocker: the request must not reach Docker at all, not even to
	// read (a malformed ID).
	noDocker bool
}

// empty fails unless a list answer is empty: a hostile filter matches
// nothing.
func empty[T any](items []T, err error) error {
	if err != nil {
		return err
	}
	if len(items) != 0 {
		return fmt.Errorf("unexpected: %d items", len(items))
	}
	return nil
}

// recvErr is the error a server-streaming RPC answers with.
func recvErr[T any](s interface{ Recv() (T, error) }, err error) error {
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// streamEmpty returns a reader of a server stream to its end: it answers
// the error the stream ends with, or one if it sent any item.
func streamEmpty[R any](items func(R) int) func(s interface{ Recv() (R, error) }, err error) error {
	return func(s interface{ Recv() (R, error) }, err error) error {
		if err != nil {
			return err
		}
		n := 0
		for {
			r, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			n += items(r)
		}
		if n != 0 {
			return fmt.Errorf("unexpected: %d items", n)
		}
		return nil
	}
}

func (f *badInputFixture) cases() []badCase {
	rt, img := f.c.rt, f.c.img
	huge := strings.Repeat("x", dockerspec.MaxLabelBytes+1)
	var cs []badCase
	add := func(method, name string, code codes.Code, call func(context.Context) error, msg ...string) {
		cs = append(cs, badCase{name: name, method: method, call: call, code: code, msg: msg})
	}
	// malformedIDs are IDs that can name nothing: blank ones reach Docker's
	// client, which refuses them as invalid (Stop and Remove then answered
	// Unavailable), and a '/' would change the Docker API call's path.
	malformedIDs := []struct{ name, id, msg string }{
		{"blank id", " \t ", "only white space"},
		{"id with slash", "../images/busybox", "is not a"},
		{"id with space", f.unknown[:12] + " x", "is not a"},
	}
	// Each malformed ID is refused naming the field, without a Docker
	// call.
	addMalformed := func(method, field string, call func(ctx context.Context, id string) error) {
		for _, m := range malformedIDs {
			add(method, m.name, codes.InvalidArgument, func(ctx context.Context) error { return call(ctx, m.id) }, field, m.msg)
			cs[len(cs)-1].noDocker = true
		}
	}

	// Sandbox RPCs: IDs that are empty, unknown, of a container, ambiguous.
	sandboxIDs := []struct {
		name, id string
		code     codes.Code
		msg      []string
	}{
		{"empty id", "", codes.InvalidArgument, []string{"pod sandbox ID is required"}},
		{"container id", f.created, codes.NotFound, []string{f.created, "is a container"}},
		{"ambiguous prefix", f.ambiguous, codes.InvalidArgument, []string{fmt.Sprintf("%q", f.ambiguous), "more than one"}},
	}
	sandboxRPCs := map[string]func(ctx context.Context, id string) error{
		"StopPodSandbox": func(ctx context.Context, id string) error {
			_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		},
		"RemovePodSandbox": func(ctx context.Context, id string) error {
			_, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		},
		"PodSandboxStatus": func(ctx context.Context, id string) error {
			_, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			return err
		},
		"PodSandboxStats": func(ctx context.Context, id string) error {
			_, err := rt.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: id})
			return err
		},
		"PortForward": func(ctx context.Context, id string) error {
			_, err := rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: id, Port: []int32{80}})
			return err
		},
		"UpdatePodSandboxResources": func(ctx context.Context, id string) error {
			_, err := rt.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: id})
			return err
		},
		"CreateContainer": func(ctx context.Context, id string) error {
			_, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: id, Config: ctrConfig("bad"), SandboxConfig: f.sandbox})
			return err
		},
	}
	for _, method := range slices.Sorted(maps.Keys(sandboxRPCs)) {
		addMalformed(method, "pod_sandbox_id", sandboxRPCs[method])
	}
	for _, s := range sandboxIDs {
		add("StopPodSandbox", s.name, s.code, func(ctx context.Context) error {
			_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.id})
			return err
		}, s.msg...)
		add("RemovePodSandbox", s.name, s.code, func(ctx context.Context) error {
			_, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.id})
			return err
		}, s.msg...)
		add("PodSandboxStatus", s.name, s.code, func(ctx context.Context) error {
			_, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: s.id})
			return err
		}, s.msg...)
		add("PodSandboxStats", s.name, s.code, func(ctx context.Context) error {
			_, err := rt.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: s.id})
			return err
		}, s.msg...)
	}
	// Stop and Remove are idempotent: an unknown sandbox is already gone.
	add("StopPodSandbox", "unknown id", codes.OK, func(ctx context.Context) error {
		_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: f.unknown})
		return err
	})
	add("RemovePodSandbox", "unknown id", codes.OK, func(ctx context.Context) error {
		_, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: f.unknown})
		return err
	})
	add("PodSandboxStatus", "unknown id", codes.NotFound, func(ctx context.Context) error {
		_, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: f.unknown})
		return err
	}, f.unknown, "not found")
	add("PodSandboxStats", "unknown id", codes.NotFound, func(ctx context.Context) error {
		_, err := rt.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: f.unknown})
		return err
	}, f.unknown, "not found")
	add("ListPodSandboxStats", "unknown id, container id, unmatched selector", codes.OK, func(ctx context.Context) error {
		for _, filter := range []*runtimeapi.PodSandboxStatsFilter{
			{Id: f.unknown}, {Id: f.created}, {LabelSelector: map[string]string{"no": "such"}},
		} {
			r, err := rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: filter})
			if err := empty(r.GetStats(), err); err != nil {
				return err
			}
		}
		return nil
	})
	add("ListPodSandbox", "unknown id and huge selector", codes.OK, func(ctx context.Context) error {
		r, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: f.unknown}})
		if err := empty(r.GetItems(), err); err != nil {
			return err
		}
		r, err = rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": huge}}})
		return empty(r.GetItems(), err)
	})
	add("ListPodSandbox", "unknown state", codes.OK, func(ctx context.Context) error {
		r, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: 42}}})
		return empty(r.GetItems(), err)
	})
	add("StreamPodSandboxes", "unknown id and state", codes.OK, func(ctx context.Context) error {
		none := streamEmpty(func(r *runtimeapi.StreamPodSandboxesResponse) int { return len(r.GetPodSandboxes()) })
		if err := none(rt.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{Filter: &runtimeapi.PodSandboxFilter{Id: f.unknown}})); err != nil {
			return err
		}
		return none(rt.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{Filter: &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: 42}}}))
	})

	// RunPodSandbox: every refusal must come before the pull, the create
	// and the checkpoint.
	run := func(name string, mutate func(*runtimeapi.RunPodSandboxRequest), msg ...string) {
		add("RunPodSandbox", name, codes.InvalidArgument, func(ctx context.Context) error {
			r := &runtimeapi.RunPodSandboxRequest{Config: podConfig("bad")}
			r.Config.LogDirectory = filepath.Join(f.logRoot, "bad")
			mutate(r)
			_, err := rt.RunPodSandbox(ctx, r)
			return err
		}, msg...)
	}
	cfgOf := func(m func(*runtimeapi.PodSandboxConfig)) func(*runtimeapi.RunPodSandboxRequest) {
		return func(r *runtimeapi.RunPodSandboxRequest) { m(r.Config) }
	}
	secOf := func(m func(*runtimeapi.LinuxSandboxSecurityContext)) func(*runtimeapi.RunPodSandboxRequest) {
		return func(r *runtimeapi.RunPodSandboxRequest) {
			sc := &runtimeapi.LinuxSandboxSecurityContext{}
			m(sc)
			r.Config.Linux.SecurityContext = sc
		}
	}
	run("nil config", func(r *runtimeapi.RunPodSandboxRequest) { r.Config = nil }, "config is required")
	run("no metadata", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.Metadata = nil }), "metadata is required")
	run("no name", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Name = "" }), "name is required")
	run("name with slash", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Name = "../etc" }), "name", `"../etc"`)
	run("huge labels", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.Labels["big"] = huge }), "labels and annotations")
	run("huge annotations", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.Annotations["big"] = huge }), "labels and annotations")
	run("hostname too long", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.Hostname = strings.Repeat("h", 64) }), "hostname", "63")
	run("hostname not RFC 1123", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.Hostname = "bad_host" }), "hostname", `"bad_host"`)
	run("host port 65536", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].HostPort = 65536 }), "host port 65536")
	run("host port negative", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].HostPort = -1 }), "host port -1")
	run("container port 0", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].ContainerPort = 0 }), "container port 0")
	run("container port 65536", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].ContainerPort = 65536 }), "container port 65536")
	run("unknown protocol", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].Protocol = 9 }), "protocol 9")
	run("node-wide sysctl", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.Linux.Sysctls = map[string]string{"kernel.panic": "1"} }), "kernel.panic", "not namespaced")
	run("bad sysctl name", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.Linux.Sysctls = map[string]string{"net/../../x": "1"} }), "net/../../x")
	run("net sysctl with host network", func(r *runtimeapi.RunPodSandboxRequest) {
		r.Config.Linux.Sysctls = map[string]string{"net.ipv4.ip_forward": "1"}
		r.Config.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}
	}, "net.ipv4.ip_forward", "host network")
	run("ipc sysctl with host ipc", func(r *runtimeapi.RunPodSandboxRequest) {
		r.Config.Linux.Sysctls = map[string]string{"kernel.shmmax": "1"}
		r.Config.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE}}
	}, "kernel.shmmax", "host IPC")
	run("seccomp traversal", secOf(func(sc *runtimeapi.LinuxSandboxSecurityContext) {
		sc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/var/lib/kubelet/seccomp/../../../../etc/shadow"}
	}), "seccomp profile", "etc/shadow")
	run("seccomp relative", secOf(func(sc *runtimeapi.LinuxSandboxSecurityContext) {
		sc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "profile.json"}
	}), "seccomp profile", "profile.json")
	run("seccomp fifo", secOf(func(sc *runtimeapi.LinuxSandboxSecurityContext) {
		sc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/dev/zero"}
	}), "seccomp profile", "/dev/zero", "not a regular file")
	run("negative run_as_user", secOf(func(sc *runtimeapi.LinuxSandboxSecurityContext) { sc.RunAsUser = &runtimeapi.Int64Value{Value: -5} }), "run_as_user -5")
	run("cgroup parent traversal", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.Linux.CgroupParent = "/kubepods/../../../sys" }), "cgroup parent")
	run("dns search injection", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.DnsConfig.Searches = []string{"svc\nnameserver 6.6.6.6"} }), "search domain")
	run("dns server not an IP", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.DnsConfig.Servers = []string{"dns.example"} }), "server", "dns.example")
	run("unknown runtime handler", func(r *runtimeapi.RunPodSandboxRequest) { r.RuntimeHandler = "kata" }, "runtime handler", `"kata"`)
	run("relative log directory with ..", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = "logs/../../etc" }), "log_directory", `"logs/../../etc"`, "absolute")
	run("relative log directory", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = "var/log/pods/ns_p_uid" }), "log_directory", `"var/log/pods/ns_p_uid"`, "absolute")
	run("absolute log directory with ..", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = f.logRoot + "/../../etc" }), "log_directory", `".."`)
	run("log directory not clean", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = f.logRoot + "//p/" }), "log_directory", "not a clean path")
	run("log directory with NUL", cfgOf(func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = f.logRoot + "/p\x00" }), "log_directory", "NUL")
	run("negative pod cpu shares", cfgOf(func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: -2}
	}), "pod sandbox resources", "cpu_shares -2")
	run("negative overhead memory", cfgOf(func(c *runtimeapi.PodSandboxConfig) {
		c.Linux.Overhead = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -5}
	}), "pod sandbox overhead", "memory_limit_in_bytes -5")
	userns := func(u *runtimeapi.UserNamespace) func(*runtimeapi.RunPodSandboxRequest) {
		return secOf(func(sc *runtimeapi.LinuxSandboxSecurityContext) {
			sc.NamespaceOptions = &runtimeapi.NamespaceOption{UsernsOptions: u}
		})
	}
	idm := func(c, h, l uint32) []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{ContainerId: c, HostId: h, Length: l}}
	}
	run("user namespace without maps", userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}), "user namespace mode POD without uid mappings")
	run("user namespace of two ranges", userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: append(idm(0, 1000, 100000), idm(0, 2000, 100000)...), Gids: idm(0, 1000, 100000)}),
		"2 uid mapping ranges")
	run("user namespace not mapping root", userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: idm(1, 1000, 100000), Gids: idm(1, 1000, 100000)}), "container id 0")
	run("user namespace onto the node's root", userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: idm(0, 0, 65536), Gids: idm(0, 0, 65536)}), "host id 0")
	run("user namespace past the last id", userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: idm(0, 1<<31, 1<<31+1), Gids: idm(0, 65536, 65536)}), "past the largest id")
	run("user namespace mode CONTAINER", userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER}), "mode CONTAINER is not supported")
	run("user namespace mode TARGET", userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_TARGET}), "mode TARGET is not supported")
	add("RunPodSandbox", "user namespace where the node has no wrapper", codes.FailedPrecondition, func(ctx context.Context) error {
		r := &runtimeapi.RunPodSandboxRequest{Config: podConfig("bad")}
		r.Config.LogDirectory = filepath.Join(f.logRoot, "bad")
		userns(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: idm(0, 65536, 65536), Gids: idm(0, 65536, 65536)})(r)
		_, err := rt.RunPodSandbox(ctx, r)
		return err
	}, "hostUsers: false")

	// CreateContainer: bad sandbox IDs, then bad configs in a good sandbox.
	create := func(name string, code codes.Code, mutate func(*runtimeapi.CreateContainerRequest), msg ...string) {
		add("CreateContainer", name, code, func(ctx context.Context) error {
			r := &runtimeapi.CreateContainerRequest{PodSandboxId: f.sandboxID, Config: ctrConfig("bad"), SandboxConfig: f.sandbox}
			mutate(r)
			_, err := rt.CreateContainer(ctx, r)
			return err
		}, msg...)
	}
	ctr := func(name string, mutate func(*runtimeapi.ContainerConfig), msg ...string) {
		create(name, codes.InvalidArgument, func(r *runtimeapi.CreateContainerRequest) { mutate(r.Config) }, msg...)
	}
	resources := func(name string, m func(*runtimeapi.LinuxContainerResources), msg ...string) {
		ctr(name, func(c *runtimeapi.ContainerConfig) {
			c.Linux.Resources = &runtimeapi.LinuxContainerResources{}
			m(c.Linux.Resources)
		}, msg...)
	}
	create("empty sandbox id", codes.InvalidArgument, func(r *runtimeapi.CreateContainerRequest) { r.PodSandboxId = "" }, "pod sandbox ID is required")
	create("unknown sandbox", codes.NotFound, func(r *runtimeapi.CreateContainerRequest) { r.PodSandboxId = f.unknown }, f.unknown)
	create("container id as sandbox", codes.NotFound, func(r *runtimeapi.CreateContainerRequest) { r.PodSandboxId = f.created }, f.created)
	create("ambiguous sandbox prefix", codes.InvalidArgument, func(r *runtimeapi.CreateContainerRequest) { r.PodSandboxId = f.ambiguous }, "more than one")
	create("nil config", codes.InvalidArgument, func(r *runtimeapi.CreateContainerRequest) { r.Config = nil }, "container config is required")
	ctr("no metadata", func(c *runtimeapi.ContainerConfig) { c.Metadata = nil }, "metadata")
	ctr("name with slash", func(c *runtimeapi.ContainerConfig) { c.Metadata.Name = "a/b" }, "name", `"a/b"`)
	ctr("no image", func(c *runtimeapi.ContainerConfig) { c.Image = nil }, "image is required")
	ctr("bad image ref", func(c *runtimeapi.ContainerConfig) { c.Image.Image = "Not/A:Valid:Ref" }, "Not/A:Valid:Ref")
	ctr("huge annotations", func(c *runtimeapi.ContainerConfig) { c.Annotations["big"] = huge }, "labels and annotations")
	ctr("mount host path traversal", func(c *runtimeapi.ContainerConfig) {
		c.Mounts = []*runtimeapi.Mount{{HostPath: "/var/lib/kubelet/pods/x/volumes/../../../../../etc", ContainerPath: "/data"}}
	}, "host path", "'..'")
	ctr("mount relative host path", func(c *runtimeapi.ContainerConfig) {
		c.Mounts = []*runtimeapi.Mount{{HostPath: "myvolume", ContainerPath: "/data"}}
	}, "host path", `"myvolume"`, "absolute")
	ctr("mount relative container path", func(c *runtimeapi.ContainerConfig) {
		c.Mounts = []*runtimeapi.Mount{{HostPath: "/srv", ContainerPath: "data"}}
	}, "container path", `"data"`)
	ctr("device relative host path", func(c *runtimeapi.ContainerConfig) {
		c.Devices = []*runtimeapi.Device{{HostPath: "dev/fuse", ContainerPath: "/dev/fuse"}}
	}, "device", `"dev/fuse"`)
	ctr("seccomp traversal", func(c *runtimeapi.ContainerConfig) {
		c.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/var/lib/kubelet/seccomp/../../../etc/shadow"}
	}, "seccomp profile")
	ctr("apparmor traversal", func(c *runtimeapi.ContainerConfig) {
		c.Linux.SecurityContext.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/../../unconfined"}
	}, "apparmor profile")
	ctr("log path traversal", func(c *runtimeapi.ContainerConfig) { c.LogPath = "../../../../etc/cron.d/evil" }, "log_path", "..")
	ctr("absolute log path", func(c *runtimeapi.ContainerConfig) { c.LogPath = "/etc/passwd" }, "log_path", "/etc/passwd")
	create("relative log directory", codes.InvalidArgument, func(r *runtimeapi.CreateContainerRequest) {
		sb := proto.Clone(r.SandboxConfig).(*runtimeapi.PodSandboxConfig)
		sb.LogDirectory = "var/log/pods/x"
		r.SandboxConfig = sb
	}, "log_directory", "var/log/pods/x")
	create("log directory with traversal", codes.InvalidArgument, func(r *runtimeapi.CreateContainerRequest) {
		sb := proto.Clone(r.SandboxConfig).(*runtimeapi.PodSandboxConfig)
		sb.LogDirectory = "/var/log/pods/../../../etc"
		r.SandboxConfig = sb
	}, "log_directory")
	ctr("env name with =", func(c *runtimeapi.ContainerConfig) {
		c.Envs = append(c.Envs, &runtimeapi.KeyValue{Key: "PATH=/evil:", Value: []byte("x")})
	}, "environment variable name")
	ctr("negative run_as_user", func(c *runtimeapi.ContainerConfig) {
		c.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: -1}
	}, "run_as_user -1")
	resources("negative cpu shares", func(r *runtimeapi.LinuxContainerResources) { r.CpuShares = -1 }, "cpu_shares -1")
	resources("absurd cpu shares", func(r *runtimeapi.LinuxContainerResources) { r.CpuShares = 1 << 50 }, "cpu_shares")
	resources("negative cpu quota", func(r *runtimeapi.LinuxContainerResources) { r.CpuQuota = -100 }, "cpu_quota -100")
	resources("tiny cpu period", func(r *runtimeapi.LinuxContainerResources) { r.CpuPeriod = 1 }, "cpu_period 1")
	resources("absurd cpu period", func(r *runtimeapi.LinuxContainerResources) { r.CpuPeriod = 1 << 40 }, "cpu_period")
	resources("negative memory", func(r *runtimeapi.LinuxContainerResources) { r.MemoryLimitInBytes = -2 }, "memory_limit_in_bytes -2")
	resources("bad unified value", func(r *runtimeapi.LinuxContainerResources) { r.Unified = map[string]string{"pids.max": "-3"} }, "pids.max")
	resources("swap without memory", func(r *runtimeapi.LinuxContainerResources) { r.MemorySwapLimitInBytes = 64 << 20 }, "needs memory_limit_in_bytes")
	create("strict supplemental groups without the wrapper", codes.FailedPrecondition, func(r *runtimeapi.CreateContainerRequest) {
		r.Config.Linux.SecurityContext.SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
	}, "Strict needs netshim's OCI wrapper")
	ctr("idmapped mount in a pod of the node's user namespace", func(c *runtimeapi.ContainerConfig) {
		c.Mounts = []*runtimeapi.Mount{{HostPath: "/data", ContainerPath: "/data", UidMappings: []*runtimeapi.IDMapping{{HostId: 65536, Length: 65536}}}}
	}, "idmapped mounts need the pod's own user namespace")
	ctr("user namespace in a pod of the node's", func(c *runtimeapi.ContainerConfig) {
		c.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
			Uids: []*runtimeapi.IDMapping{{HostId: 65536, Length: 65536}}, Gids: []*runtimeapi.IDMapping{{HostId: 65536, Length: 65536}}}}
	}, "runs in the node's")
	ctr("image volume on API 1.41", func(c *runtimeapi.ContainerConfig) {
		c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/img", Image: &runtimeapi.ImageSpec{Image: testImageID}}}
	}, "image volumes need Docker 28 (API 1.48)", "speaks API 1.41")
	resources("oom score out of range", func(r *runtimeapi.LinuxContainerResources) { r.OomScoreAdj = 5000 }, "oom_score_adj 5000")
	resources("oom score below range", func(r *runtimeapi.LinuxContainerResources) { r.OomScoreAdj = -1001 }, "oom_score_adj -1001")
	resources("cpu quota above the kernel's", func(r *runtimeapi.LinuxContainerResources) { r.CpuQuota = 1 << 50 }, "cpu_quota", "kernel's maximum")
	resources("negative swap", func(r *runtimeapi.LinuxContainerResources) {
		r.MemoryLimitInBytes, r.MemorySwapLimitInBytes = 64<<20, -2
	}, "memory_swap_limit_in_bytes -2")
	resources("hugepage limit without page size", func(r *runtimeapi.LinuxContainerResources) {
		r.HugepageLimits = []*runtimeapi.HugepageLimit{{PageSize: "2MB"}, {Limit: 2 << 20}}
	}, "hugepage_limits[1]", "page_size")
	ctr("blank pid namespace target", func(c *runtimeapi.ContainerConfig) {
		c.Linux.SecurityContext.NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: "  "}
	}, "target_id", "white space")
	resources("bad cpuset", func(r *runtimeapi.LinuxContainerResources) { r.CpusetCpus = "0-" }, "cpuset_cpus")

	// Container RPCs: IDs that are empty, unknown, of a sandbox, ambiguous.
	type ctrRPC struct {
		method string
		call   func(ctx context.Context, id string) error
		// unknown is the code for an unknown ID: OK where idempotent.
		unknown codes.Code
	}
	ctrRPCs := []ctrRPC{
		{"StartContainer", func(ctx context.Context, id string) error {
			_, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
			return err
		}, codes.NotFound},
		{"StopContainer", func(ctx context.Context, id string) error {
			_, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: -10})
			return err
		}, codes.OK},
		{"RemoveContainer", func(ctx context.Context, id string) error {
			_, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		}, codes.OK},
		{"ContainerStatus", func(ctx context.Context, id string) error {
			_, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
			return err
		}, codes.NotFound},
		{"UpdateContainerResources", func(ctx context.Context, id string) error {
			_, err := rt.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512}})
			return err
		}, codes.NotFound},
		{"ReopenContainerLog", func(ctx context.Context, id string) error {
			_, err := rt.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
			return err
		}, codes.NotFound},
		{"ExecSync", func(ctx context.Context, id string) error {
			_, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}})
			return err
		}, codes.NotFound},
		{"Exec", func(ctx context.Context, id string) error {
			_, err := rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"sh"}, Stdout: true})
			return err
		}, codes.NotFound},
		{"Attach", func(ctx context.Context, id string) error {
			_, err := rt.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: id, Stdout: true})
			return err
		}, codes.NotFound},
		{"ContainerStats", func(ctx context.Context, id string) error {
			_, err := rt.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
			return err
		}, codes.NotFound},
	}
	for _, r := range ctrRPCs {
		add(r.method, "empty id", codes.InvalidArgument, func(ctx context.Context) error { return r.call(ctx, "") }, "container ID is required", "container_id")
		addMalformed(r.method, "container_id", r.call)
		add(r.method, "sandbox id", codes.NotFound, func(ctx context.Context) error { return r.call(ctx, f.sandboxID) }, f.sandboxID, "is a pod sandbox")
		add(r.method, "ambiguous prefix", codes.InvalidArgument, func(ctx context.Context) error { return r.call(ctx, f.ambiguous) }, "more than one")
		var msg []string
		if r.unknown != codes.OK {
			msg = []string{f.unknown, "not found"}
		}
		add(r.method, "unknown id", r.unknown, func(ctx context.Context) error { return r.call(ctx, f.unknown) }, msg...)
	}
	add("StartContainer", "already running", codes.FailedPrecondition, func(ctx context.Context) error {
		_, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: f.running})
		return err
	}, f.running, "only a created container")
	update := func(name string, res *runtimeapi.LinuxContainerResources, msg ...string) {
		add("UpdateContainerResources", name, codes.InvalidArgument, func(ctx context.Context) error {
			_, err := rt.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: f.running, Linux: res})
			return err
		}, msg...)
	}
	update("negative cpu shares", &runtimeapi.LinuxContainerResources{CpuShares: -2}, "cpu_shares -2")
	update("negative memory", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -4096}, "memory_limit_in_bytes -4096")
	update("negative swap", &runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: -3}, "memory_swap_limit_in_bytes -3")
	update("cpu quota above the kernel's", &runtimeapi.LinuxContainerResources{CpuQuota: 1 << 45}, "cpu_quota", "kernel's maximum")
	update("negative cpu period", &runtimeapi.LinuxContainerResources{CpuPeriod: -100000}, "cpu_period -100000")
	update("tiny cpu quota", &runtimeapi.LinuxContainerResources{CpuQuota: 5}, "cpu_quota 5")
	update("unified garbage", &runtimeapi.LinuxContainerResources{Unified: map[string]string{"cpu.max": "max 1"}}, "cpu.max", "period")
	add("UpdateContainerResources", "windows only", codes.InvalidArgument, func(ctx context.Context) error {
		_, err := rt.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: f.running, Windows: &runtimeapi.WindowsContainerResources{CpuShares: 2}})
		return err
	}, "only Windows resources")
	add("ReopenContainerLog", "not running", codes.FailedPrecondition, func(ctx context.Context) error {
		_, err := rt.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: f.created})
		return err
	}, f.created, "not running")
	add("ExecSync", "empty command", codes.InvalidArgument, func(ctx context.Context) error {
		_, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: f.running})
		return err
	}, "command is empty")
	add("ExecSync", "not running", codes.FailedPrecondition, func(ctx context.Context) error {
		_, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: f.created, Cmd: []string{"true"}})
		return err
	}, f.created, "not running")
	add("Exec", "empty command", codes.InvalidArgument, func(ctx context.Context) error {
		_, err := rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: f.running, Stdout: true})
		return err
	}, "cmd is required")
	add("Exec", "no streams", codes.InvalidArgument, func(ctx context.Context) error {
		_, err := rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: f.running, Cmd: []string{"sh"}})
		return err
	}, "stdin, stdout and stderr")
	add("Exec", "tty with stderr", codes.InvalidArgument, func(ctx context.Context) error {
		_, err := rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: f.running, Cmd: []string{"sh"}, Tty: true, Stderr: true})
		return err
	}, "tty and stderr")
	add("Attach", "not running", codes.FailedPrecondition, func(ctx context.Context) error {
		_, err := rt.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: f.created, Stdout: true})
		return err
	}, f.created, "not running")
	add("ListContainers", "unknown sandbox and state", codes.OK, func(ctx context.Context) error {
		r, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: f.unknown}})
		if err := empty(r.GetContainers(), err); err != nil {
			return err
		}
		r, err = rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: 99}}})
		return empty(r.GetContainers(), err)
	})
	add("ListContainerStats", "container id as sandbox", codes.OK, func(ctx context.Context) error {
		r, err := rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{PodSandboxId: f.created}})
		return empty(r.GetStats(), err)
	})
	add("StreamContainers", "unknown sandbox and state", codes.OK, func(ctx context.Context) error {
		none := streamEmpty(func(r *runtimeapi.StreamContainersResponse) int { return len(r.GetContainers()) })
		if err := none(rt.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: f.unknown}})); err != nil {
			return err
		}
		return none(rt.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{Filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: 99}}}))
	})
	add("StreamContainerStats", "container id as sandbox", codes.OK, func(ctx context.Context) error {
		none := streamEmpty(func(r *runtimeapi.StreamContainerStatsResponse) int { return len(r.GetContainerStats()) })
		return none(rt.StreamContainerStats(ctx, &runtimeapi.StreamContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{PodSandboxId: f.created}}))
	})
	add("GetContainerEvents", "client goes away", codes.OK, func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s, err := rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
		if err != nil {
			return err
		}
		if _, err := s.Header(); err != nil { // subscribed
			return err
		}
		cancel()
		if _, err := s.Recv(); status.Code(err) != codes.Canceled {
			return fmt.Errorf("unexpected: stream ended with %v after the cancel", err)
		}
		return nil
	})

	// PortForward.
	for _, p := range []int32{0, -1, 65536} {
		add("PortForward", fmt.Sprintf("port %d", p), codes.InvalidArgument, func(ctx context.Context) error {
			_, err := rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: f.sandboxID, Port: []int32{80, p}})
			return err
		}, fmt.Sprintf("invalid port %d", p))
	}
	for _, s := range sandboxIDs {
		add("PortForward", s.name, s.code, func(ctx context.Context) error {
			_, err := rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: s.id, Port: []int32{80}})
			return err
		}, s.msg...)
	}
	add("PortForward", "unknown id", codes.NotFound, func(ctx context.Context) error {
		_, err := rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: f.unknown, Port: []int32{80}})
		return err
	}, f.unknown, "not found")

	// Runtime-wide RPCs.
	add("UpdateRuntimeConfig", "bad pod CIDR", codes.InvalidArgument, func(ctx context.Context) error {
		_, err := rt.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.0.0.0/99"}}})
		return err
	}, "10.0.0.0/99")
	add("UpdateRuntimeConfig", "nil config", codes.OK, func(ctx context.Context) error {
		_, err := rt.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{})
		return err
	})
	add("Version", "odd version", codes.OK, func(ctx context.Context) error {
		_, err := rt.Version(ctx, &runtimeapi.VersionRequest{Version: huge[:1000]})
		return err
	})
	add("Status", "verbose", codes.OK, func(ctx context.Context) error {
		_, err := rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
		return err
	})
	add("RuntimeConfig", "empty", codes.OK, func(ctx context.Context) error {
		_, err := rt.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
		return err
	})
	// The metrics RPCs take no argument.
	add("ListMetricDescriptors", "empty", codes.OK, func(ctx context.Context) error {
		_, err := rt.ListMetricDescriptors(ctx, &runtimeapi.ListMetricDescriptorsRequest{})
		return err
	})
	add("ListPodSandboxMetrics", "empty", codes.OK, func(ctx context.Context) error {
		_, err := rt.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
		return err
	})

	// UpdatePodSandboxResources: nothing to do for Docker, but the sandbox
	// must exist.
	sbUpdate := func(name string, code codes.Code, id string, msg ...string) {
		add("UpdatePodSandboxResources", name, code, func(ctx context.Context) error {
			_, err := rt.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: id, Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2}})
			return err
		}, msg...)
	}
	sbUpdate("empty id", codes.InvalidArgument, "", "pod sandbox ID is required", "pod_sandbox_id")
	sbUpdate("unknown id", codes.NotFound, f.unknown, f.unknown, "not found")
	sbUpdate("container id", codes.NotFound, f.created, "is a container")
	sbUpdate("known sandbox", codes.OK, f.sandboxID)
	// What kubelet sends for a pod with requests and limits, and -1 for a
	// CFS quota that exclusive CPUs turned off.
	add("UpdatePodSandboxResources", "what kubelet sends", codes.OK, func(ctx context.Context) error {
		_, err := rt.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: f.sandboxID,
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: -1, MemoryLimitInBytes: 4 << 20,
				HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB"}, {PageSize: "1GB"}}},
			Overhead: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, CpuQuota: 1000, MemoryLimitInBytes: 1 << 20}})
		return err
	})
	// Nothing of it is applied, and nothing refused may look accepted:
	// every value that can only be wrong is InvalidArgument.
	sbResources := func(name string, res, overhead *runtimeapi.LinuxContainerResources, msg ...string) {
		add("UpdatePodSandboxResources", name, codes.InvalidArgument, func(ctx context.Context) error {
			_, err := rt.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: f.sandboxID, Resources: res, Overhead: overhead})
			return err
		}, msg...)
		cs[len(cs)-1].noDocker = true
	}
	sbResources("negative cpu shares", &runtimeapi.LinuxContainerResources{CpuShares: -1024}, nil, "resources", "cpu_shares -1024")
	sbResources("negative memory", &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -2}, nil, "resources", "memory_limit_in_bytes -2")
	sbResources("negative cpu quota", &runtimeapi.LinuxContainerResources{CpuQuota: -5}, nil, "cpu_quota -5")
	sbResources("tiny cpu period", &runtimeapi.LinuxContainerResources{CpuPeriod: 10}, nil, "cpu_period 10")
	sbResources("oom score out of range", &runtimeapi.LinuxContainerResources{OomScoreAdj: 1001}, nil, "oom_score_adj 1001")
	sbResources("negative swap", &runtimeapi.LinuxContainerResources{MemorySwapLimitInBytes: -7}, nil, "memory_swap_limit_in_bytes -7")
	sbResources("negative overhead cpu shares", nil, &runtimeapi.LinuxContainerResources{CpuShares: -2}, "overhead", "cpu_shares -2")
	sbResources("negative overhead memory", &runtimeapi.LinuxContainerResources{CpuShares: 2}, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -4096}, "overhead", "memory_limit_in_bytes -4096")

	// Not implemented: the answer says so and names the RPC.
	unimpl := func(method string, call func(context.Context) error) {
		add(method, "unimplemented", codes.Unimplemented, call, method)
	}
	unimpl("CheckpointContainer", func(ctx context.Context) error {
		_, err := rt.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: f.running, Location: "/etc/passwd"})
		return err
	})
	unimpl("CheckpointPod", func(ctx context.Context) error {
		_, err := rt.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: f.sandboxID, OutputPath: "/etc"})
		return err
	})
	unimpl("RestorePod", func(ctx context.Context) error {
		_, err := rt.RestorePod(ctx, &runtimeapi.RestorePodRequest{CheckpointPath: "/etc/shadow"})
		return err
	})
	add("StreamPodSandboxMetrics", "no argument", codes.OK, func(ctx context.Context) error {
		// Every running pod's metrics (none here: an empty stream).
		if err := recvErr(rt.StreamPodSandboxMetrics(ctx, &runtimeapi.StreamPodSandboxMetricsRequest{})); !errors.Is(err, io.EOF) {
			return err
		}
		return nil
	})
	add("StreamPodSandboxStats", "unknown id", codes.OK, func(ctx context.Context) error {
		none := streamEmpty(func(r *runtimeapi.StreamPodSandboxStatsResponse) int { return len(r.GetPodSandboxStats()) })
		return none(rt.StreamPodSandboxStats(ctx, &runtimeapi.StreamPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: f.unknown}}))
	})

	// ImageService: bad references everywhere.
	badRefs := []struct{ name, ref, msg string }{
		{"empty ref", "", "image spec is empty"},
		{"upper case repo", "Busybox:latest", `"Busybox:latest"`},
		{"bad digest", "busybox@sha256:nothex", `"busybox@sha256:nothex"`},
		{"bad image id", "sha256:zz", `"sha256:zz"`},
		{"huge ref", "a" + huge[:300], "image"},
		{"traversal", "../../etc/passwd", `"../../etc/passwd"`},
	}
	for _, b := range badRefs {
		add("PullImage", b.name, codes.InvalidArgument, func(ctx context.Context) error {
			_, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: b.ref}})
			return err
		}, b.msg)
		add("ImageStatus", b.name, codes.InvalidArgument, func(ctx context.Context) error {
			_, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: b.ref}, Verbose: true})
			return err
		}, b.msg)
		add("RemoveImage", b.name, codes.InvalidArgument, func(ctx context.Context) error {
			_, err := img.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: b.ref}})
			return err
		}, b.msg)
		if b.ref != "" { // an empty filter lists everything
			add("ListImages", b.name, codes.InvalidArgument, func(ctx context.Context) error {
				_, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: b.ref}}})
				return err
			}, "invalid image filter")
			add("StreamImages", b.name, codes.InvalidArgument, func(ctx context.Context) error {
				none := streamEmpty(func(r *runtimeapi.StreamImagesResponse) int { return len(r.GetImages()) })
				return none(img.StreamImages(ctx, &runtimeapi.StreamImagesRequest{Filter: &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: b.ref}}}))
			}, "invalid image filter")
		}
	}
	add("PullImage", "nil image", codes.InvalidArgument, func(ctx context.Context) error {
		_, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{})
		return err
	}, "image spec is empty")
	add("PullImage", "image id", codes.InvalidArgument, func(ctx context.Context) error {
		_, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: testImageID}})
		return err
	}, "image ID")
	add("PullImage", "bad auth", codes.InvalidArgument, func(ctx context.Context) error {
		_, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}, Auth: &runtimeapi.AuthConfig{Auth: "!!not base64!!"}})
		return err
	}, "auth")
	add("ImageStatus", "unknown image", codes.OK, func(ctx context.Context) error {
		r, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "nowhere/nothing:1"}})
		if err == nil && r.GetImage() != nil {
			return errors.New("unexpected: an image for an unknown ref")
		}
		return err
	})
	add("RemoveImage", "unknown image", codes.OK, func(ctx context.Context) error {
		_, err := img.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "nowhere/nothing:1"}})
		return err
	})
	add("ListImages", "unknown image", codes.OK, func(ctx context.Context) error {
		r, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: "nowhere/nothing:1"}}})
		return empty(r.GetImages(), err)
	})
	add("ImageFsInfo", "empty", codes.OK, func(ctx context.Context) error {
		_, err := img.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
		return err
	})
	return cs
}

func TestBadInputGetsPreciseStatusAndChangesNothing(t *testing.T) {
	f := newBadInputFixture(t)
	cases := f.cases()
	for _, tc := range cases {
		t.Run(tc.method+"/"+tc.name, func(t *testing.T) {
			before, calls := f.snapshot(t), len(f.docker.Calls())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := tc.call(ctx)
			st, ok := status.FromError(err)
			if !ok {
				t.Fatalf("not a gRPC status: %v", err)
			}
			if st.Code() != tc.code {
				t.Fatalf("code %v (%q), want %v", st.Code(), st.Message(), tc.code)
			}
			for _, m := range tc.msg {
				if !strings.Contains(st.Message(), m) {
					t.Errorf("message %q does not say %q", st.Message(), m)
				}
			}
			if len(st.Message()) > 1024 {
				t.Errorf("message is %d bytes: a hostile value must not be echoed whole", len(st.Message()))
			}
			if tc.noDocker {
				if made := f.docker.Calls()[calls:]; len(made) != 0 {
					t.Errorf("the request made Docker calls %q", made)
				}
			}
			f.assertUnchanged(t, before, calls)
		})
	}

	// Every RPC of both services is exercised.
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.method] = true
	}
	for _, sd := range []grpc.ServiceDesc{runtimeapi.RuntimeService_ServiceDesc, runtimeapi.ImageService_ServiceDesc} {
		for _, m := range sd.Methods {
			if !covered[m.MethodName] {
				t.Errorf("%s.%s has no bad-input case", sd.ServiceName, m.MethodName)
			}
		}
		for _, s := range sd.Streams {
			if !covered[s.StreamName] {
				t.Errorf("%s.%s has no bad-input case", sd.ServiceName, s.StreamName)
			}
		}
	}
}
