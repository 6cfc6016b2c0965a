package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/network"
	"github.com/netshim/netshim/pkg/podns"
)

const testPauseImage = "registry.k8s.io/pause:3.10"

// fakePlugin records what the service asks of the network and hands out
// IPs from 10.0.0.0/24.
type fakePlugin struct {
	mu       sync.Mutex
	host     network.Host
	calls    []string
	setUpErr error
	downErr  error
	status   error
	events   []map[string]any
	// netnsAtSetUp / netnsAtDown are what Host.GetNetNS said.
	netnsAtSetUp, netnsAtDown string
	// setUpGate, when set, holds SetUpPod (after it allocated the IP)
	// until it is closed or the call's context ends: a slow ADD.
	setUpGate   chan struct{}
	portsAtDown []network.PortMapping
	next        byte
	ips         map[string]net.IP
}

func (p *fakePlugin) Init(host network.Host, _ network.PluginConfig) error {
	p.host = host
	p.ips = map[string]net.IP{}
	return nil
}
func (p *fakePlugin) Event(_ string, d map[string]any) {
	p.mu.Lock()
	p.events = append(p.events, d)
	p.mu.Unlock()
}
func (p *fakePlugin) Name() string                       { return "fake" }
func (p *fakePlugin) Capabilities() network.Capabilities { return network.CapHostPorts }
func (p *fakePlugin) Status() error                      { return p.status }

func (p *fakePlugin) record(c string) {
	p.mu.Lock()
	p.calls = append(p.calls, c)
	p.mu.Unlock()
}

func (p *fakePlugin) SetUpPod(ctx context.Context, pod network.PodRef, _ map[string]string, _ network.SetUpOptions) error {
	p.record("SetUpPod " + pod.SandboxID)
	ns, err := p.host.GetNetNS(ctx, pod.SandboxID)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.netnsAtSetUp = ns
	p.next++
	p.ips[pod.SandboxID] = net.IPv4(10, 0, 0, p.next)
	if gate := p.setUpGate; gate != nil {
		p.mu.Unlock()
		select {
		case <-gate:
		case <-ctx.Done():
		}
		p.mu.Lock()
	}
	return p.setUpErr
}

func (p *fakePlugin) TearDownPod(ctx context.Context, pod network.PodRef) error {
	p.record("TearDownPod " + pod.SandboxID)
	ns, err := p.host.GetNetNS(ctx, pod.SandboxID)
	if err != nil {
		return err
	}
	ports, err := p.host.GetPodPortMappings(ctx, pod.SandboxID)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.netnsAtDown, p.portsAtDown = ns, ports
	if p.downErr != nil {
		return p.downErr
	}
	delete(p.ips, pod.SandboxID)
	return nil
}

func (p *fakePlugin) GetPodNetworkStatus(_ context.Context, pod network.PodRef) (*network.PodNetworkStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ip, ok := p.ips[pod.SandboxID]
	if !ok {
		return nil, errors.New("no IP")
	}
	return &network.PodNetworkStatus{IPs: []net.IP{ip}, Result: []byte(`{"cniVersion":"1.0.0"}`)}, nil
}

func (p *fakePlugin) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ips)
}

// startService starts the index sync and stops it with the test.
func startService(t testing.TB, ds *DockerService) {
	t.Helper()
	// The fake's pids are made up: no host process to check them against.
	ds.containers.netnsPath = func(_ string, pid int) (string, error) { return fmt.Sprintf("/proc/%d/ns/net", pid), nil }
	// The kernel is never asked from these tests: pkg/podns tests the
	// writer; sandbox_sysctls_test.go replaces this to watch it.
	ds.pins.writeSysctls = func(podns.Paths, map[string]string) error { return nil }
	// Nor the host's sysctls: the tests that want the engine's defaults
	// set them.
	ds.pins.netSysctlDefaults = nil
	ctx, cancel := context.WithCancel(context.Background())
	ds.Start(ctx)
	t.Cleanup(func() {
		cancel()
		ds.Close()
	})
	if !ds.index.Synced() {
		_, msg := ds.index.Health()
		t.Fatalf("index not synced after Start: %s", msg)
	}
}

