// Package dockerservice implements the CRI RuntimeService on top of a
// Docker engine, with pod networking delegated to a network.NetworkPlugin
// through a network.PluginManager, and serves the CRI ImageService of
// pkg/dockerservice/images beside it (register.go).
//
// Each RPC family lives in its own file named after it (sandbox_run.go,
// sandbox_stop.go, ...). Its parts are packages of their own, below it in
// docs/design/architecture.md: the engine client, the label codec, the
// mapping of requests to Docker, stats, logs, events; logging and the
// error-to-status mapping are pkg/dockerservice/crirpc's.
package dockerservice

import (
	"context"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/crilog"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/dockerservice/events"
	"github.com/netshim/netshim/pkg/dockerservice/images"
	"github.com/netshim/netshim/pkg/dockerservice/index"
	"github.com/netshim/netshim/pkg/dockerservice/podstate"
	"github.com/netshim/netshim/pkg/dockerservice/stats"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/layerusage"
	"github.com/netshim/netshim/pkg/metrics"
	"github.com/netshim/netshim/pkg/network"
	"github.com/netshim/netshim/pkg/podns"
)

// DefaultImagePullProgressDeadline is how long a pull may go without a
// progress message before it is cancelled (images.DefaultPullProgressDeadline).
const DefaultImagePullProgressDeadline = images.DefaultPullProgressDeadline

// Config holds the settings of a DockerService.
type Config struct {
	// PodInfraImage is the image of the pause container.
	PodInfraImage string
	// OOMScoreAdjFloor, when set, is the lowest oom_score_adj netshim asks
	// Docker for (see OOMScoreAdjFloor).
	OOMScoreAdjFloor *int
	// NetworkPluginName selects the plugin among the candidates.
	NetworkPluginName string
	// Network is handed to the plugin's Init.
	Network network.PluginConfig
	// StopTimeout bounds how long a sandbox's containers get to exit.
	StopTimeout time.Duration
	// ImagePullProgressDeadline cancels a pull that reports no progress
	// for this long (--image-pull-progress-deadline; 0: the default,
	// DefaultImagePullProgressDeadline).
	ImagePullProgressDeadline time.Duration
	// RootDir is netshim's state directory (--root-dir): no container log
	// file may be inside it.
	RootDir string
	// LayerUsage tunes the background measuring of containers' writable
	// layers (pkg/dockerservice/stats, layers.go); zero fields take the defaults.
	LayerUsage layerusage.Options
	// Metrics, if set, receives the service's metrics (metrics.go); nil
	// records nothing.
	Metrics *metrics.Metrics
	// AdoptCRIDockerd takes over the sandboxes and containers cri-dockerd
	// made on the same engine, and its checkpoints under
	// CRIDockerdRootDir (adopt.go).
	AdoptCRIDockerd   bool
	CRIDockerdRootDir string
	// SandboxNetNS is where sandboxes' network namespaces come from:
	// SandboxNetNSAuto, SandboxNetNSPinned or SandboxNetNSDocker (""
	// is docker); NetNSDir is where pinned ones live (sandbox_netns.go).
	SandboxNetNS string
	NetNSDir     string
}

// DockerService implements the CRI on Docker.
type DockerService struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	cfg     Config
	network *network.PluginManager
	// index keeps the records of netshim's containers and sandboxes
	// current; every read of container state goes to its store
	// (ds.store()), writes go through it (pkg/dockerservice/index).
	index *index.Index
	// containers is the workload containers' own state: log followers,
	// the exec killer, the cached cgroup driver (container_runtime.go).
	containers *containerRuntime
	// images is the CRI ImageService, registered on its own; the
	// sandbox modes ask it for the pause image (sandbox_infra.go) and
	// adoption for the adopted images' names (pkg/dockerservice/images).
	images *images.Service
	// engine is the Docker engine: its client, and what netshim knows
	// of it: its version, the negotiated API version, its runtimes
	// (pkg/dockerservice/engine).
	engine *engine.Engine
	// streaming serves exec/attach/port-forward sessions (streaming.go).
	streaming StreamingServer
	// events publishes container events (container_events.go,
	// pkg/dockerservice/events).
	events *events.Publisher
	// pins is the pinning of pod namespaces under --netns-dir
	// (sandbox_netns.go, sandbox_sysctls.go).
	pins nsPinning
	// userns is what this node can do for pods with their own user
	// namespace (userns.go).
	userns *usernsCaps

	// pods is netshim's own state of the sandboxes: the checkpoint
	// mirror, the checkpoints that could not be loaded at start-up
	// (rebuilt after the first sync, checkpoint_recover.go), the names
	// being created, and each sandbox's lifecycle lock, which serialises
	// RunPodSandbox (from the moment its container exists),
	// StopPodSandbox, RemovePodSandbox and the start-up teardown of one
	// sandbox, together with the writes of its checkpoint's disk and
	// memory copies (sandbox_lock.go).
	pods *podstate.Store

	// wire caches the encoded ListPodSandbox and ListContainers answers
	// kubelet polls (wire_cache.go).
	wire wireCaches
	// startup is the work done once, after the first index sync.
	startup startupOnce
}

