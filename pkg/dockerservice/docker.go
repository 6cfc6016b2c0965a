package dockerservice

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	dnetwork "github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"k8s.io/klog/v2"
)

// minDockerAPI is the oldest Docker API netshim is made for (Docker 20.10).
const minDockerAPI = "1.41"

// DockerClient is the part of the Docker API netshim uses. It is cut here so
// unit tests can run against a fake; *client.Client satisfies it.
type DockerClient interface {
	Ping(ctx context.Context) (types.Ping, error)
	ServerVersion(ctx context.Context) (types.Version, error)
	Info(ctx context.Context) (system.Info, error)
	// DiskUsage is asked for images only, and only on the containerd
	// image store, whose layers live in containerd's root, not Docker's.
	DiskUsage(ctx context.Context, options types.DiskUsageOptions) (types.DiskUsage, error)

	ImageInspect(ctx context.Context, image string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImagePull(ctx context.Context, ref string, options image.PullOptions) (io.ReadCloser, error)
	ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error)
	ImageRemove(ctx context.Context, image string, options image.RemoveOptions) ([]image.DeleteResponse, error)

	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *dnetwork.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, container string, options container.StartOptions) error
	ContainerStop(ctx context.Context, container string, options container.StopOptions) error
	ContainerRemove(ctx context.Context, container string, options container.RemoveOptions) error
	ContainerInspect(ctx context.Context, container string) (container.InspectResponse, error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerUpdate(ctx context.Context, container string, updateConfig container.UpdateConfig) (container.UpdateResponse, error)
	// ContainerLogs feeds the CRI log followers (crilog.LogSource).
	ContainerLogs(ctx context.Context, container string, options container.LogsOptions) (io.ReadCloser, error)
	ContainerExecCreate(ctx context.Context, container string, options container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, options container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
	// ClientVersion is the API version requests are sent with: the
	// client's newest until negotiated, so read it through
	// DockerService.dockerAPIVersion only.
	ClientVersion() string
	// NegotiateAPIVersionPing lowers ClientVersion to the engine's.
	NegotiateAPIVersionPing(types.Ping)

	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
}

var _ DockerClient = (*client.Client)(nil)

// NewDockerClient connects to the Docker engine at endpoint (e.g.
// unix:///var/run/docker.sock) and negotiates the API version on first use,
// so netshim works with any engine from API 1.41 (Docker 20.10) on.
func NewDockerClient(endpoint string) (*client.Client, error) {
	return client.NewClientWithOpts(client.WithHost(endpoint), client.WithAPIVersionNegotiation())
}

// Docker reads a request by the API version in its path: from 1.44 a
// read-only bind is recursively read-only unless told otherwise, and a
// field newer than that version is ignored or refused. So what netshim
// asks for depends on the version the client sends, which is the client's
// newest (1.51) until the first request negotiates it down to the
// engine's; before that, or if that first ping failed, ClientVersion()
// says a version the engine may not speak. netshim therefore negotiates
// itself, once when the events stream first connects (and again on each
// reconnect: the engine may have been replaced by an older one), or at the
// first request that needs the version, and keeps the answer.

// negotiateAPIVersion pings the engine, lowers the client's API version
// to the engine's, and records the result.
func (ds *DockerService) negotiateAPIVersion(ctx context.Context) (string, error) {
	ping, err := ds.engine.Ping(ctx)
	if err != nil {
		return "", fmt.Errorf("negotiating the Docker API version: %w", err)
	}
	ds.engine.NegotiateAPIVersionPing(ping)
	v := ds.engine.ClientVersion()
	if changed := ds.engine.versions.setAPI(v); changed {
		klog.InfoS("Docker API version negotiated", "apiVersion", v, "engineAPIVersion", ping.APIVersion)
		if versions.LessThan(v, minDockerAPI) {
			klog.InfoS("WARNING: the Docker engine is older than netshim supports; some requests may fail", "apiVersion", v, "minimum", minDockerAPI)
		}
	}
	return v, nil
}

// dockerAPIVersion is the negotiated API version, negotiating it if that
// has not been done yet.
func (ds *DockerService) dockerAPIVersion(ctx context.Context) (string, error) {
	if _, v := ds.engine.versions.get(); v != "" {
		return v, nil
	}
	return ds.negotiateAPIVersion(ctx)
}

// engineState is the engine netshim talks to: its client, whose calls
// are the engine's (ds.engine.ContainerInspect), and what netshim knows
// of it.
type engineState struct {
	DockerClient
	// session counts the events streams that synced the index: a
	// dockerd restart starts a new one (settings read of the engine are
	// read again then).
	session atomic.Uint64
	// versions are the engine's version, read when the events stream
	// connects, and the negotiated API version.
	versions engineVersions
	// runtimes caches the engine's runtimes, which runtime handlers name
	// (runtime_handlers.go).
	runtimes *runtimeCatalog
}

// engineVersions is what netshim learnt of the engine it talks to: its
// version, which Version reports, and the negotiated API version, which
// decides what netshim asks for. Both are read again when the events
// stream reconnects, as the engine may have been replaced; they have
// their own lock, as they change apart from any other state.
type engineVersions struct {
	mu          sync.Mutex
	engine, api string
}

func (v *engineVersions) get() (engine, api string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.engine, v.api
}

func (v *engineVersions) setEngine(engine string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.engine = engine
}

// setAPI records the negotiated API version and reports whether it
// changed.
func (v *engineVersions) setAPI(api string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	changed := v.api != api
	v.api = api
	return changed
}