type testEnv struct {
	ds     *DockerService
	docker *fakedocker.Engine
	plugin *fakePlugin
	ckpt   *checkpoint.Manager
	root   string
}

func newTestEnv(t testing.TB, mutate ...func(*Config)) *testEnv {
	t.Helper()
	return newTestEnvWith(t, newFakeDocker(), mutate...)
}

// newTestEnvWith is newTestEnv on an engine the test prepared.
func newTestEnvWith(t testing.TB, docker *fakedocker.Engine, mutate ...func(*Config)) *testEnv {
	t.Helper()
	docker.Do(func(s *fakedocker.State) { s.Images[testPauseImage] = map[string]string{"image.label": "from-image"} })
	root := t.TempDir()
	ckpt, err := checkpoint.NewManager(filepath.Join(root, "sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	plugin := &fakePlugin{}
	cfg := Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake"}
	for _, m := range mutate {
		m(&cfg)
	}
	ds, err := NewDockerService(cfg, docker, ckpt, []network.NetworkPlugin{plugin})
	if err != nil {
		t.Fatal(err)
	}
	startService(t, ds)
	// Once synced, the service asks the engine its version and negotiates
	// the API in the background (onIndexSync); the negotiation is last.
	// Waiting for it means tests start with the engine quiet: its calls
	// cannot land among the ones a test counts, nor record the API version
	// after a test changed the engine's (useEngineAPI).
	testutil.Eventually(t, "the start-up API version negotiation", func() bool {
		_, api := ds.engine.Versions()
		return api != ""
	})
	return &testEnv{ds: ds, docker: docker, plugin: plugin, ckpt: ckpt, root: root}
}

func podConfig(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: "uid-" + name, Attempt: 1},
		Hostname:     name,
		Labels:       map[string]string{"app": name, "io.kubernetes.pod.name": name},
		Annotations:  map[string]string{"note": "x"},
		PortMappings: []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: 18080}},
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local"}, Options: []string{"ndots:5"}},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/pod1"},
	}
}

func (e *testEnv) run(t *testing.T, cfg *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	resp, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	return resp.PodSandboxId
}

func codeOf(err error) codes.Code { return crirpc.Code(err) }

func TestRunPodSandboxCreatesConfiguredSandbox(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { floor := 0; c.OOMScoreAdjFloor = &floor })
	var checkpointedBeforeStart bool
	e.docker.Do(func(s *fakedocker.State) {
		s.OnStart = func(id string) {
			_, err := e.ckpt.Get(id)
			checkpointedBeforeStart = err == nil
		}
	})
	id := e.run(t, podConfig("web"))

	if !checkpointedBeforeStart {
		t.Error("checkpoint was not written before the infra container started")
	}
	c, err := e.docker.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "/k8s_POD_web_ns_uid-web_1" {
		t.Errorf("container name = %q", c.Name)
	}
	hc := c.HostConfig
	if hc.NetworkMode != "none" || hc.IpcMode != "shareable" || hc.CgroupParent != "/kubepods/pod1" {
		t.Errorf("network/ipc/cgroup = %q/%q/%q", hc.NetworkMode, hc.IpcMode, hc.CgroupParent)
	}
	if hc.OomScoreAdj != 0 {
		t.Errorf("oom_score_adj = %d, want clamped to floor 0", hc.OomScoreAdj)
	}
	if strings.Join(hc.DNS, ",") != "10.96.0.10" || strings.Join(hc.DNSSearch, ",") != "ns.svc.cluster.local" || strings.Join(hc.DNSOptions, ",") != "ndots:5" {
		t.Errorf("dns = %v %v %v", hc.DNS, hc.DNSSearch, hc.DNSOptions)
	}
	if c.Config.Hostname != "web" {
		t.Errorf("hostname = %q", c.Config.Hostname)
	}
	if e.plugin.netnsAtSetUp == "" || !strings.HasPrefix(e.plugin.netnsAtSetUp, "/proc/") {
		t.Errorf("SetUpPod saw netns %q", e.plugin.netnsAtSetUp)
	}
	cp, err := e.ckpt.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(cp.PortMappings) != 1 || cp.PortMappings[0].HostPort != 18080 || cp.PortMappings[0].Protocol != "tcp" {
		t.Errorf("checkpoint port mappings = %+v", cp.PortMappings)
	}
	if len(cp.IPs) != 1 || cp.IPs[0] != "10.0.0.1" {
		t.Errorf("checkpoint IPs = %v", cp.IPs)
	}

	st, err := e.ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	s := st.Status
	if s.State != runtimeapi.PodSandboxState_SANDBOX_READY || s.Network.GetIp() != "10.0.0.1" {
		t.Errorf("status state=%v ip=%q", s.State, s.Network.GetIp())
	}
	if len(s.Labels) != 2 || s.Labels["app"] != "web" || s.Labels["io.kubernetes.pod.name"] != "web" {
		t.Errorf("labels did not round-trip exactly (image labels must not leak in): %v", s.Labels)
	}
	if len(s.Annotations) != 1 || s.Annotations["note"] != "x" {
		t.Errorf("annotations = %v", s.Annotations)
	}
	if s.Metadata.Name != "web" || s.Metadata.Attempt != 1 || s.Metadata.Uid != "uid-web" {
		t.Errorf("metadata = %v", s.Metadata)
	}
	if !strings.Contains(st.Info["info"], `"portMappings"`) || !strings.Contains(st.Info["info"], `"cniResult"`) {
		t.Errorf("verbose info lacks checkpoint or CNI result: %s", st.Info["info"])
	}
}