// startupOnce is the work done once, after the index's first sync
// (state_sync.go).
type startupOnce struct {
	// recover takes over cri-dockerd's pods, rebuilds the sandboxes whose
	// checkpoint could not be loaded, and sweeps --netns-dir.
	recover sync.Once
	// tearDown starts the teardown retry of dead sandboxes
	// (sandbox_teardown_retry.go).
	tearDown sync.Once
}

// store is the index's store, which every read of container state goes
// to.
func (ds *DockerService) store() *store.Store { return ds.index.Store() }

// NewDockerService builds the service: it loads the checkpoints, then
// selects and initialises the network plugin (which may call back into the
// service as its network.Host).
func NewDockerService(cfg Config, client engine.Client, checkpoints *checkpoint.Manager, plugins []network.NetworkPlugin) (*DockerService, error) {
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	ds := &DockerService{
		cfg:    cfg,
		engine: engine.New(client),
		pods:   podstate.New(checkpoints),
		pins: nsPinning{
			pinning:           map[string]bool{},
			writeSysctls:      podns.WriteSysctls,
			netSysctlDefaults: engineNetSysctlDefaults(hostHasSysctl),
		},
		containers: newContainerRuntime(client, crilog.WithOnRestart(cfg.Metrics.LogFollowerRestarted)),
		userns:     newUsernsCaps(),
	}
	ds.index = ds.newIndex()
	ds.containers.oom.floor = cfg.OOMScoreAdjFloor
	ds.containers.layers = stats.NewLayers(client.Info, ds.store(), cfg.LayerUsage)
	ds.containers.stats = stats.New(stats.Options{WritableLayer: ds.containers.layers.WritableLayer})
	ds.images = images.New(ds.engine, images.Options{
		PodInfraImage:        cfg.PodInfraImage,
		PullProgressDeadline: cfg.ImagePullProgressDeadline,
		WritableLayerBytes:   ds.containers.layers.TotalBytes,
	})
	ds.events = events.New(eventSource{ds})
	ds.store().OnChange(ds.events.Touch)
	cfg.Metrics.SetStateCounts(ds.countByState) // metrics.go
	cfg.Metrics.SetModeCounts(ds.countByMode)
	ds.containers.streams.OnSettled(ds.events.Touch)
	if err := ds.pods.Load(); err != nil {
		return nil, err
	}
	ds.killOrphanedPlugins() // cni_orphans.go
	// --sandbox-netns and --netns-dir (sandbox_netns.go), then what the
	// sandbox modes keep outside Docker (sandbox_controller.go).
	if err := ds.initPinning(); err != nil {
		return nil, err
	}
	ds.restoreSandboxes()
	plugin, err := network.InitNetworkPlugin(plugins, cfg.NetworkPluginName, &networkHost{ds}, cfg.Network)
	if err != nil {
		return nil, err
	}
	ds.network = network.NewPluginManager(plugin)
	klog.InfoS("Pod networking", "plugin", plugin.Name())
	return ds, nil
}

// getCheckpoint returns the cached checkpoint of a sandbox, or nil.
func (ds *DockerService) getCheckpoint(id string) *checkpoint.PodSandbox {
	return ds.pods.Get(id)
}

// putCheckpoint writes a checkpoint to disk, then to the mirror.
func (ds *DockerService) putCheckpoint(cp *checkpoint.PodSandbox) error {
	if err := ds.pods.Save(cp); err != nil {
		return err
	}
	ds.checkpointChanged(cp.SandboxID)
	return nil
}

// updateCheckpoint changes a sandbox's checkpoint, copy on write, to disk
// then to the mirror (podstate.Store.Update), under the sandbox's
// lifecycle lock. It returns the changed copy, saved or not (nil when
// the sandbox has none).
func (ds *DockerService) updateCheckpoint(id string, fn func(*checkpoint.PodSandbox)) (*checkpoint.PodSandbox, error) {
	updated, err := ds.pods.Update(id, fn)
	if updated != nil && err == nil {
		ds.checkpointChanged(id)
	}
	return updated, err
}

// removeCheckpoint deletes a checkpoint from disk and from the mirror.
func (ds *DockerService) removeCheckpoint(id string) error {
	if err := ds.pods.Remove(id); err != nil {
		return err
	}
	ds.checkpointChanged(id)
	return nil
}

// Close releases what the service holds. It does not touch pods: they
// keep running across a netshim restart.
func (ds *DockerService) Close() {
	// Log followers resume from their files' last line on restart.
	ds.containers.logs.StopAll()
	ds.containers.layers.Stop()
	if s, ok := ds.network.Plugin().(interface{ Stop() }); ok {
		s.Stop()
	}
}

func backgroundCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }
