package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	cniversion "github.com/containernetworking/cni/pkg/version"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// floor does the least any Docker+CNI runtime must do for a sandbox,
// in-process and straight on the engine's socket: create and start the
// pause container, one inspect for its pid, and CNI ADD of the same
// network (after the loopback network, when withLo); for teardown, CNI
// DEL and a forced remove.
type floor struct {
	docker   *client.Client
	cni      *libcni.CNIConfig
	net      *libcni.NetworkConfigList
	lo       *libcni.NetworkConfigList
	cacheDir string
	image    string
	oomAdj   int
	runID    string

	mu   sync.Mutex
	live map[string]*floorPod
}

// setNetwork switches the chain later pods are added to (the bench's
// bridge chain or its slow chain); pods already made keep theirs.
func (f *floor) setNetwork(confList []byte) error {
	list, err := libcni.ConfListFromBytes(confList)
	if err != nil {
		return fmt.Errorf("parsing the bench network: %w", err)
	}
	f.mu.Lock()
	f.net = list
	f.mu.Unlock()
	return nil
}

func (f *floor) network() *libcni.NetworkConfigList {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.net
}

type floorPod struct {
	id     string
	netns  string
	withLo bool
	rt     *libcni.RuntimeConf
	net    *libcni.NetworkConfigList // the chain it was added to
	phases floorPhases
}

// floorPhases is how long each step of a floor pod's set-up took: where
// the time goes, e.g. how much of it is the CNI ADD that a runtime could
// run in parallel with the start.
type floorPhases struct {
	create, start, inspect, loADD, add time.Duration
}

// Labels on floor containers. They are not netshim's, so netshim never
// lists the floor's containers as sandboxes.
const (
	floorLabelRun  = "netshim.bench/floor-run"
	floorLabelType = "netshim.bench/type"
)

func newFloor(docker *client.Client, binDirs []string, cacheDir string, confList []byte, image, runID string) (*floor, error) {
	list, err := libcni.ConfListFromBytes(confList)
	if err != nil {
		return nil, fmt.Errorf("parsing the bench network: %w", err)
	}
	lo, err := libcni.ConfListFromBytes([]byte(loopbackConfList))
	if err != nil {
		return nil, err
	}
	oomAdj, err := sandboxOOMScoreAdj()
	if err != nil {
		return nil, err
	}
	return &floor{
		docker:   docker,
		cni:      newCNI(binDirs, cacheDir),
		net:      list,
		lo:       lo,
		cacheDir: cacheDir,
		image:    image,
		oomAdj:   oomAdj,
		runID:    runID,
		live:     map[string]*floorPod{},
	}, nil
}

// run creates one floor pod for cfg and returns how long it took.
func (f *floor) run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, withLo bool) (*floorPod, time.Duration, error) {
	md := cfg.GetMetadata()
	name := strings.Join([]string{"nsbench", "POD", md.Name, md.Namespace, md.Uid, strconv.FormatUint(uint64(md.Attempt), 10)}, "_")
	config, hostConfig := f.dockerConfig(cfg)

	start := time.Now()
	lap := start
	since := func() time.Duration {
		now := time.Now()
		d := now.Sub(lap)
		lap = now
		return d
	}
	created, err := f.docker.ContainerCreate(ctx, config, hostConfig, nil, nil, name)
	if err != nil {
		return nil, 0, fmt.Errorf("floor: creating %s: %w", name, err)
	}
	p := &floorPod{id: created.ID, withLo: withLo}
	p.phases.create = since()
	f.track(p)
	if err := f.docker.ContainerStart(ctx, p.id, container.StartOptions{}); err != nil {
		return nil, 0, fmt.Errorf("floor: starting %s: %w", name, err)
	}
	p.phases.start = since()
	c, err := f.docker.ContainerInspect(ctx, p.id)
	if err != nil {
		return nil, 0, fmt.Errorf("floor: inspecting %s: %w", name, err)
	}
	if c.State == nil || !c.State.Running || c.State.Pid == 0 {
		return nil, 0, fmt.Errorf("floor: container %s is not running after start", name)
	}
	p.netns = fmt.Sprintf("/proc/%d/ns/net", c.State.Pid)
	p.rt = f.runtimeConf(cfg, p.id, p.netns)
	p.net = f.network()
	p.phases.inspect = since()
	if withLo {
		lo := *p.rt
		lo.IfName = "lo"
		lo.CapabilityArgs = nil
		if _, err := f.cni.AddNetworkList(ctx, f.lo, &lo); err != nil {
			return nil, 0, fmt.Errorf("floor: loopback ADD for %s: %w", name, err)
		}
		p.phases.loADD = since()
	}
	if _, err := f.cni.AddNetworkList(ctx, p.net, p.rt); err != nil {
		return nil, 0, fmt.Errorf("floor: ADD for %s: %w", name, err)
	}
	p.phases.add = since()
	return p, lap.Sub(start), nil
}

// teardown undoes run and returns how long it took.
func (f *floor) teardown(ctx context.Context, p *floorPod) (time.Duration, error) {
	start := time.Now()
	if err := f.del(ctx, p); err != nil {
		return 0, err
	}
	if err := f.docker.ContainerRemove(ctx, p.id, container.RemoveOptions{Force: true}); err != nil {
		return 0, fmt.Errorf("floor: removing %s: %w", p.id, err)
	}
	d := time.Since(start)
	f.untrack(p)
	return d, nil
}