func TestRunPodSandboxPullsMissingImageOnce(t *testing.T) {
	e := newTestEnv(t)
	e.docker.Do(func(s *fakedocker.State) { delete(s.Images, testPauseImage) })
	e.run(t, podConfig("a"))
	e.run(t, podConfig("b"))
	if n := e.docker.Count("ImagePull"); n != 1 {
		t.Errorf("pulled %d times, want 1", n)
	}
	if n := e.docker.Count("ImageInspect"); n != 1 {
		t.Errorf("inspected the image %d times, want 1 (presence is cached)", n)
	}
}

func TestRunPodSandboxValidation(t *testing.T) {
	cases := map[string]func(*runtimeapi.PodSandboxConfig){
		"no metadata":          func(c *runtimeapi.PodSandboxConfig) { c.Metadata = nil },
		"no name":              func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Name = "" },
		"no namespace":         func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Namespace = "" },
		"no uid":               func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Uid = "" },
		"container port 0":     func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].ContainerPort = 0 },
		"host port too big":    func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].HostPort = 70000 },
		"unknown protocol":     func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].Protocol = 7 },
		"bad host ip":          func(c *runtimeapi.PodSandboxConfig) { c.PortMappings[0].HostIp = "nope" },
		"bad bandwidth":        func(c *runtimeapi.PodSandboxConfig) { c.Annotations["kubernetes.io/ingress-bandwidth"] = "lots" },
		"duplicate host ports": func(c *runtimeapi.PodSandboxConfig) { c.PortMappings = append(c.PortMappings, c.PortMappings[0]) },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t)
			cfg := podConfig("v")
			mutate(cfg)
			_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
			if codeOf(err) != codes.InvalidArgument {
				t.Fatalf("got %v (code %v), want InvalidArgument", err, codeOf(err))
			}
			if n := e.docker.Count("ContainerCreate"); n != 0 {
				t.Errorf("created %d containers for an invalid config", n)
			}
		})
	}
}

func TestRunPodSandboxNetworkFailureUndoesEverything(t *testing.T) {
	e := newTestEnv(t)
	e.plugin.setUpErr = errors.New(`failed to find plugin "nonexistent" in path [/usr/lib/cni]`)
	_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("broken")})
	if err == nil || !strings.Contains(err.Error(), `failed to find plugin "nonexistent"`) {
		t.Fatalf("error %v does not carry the plugin's text", err)
	}
	if len(e.docker.ContainerIDs()) != 0 {
		t.Errorf("%d containers left behind", len(e.docker.ContainerIDs()))
	}
	if ids, _ := e.ckpt.List(); len(ids) != 0 {
		t.Errorf("checkpoints left behind: %v", ids)
	}
	if e.plugin.held() != 0 {
		t.Errorf("IP left allocated: teardown not called")
	}
	// The same pod can be run again once the cause is fixed.
	e.plugin.setUpErr = nil
	e.run(t, podConfig("broken"))
}

func TestRunPodSandboxStartFailureUndoes(t *testing.T) {
	e := newTestEnv(t)
	e.docker.Do(func(s *fakedocker.State) { s.StartErr = errors.New("runc: can't get final child's PID from pipe: EOF") })
	_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("x")})
	if err == nil {
		t.Fatal("want error")
	}
	if len(e.docker.ContainerIDs()) != 0 {
		t.Errorf("container left behind")
	}
	if ids, _ := e.ckpt.List(); len(ids) != 0 {
		t.Errorf("checkpoint left behind: %v", ids)
	}
}

func TestRunPodSandboxHostNetwork(t *testing.T) {
	e := newTestEnv(t)
	cfg := podConfig("hostnet")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE}}
	id := e.run(t, cfg)
	c, _ := e.docker.ContainerInspect(context.Background(), id)
	if c.HostConfig.NetworkMode != "host" || c.HostConfig.PidMode != "host" || c.HostConfig.IpcMode != "host" || c.Config.Hostname != "" {
		t.Errorf("host namespaces not mapped: %+v hostname=%q", c.HostConfig, c.Config.Hostname)
	}
	if len(e.plugin.calls) != 0 {
		t.Errorf("network plugin called for a host-network pod: %v", e.plugin.calls)
	}
	st, _ := e.ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if st.Status.Linux.Namespaces.Options.Network != runtimeapi.NamespaceMode_NODE || st.Status.Linux.Namespaces.Options.Pid != runtimeapi.NamespaceMode_NODE {
		t.Errorf("namespace options = %v", st.Status.Linux.Namespaces.Options)
	}
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if len(e.plugin.calls) != 0 {
		t.Errorf("network plugin called on stop of a host-network pod: %v", e.plugin.calls)
	}
}

func TestRunPodSandboxSameNameAndAttempt(t *testing.T) {
	e := newTestEnv(t)
	id := e.run(t, podConfig("dup"))
	if again := e.run(t, podConfig("dup")); again != id {
		t.Errorf("re-run of a ready sandbox created %s, want %s back", again, id)
	}
	if len(e.docker.ContainerIDs()) != 1 {
		t.Errorf("%d containers, want 1", len(e.docker.ContainerIDs()))
	}
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("dup")})
	if codeOf(err) != codes.AlreadyExists {
		t.Errorf("re-run of a stopped sandbox: %v, want AlreadyExists", err)
	}
}

func TestStopPodSandboxTearsDownBeforeStoppingInfra(t *testing.T) {
	e := newTestEnv(t)
	id := e.run(t, podConfig("s"))
	e.docker.ResetCalls()
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	// The plugin saw a live netns: teardown happened before the stop.
	if !strings.HasPrefix(e.plugin.netnsAtDown, "/proc/") {
		t.Errorf("TearDownPod saw netns %q; it must run before the infra container stops", e.plugin.netnsAtDown)
	}
	if len(e.plugin.portsAtDown) != 1 || e.plugin.portsAtDown[0].HostPort != 18080 {
		t.Errorf("TearDownPod saw port mappings %+v", e.plugin.portsAtDown)
	}
	if e.plugin.held() != 0 {
		t.Error("IP still held after stop")
	}
	st, _ := e.ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Status.Network == nil || st.Status.Network.Ip != "" {
		t.Errorf("after stop: state %v network %v, want NOTREADY with an empty network status", st.Status.State, st.Status.Network)
	}
	// Idempotent, and a second stop does not run DEL again.
	calls := len(e.plugin.calls)
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if len(e.plugin.calls) != calls {
		t.Errorf("second stop called the plugin again: %v", e.plugin.calls)
	}
}