func (f *floor) del(ctx context.Context, p *floorPod) error {
	if p.rt == nil {
		return nil // never attached
	}
	if err := f.cni.DelNetworkList(ctx, p.net, p.rt); err != nil {
		return fmt.Errorf("floor: DEL for %s: %w", p.id, err)
	}
	if p.withLo {
		lo := *p.rt
		lo.IfName = "lo"
		lo.CapabilityArgs = nil
		if err := f.cni.DelNetworkList(ctx, f.lo, &lo); err != nil {
			return fmt.Errorf("floor: loopback DEL for %s: %w", p.id, err)
		}
	}
	return nil
}

func (f *floor) track(p *floorPod) {
	f.mu.Lock()
	f.live[p.id] = p
	f.mu.Unlock()
}

func (f *floor) untrack(p *floorPod) {
	f.mu.Lock()
	delete(f.live, p.id)
	f.mu.Unlock()
}

// cleanup tears down every floor pod still known, then removes any
// container of this run that Docker still has (e.g. one whose create
// answered after the caller gave up).
func (f *floor) cleanup(ctx context.Context) error {
	f.mu.Lock()
	pods := make([]*floorPod, 0, len(f.live))
	for _, p := range f.live {
		pods = append(pods, p)
	}
	f.mu.Unlock()
	var errs []error
	for _, p := range pods {
		if _, err := f.teardown(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := f.removeLabelled(ctx, f.cni, floorLabelRun+"="+f.runID); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeLabelled force-removes the containers with all the Docker label
// selectors (key=value), each after a CNI DEL through cni without a netns:
// with the container gone that only releases its IP and cache entry.
func (f *floor) removeLabelled(ctx context.Context, cni *libcni.CNIConfig, selectors ...string) error {
	args := filters.NewArgs()
	for _, sel := range selectors {
		args.Add("label", sel)
	}
	left, err := f.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return fmt.Errorf("listing leftover containers (%s): %w", strings.Join(selectors, ", "), err)
	}
	var errs []error
	for _, c := range left {
		fmt.Printf("cleanup: removing leftover container %.12s %v\n", c.ID, c.Names)
		if err := f.docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing leftover container %s: %w", c.ID, err))
		}
		_ = cni.DelNetworkList(ctx, f.network(), &libcni.RuntimeConf{ContainerID: c.ID, IfName: "eth0"})
	}
	return errors.Join(errs...)
}

// dockerConfig is what netshim asks Docker for a sandbox of this config,
// with the floor's own labels in place of netshim's.
func (f *floor) dockerConfig(cfg *runtimeapi.PodSandboxConfig) (*container.Config, *container.HostConfig) {
	md := cfg.GetMetadata()
	labels := map[string]string{
		floorLabelType:                "floor",
		floorLabelRun:                 f.runID,
		"netshim.bench/pod-name":      md.Name,
		"netshim.bench/pod-namespace": md.Namespace,
		"netshim.bench/pod-uid":       md.Uid,
		"netshim.bench/attempt":       strconv.FormatUint(uint64(md.Attempt), 10),
		"netshim.bench/ns-options":    `{"pid":1}`,
	}
	for k, v := range cfg.GetLabels() {
		labels["label."+k] = v
	}
	for k, v := range cfg.GetAnnotations() {
		labels["annotation."+k] = v
	}
	dns := cfg.GetDnsConfig()
	return &container.Config{Image: f.image, Hostname: cfg.GetHostname(), Labels: labels},
		&container.HostConfig{
			NetworkMode: "none",
			IpcMode:     "shareable",
			OomScoreAdj: f.oomAdj,
			DNS:         dns.GetServers(),
			DNSSearch:   dns.GetSearches(),
			DNSOptions:  dns.GetOptions(),
		}
}

// runtimeConf is the libcni RuntimeConf netshim builds for a pod without
// port mappings: pod identity in CNI_ARGS, the DNS capability argument.
func (f *floor) runtimeConf(cfg *runtimeapi.PodSandboxConfig, id, netns string) *libcni.RuntimeConf {
	md := cfg.GetMetadata()
	dns := cfg.GetDnsConfig()
	return &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       netns,
		IfName:      "eth0",
		CacheDir:    f.cacheDir,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", md.Namespace},
			{"K8S_POD_NAME", md.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", id},
			{"K8S_POD_UID", md.Uid},
		},
		CapabilityArgs: map[string]any{
			"dns": map[string][]string{"servers": dns.GetServers(), "searches": dns.GetSearches(), "options": dns.GetOptions()},
		},
	}
}

// newCNI returns a libcni client with its own plugin executor (libcni's
// lazily built default one is not safe for concurrent use).
func newCNI(binDirs []string, cacheDir string) *libcni.CNIConfig {
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: cniversion.PluginDecoder{}}
	return libcni.NewCNIConfigWithCacheDir(binDirs, cacheDir, exec)
}

// sandboxOOMScoreAdj is the oom_score_adj netshim gives sandboxes here:
// kubelet's -998, or this process's own value when it lacks
// CAP_SYS_RESOURCE and so cannot go lower (netshim's default "auto" clamp;
// the netshim under test inherits our value).
func sandboxOOMScoreAdj() (int, error) {
	const want = -998
	const capSysResource = 24
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var capEff uint64
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			capEff, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing CapEff: %w", err)
			}
		}
	}
	if capEff&(1<<capSysResource) != 0 {
		return want, nil
	}
	raw, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, err
	}
	own, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return 0, err
	}
	return max(want, own), nil
}