func TestStopPodSandboxAfterContainerRemovedAndRestart(t *testing.T) {
	e := newTestEnv(t)
	id := e.run(t, podConfig("gone"))
	e.docker.RemoveBehindBack(id)

	// A new service over the same checkpoints: the daemon restarted.
	plugin := &fakePlugin{}
	ds, err := NewDockerService(Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake"}, e.docker, e.ckpt, []network.NetworkPlugin{plugin})
	if err != nil {
		t.Fatal(err)
	}
	plugin.ips[id] = net.IPv4(10, 0, 0, 1)
	// The start-up retry frees the IP by itself, from the checkpoint
	// (sandbox_teardown_retry_test.go tests it); what follows checks that
	// Stop and Remove still work on such a sandbox.
	startService(t, ds)
	testutil.Eventually(t, "the start-up retry to release the IP", func() bool { return plugin.held() == 0 })

	list, err := ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(list.Items) != 1 || list.Items[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || list.Items[0].Metadata.Name != "gone" {
		t.Fatalf("checkpoint-only sandbox not listed NOTREADY: %v %v", list, err)
	}
	if _, err := ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("status of checkpoint-only sandbox: %v", err)
	}
	if _, err := ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	plugin.mu.Lock()
	netnsAtDown, portsAtDown := plugin.netnsAtDown, plugin.portsAtDown
	plugin.mu.Unlock()
	if netnsAtDown != "" || len(portsAtDown) != 1 {
		t.Errorf("teardown from checkpoint: netns %q ports %+v", netnsAtDown, portsAtDown)
	}
	if plugin.held() != 0 {
		t.Error("IP not released")
	}
	if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := e.ckpt.List(); len(ids) != 0 {
		t.Errorf("checkpoint left: %v", ids)
	}
	if _, err := ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id}); codeOf(err) != codes.NotFound {
		t.Errorf("status after remove: %v, want NotFound", err)
	}
}

func TestTearDownFailureIsReportedAndRetried(t *testing.T) {
	e := newTestEnv(t)
	id := e.run(t, podConfig("retry"))
	e.plugin.downErr = errors.New("plugin timed out")
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err == nil || !strings.Contains(err.Error(), "plugin timed out") {
		t.Fatalf("stop with failing teardown: %v", err)
	}
	if _, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err == nil {
		t.Fatal("remove succeeded while the IP is still held")
	}
	if _, err := e.ckpt.Get(id); err != nil {
		t.Fatalf("checkpoint dropped while teardown pending: %v", err)
	}
	e.plugin.downErr = nil
	if _, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if e.plugin.held() != 0 {
		t.Error("IP still held")
	}
}

func TestRemovePodSandboxNeverStopped(t *testing.T) {
	e := newTestEnv(t)
	id := e.run(t, podConfig("r"))
	for i := 0; i < 2; i++ {
		if _, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("remove #%d: %v", i+1, err)
		}
	}
	if e.plugin.held() != 0 || len(e.docker.ContainerIDs()) != 0 {
		t.Errorf("after remove: %d IPs, %d containers", e.plugin.held(), len(e.docker.ContainerIDs()))
	}
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Errorf("stop after remove: %v", err)
	}
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{}); codeOf(err) != codes.InvalidArgument {
		t.Errorf("stop with empty ID: %v, want InvalidArgument", err)
	}
}

func TestListPodSandboxFiltersWithoutDockerCalls(t *testing.T) {
	e := newTestEnv(t)
	var ids []string
	for _, n := range []string{"a", "b", "c"} {
		ids = append(ids, e.run(t, podConfig(n)))
	}
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: ids[2]}); err != nil {
		t.Fatal(err)
	}
	list := func(f *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
		t.Helper()
		e.docker.ResetCalls()
		resp, err := e.ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(e.docker.Calls()); n != 0 {
			t.Errorf("ListPodSandbox made %d Docker calls, want none: %v", n, e.docker.Calls())
		}
		return resp.Items
	}
	if got := list(nil); len(got) != 3 {
		t.Errorf("all: %d items", len(got))
	}
	ready := list(&runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
	if len(ready) != 2 {
		t.Errorf("ready: %d items", len(ready))
	}
	byLabel := list(&runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "b"}})
	if len(byLabel) != 1 || byLabel[0].Id != ids[1] || byLabel[0].Labels["app"] != "b" {
		t.Errorf("label selector: %v", byLabel)
	}
	if got := list(&runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"image.label": "from-image"}}); len(got) != 0 {
		t.Errorf("image labels must not match a CRI label selector: %v", got)
	}
	byID := list(&runtimeapi.PodSandboxFilter{Id: ids[0][:12]})
	if len(byID) != 1 || byID[0].Id != ids[0] || byID[0].CreatedAt == 0 {
		t.Errorf("id filter: %v", byID)
	}
}

func TestStatusReportsRuntimeAndNetwork(t *testing.T) {
	e := newTestEnv(t)
	e.docker.SetDown(true)
	testutil.Eventually(t, "RuntimeReady=false", func() bool { r, _ := e.ds.index.Health(); return !r })
	e.plugin.status = errors.New("cni config uninitialized")
	resp, err := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	conds := map[string]*runtimeapi.RuntimeCondition{}
	for _, c := range resp.Status.Conditions {
		conds[c.Type] = c
	}
	if c := conds[runtimeapi.RuntimeReady]; c.Status || !strings.Contains(c.Message, "docker") {
		t.Errorf("RuntimeReady = %v", c)
	}
	if c := conds[runtimeapi.NetworkReady]; c.Status || c.Reason != "NetworkPluginNotReady" || !strings.Contains(c.Message, "cni config uninitialized") {
		t.Errorf("NetworkReady = %v", c)
	}
}

func TestUpdateRuntimeConfigSendsPodCIDR(t *testing.T) {
	e := newTestEnv(t)
	_, err := e.ds.UpdateRuntimeConfig(context.Background(), &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.244.1.0/24"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.plugin.events) != 1 || e.plugin.events[0][network.NetPluginEventPodCIDRKey] != "10.244.1.0/24" {
		t.Errorf("events = %v", e.plugin.events)
	}
	_, err = e.ds.UpdateRuntimeConfig(context.Background(), &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "not-a-cidr"}}})
	if codeOf(err) != codes.InvalidArgument {
		t.Errorf("bad CIDR: %v, want InvalidArgument", err)
	}
}

func TestConcurrentRunSameNameIsRefused(t *testing.T) {
	e := newTestEnv(t)
	release, err := e.ds.reserveName(labelcodec.SandboxName(podConfig("c").Metadata))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	_, err = e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("c")})
	if codeOf(err) != codes.Aborted {
		t.Errorf("concurrent run: %v, want Aborted", err)
	}
}

func TestOOMScoreAdjFloor(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(capEff string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(proc, "self/status"), []byte("Name:\tx\nCapEff:\t"+capEff+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, "self/oom_score_adj"), []byte("-5\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("000001fffeffffff") // bit 24 clear, as on these machines
	floor, err := OOMScoreAdjFloor("auto", proc)
	if err != nil || floor == nil || *floor != -5 {
		t.Fatalf("auto without CAP_SYS_RESOURCE: %v %v", floor, err)
	}
	write("000001ffffffffff")
	if floor, err := OOMScoreAdjFloor("auto", proc); err != nil || floor != nil {
		t.Errorf("auto with CAP_SYS_RESOURCE: %v %v", floor, err)
	}
	if floor, err := OOMScoreAdjFloor("true", proc); err != nil || floor == nil {
		t.Errorf("true: %v %v", floor, err)
	}
	if floor, err := OOMScoreAdjFloor("false", proc); err != nil || floor != nil {
		t.Errorf("false: %v %v", floor, err)
	}
	if _, err := OOMScoreAdjFloor("maybe", proc); err == nil {
		t.Error("invalid mode accepted")
	}
	if got := clampOOMScoreAdj(-998, nil); got != -998 {
		t.Errorf("no floor: %d", got)
	}
}

func TestIndexFollowsChangesBehindNetshimsBack(t *testing.T) {
	e := newTestEnv(t)
	killed := e.run(t, podConfig("killed"))
	removed := e.run(t, podConfig("removed"))
	state := func(id string) runtimeapi.PodSandboxState {
		resp, err := e.ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status.State
	}
	e.docker.KillBehindBack(killed)
	testutil.Eventually(t, "killed sandbox NOTREADY", func() bool { return state(killed) == runtimeapi.PodSandboxState_SANDBOX_NOTREADY })
	e.docker.RemoveBehindBack(removed)
	testutil.Eventually(t, "removed sandbox NOTREADY from its checkpoint", func() bool {
		_, ok := e.ds.store().Get(removed)
		return !ok && state(removed) == runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	})
	// The first Status reads docker info's runtimes, which are then
	// cached (runtime_handlers.go); the polls after it cost nothing.
	if _, err := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	e.docker.ResetCalls()
	for i := 0; i < 10; i++ {
		if _, err := e.ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: killed}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.docker.Calls()); n != 0 {
		t.Errorf("status reads made %d Docker calls: %v", n, e.docker.Calls())
	}
}

func TestIndexResyncsAfterDockerRestart(t *testing.T) {
	e := newTestEnv(t)
	id := e.run(t, podConfig("survivor"))
	e.docker.SetDown(true)
	testutil.Eventually(t, "RuntimeReady=false while Docker is down", func() bool {
		resp, _ := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{})
		return !resp.Status.Conditions[0].Status
	})
	// While the stream is down, the container dies unseen.
	e.docker.Do(func(s *fakedocker.State) {
		c := s.Containers[id]
		c.State.Status, c.State.Running, c.State.Pid = "exited", false, 0
	})
	e.docker.SetDown(false)
	testutil.Eventually(t, "RuntimeReady=true and the index resynced", func() bool {
		resp, _ := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{})
		r, _ := e.ds.store().Get(id)
		return resp.Status.Conditions[0].Status && r != nil && !r.Running()
	})
}

// newUnsyncedService is a service whose Docker engine is down, so that
// its index never syncs.
func newUnsyncedService(t *testing.T) *DockerService {
	t.Helper()
	docker := newFakeDocker()
	docker.Do(func(s *fakedocker.State) { s.Down = true })
	ckpt, err := checkpoint.NewManager(filepath.Join(t.TempDir(), "sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := NewDockerService(Config{PodInfraImage: testPauseImage}, docker, ckpt, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestReadsWaitForFirstSync(t *testing.T) {
	ds := newUnsyncedService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ds.Start(ctx)
	if _, err := ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{}); codeOf(err) != codes.Unavailable {
		t.Errorf("list before the first sync: %v, want Unavailable (an empty list would mean every pod is gone)", err)
	}
}

func TestInterceptorRecoversPanics(t *testing.T) {
	_, err := crirpc.UnaryInterceptor(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/Boom"},
		func(context.Context, any) (any, error) { panic("nil map") })
	if st, _ := status.FromError(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "Boom") {
		t.Errorf("panic became %v, want Internal naming the method", err)
	}
}

func TestOwnCreateAndStartCostNoEventInspects(t *testing.T) {
	e := newTestEnv(t)
	e.docker.ResetCalls()
	id := e.run(t, podConfig("quiet"))
	// Events are applied in order: once the kill is seen, the create and
	// start events before it have been handled too.
	e.docker.KillBehindBack(id)
	testutil.Eventually(t, "die event applied", func() bool { r, _ := e.ds.store().Get(id); return !r.Running() })
	if n := e.docker.Count("ContainerInspect"); n != 1 {
		t.Errorf("RunPodSandbox cost %d inspects, want 1 (the post-start one): %v", n, e.docker.Calls())
	}
}

func TestListPodSandboxCacheFollowsState(t *testing.T) {
	e := newTestEnv(t)
	codec := e.ds.Codec()
	list := func() *runtimeapi.ListPodSandboxResponse {
		t.Helper()
		resp, err := e.ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		// The codec's bytes must be exactly the message's encoding.
		wire, err := codec.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		sent := &runtimeapi.ListPodSandboxResponse{}
		if err := proto.Unmarshal(wire.Materialize(), sent); err != nil || !proto.Equal(sent, resp) {
			t.Fatalf("codec sent bytes that do not decode to the answer (%v)", err)
		}
		return resp
	}
	// kubelet's housekeeping lists the ready sandboxes: cached too.
	ready := func() *runtimeapi.ListPodSandboxResponse {
		t.Helper()
		resp, err := e.ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{
			Filter: &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	a := e.run(t, podConfig("a"))
	first := list()
	if again := list(); again != first {
		t.Error("unchanged state: answer rebuilt instead of served from the cache")
	}
	firstReady := ready()
	if again := ready(); again != firstReady || again == first {
		t.Error("unchanged state: the ready sandboxes' answer rebuilt, or the unfiltered one served for it")
	}
	b := e.run(t, podConfig("b"))
	if got := list(); len(got.Items) != 2 {
		t.Fatalf("after a new pod: %d items", len(got.Items))
	}
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: a}); err != nil {
		t.Fatal(err)
	}
	if got := ready(); len(got.Items) != 1 || got.Items[0].Id != b {
		t.Errorf("ready sandboxes after stopping a: %v, want b only", got.Items)
	}
	for _, it := range list().Items {
		want := runtimeapi.PodSandboxState_SANDBOX_READY
		if it.Id == a {
			want = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		}
		if it.State != want {
			t.Errorf("%s: state %v, want %v", it.Id, it.State, want)
		}
	}
	e.docker.RemoveBehindBack(b)
	testutil.Eventually(t, "removed pod listed NOTREADY from its checkpoint", func() bool {
		for _, it := range list().Items {
			if it.Id == b {
				return it.State == runtimeapi.PodSandboxState_SANDBOX_NOTREADY
			}
		}
		return false
	})
}

// TestStopKilledAfterDelIsNotReadyAtRestart: a netshim killed between the
// CNI DEL (which gave the pod's IP back to the pool) and the infra
// container's stop finds, at restart, a running infra container and a
// checkpoint whose setup was ready. The teardown marks are on disk: the
// sandbox is NOTREADY without an IP, and Remove runs no second DEL. A
// netshim killed during a DEL that never completed finds it NOTREADY too,
// and the next Stop DELs again.
func TestStopKilledAfterDelIsNotReadyAtRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		// delFails: the DEL fails (stands for a kill during it); else the
		// infra container's stop fails (a kill right after the DEL).
		delFails      bool
		wantSecondDel bool
	}{
		{name: "killed after the DEL"},
		{name: "killed during the DEL", delFails: true, wantSecondDel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			id := e.run(t, podConfig("web"))
			e.plugin.mu.Lock()
			if tc.delFails {
				e.plugin.downErr = errors.New("killed mid-DEL")
			}
			e.plugin.mu.Unlock()
			e.docker.Do(func(s *fakedocker.State) {
				s.StopErr = errors.New("killed before the infra container stopped")
			})
			if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err == nil {
				t.Fatal("StopPodSandbox succeeded; the test wants it cut short")
			}
			e.docker.Do(func(s *fakedocker.State) { s.StopErr = nil })

			ds, plugin := e.restart(t)
			st, err := ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			if err != nil {
				t.Fatal(err)
			}
			if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Status.GetNetwork().GetIp() != "" {
				t.Fatalf("after restart: state %s ip %q, want NOTREADY without an IP", st.Status.State, st.Status.GetNetwork().GetIp())
			}
			if _, err := ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
				t.Fatalf("second StopPodSandbox: %v", err)
			}
			if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
				t.Fatalf("RemovePodSandbox: %v", err)
			}
			plugin.mu.Lock()
			dels := 0
			for _, c := range plugin.calls {
				if c == "TearDownPod "+id {
					dels++
				}
			}
			plugin.mu.Unlock()
			if want := map[bool]int{false: 0, true: 1}[tc.wantSecondDel]; dels != want {
				t.Errorf("%d DELs after the restart, want %d", dels, want)
			}
		})
	}
}
