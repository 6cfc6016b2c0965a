// Package engine is the Docker engine netshim talks to: the part of the
// Docker API netshim uses (Client), its instrumentation, and what netshim
// knows of the engine (Engine): the events sessions, its version and the
// negotiated API version, and the catalogue of its runtimes, which CRI
// runtime handlers name.
package engine

import (
	"context"
	"io"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	dnetwork "github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Client is the part of the Docker API netshim uses. It is cut here so
// unit tests can run against a fake; *client.Client satisfies it.
type Client interface {
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
	// Engine.APIVersion only.
	ClientVersion() string
	// NegotiateAPIVersionPing lowers ClientVersion to the engine's.
	NegotiateAPIVersionPing(types.Ping)

	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
}

var _ Client = (*client.Client)(nil)

// NewClient connects to the Docker engine at endpoint (e.g.
// unix:///var/run/docker.sock) and negotiates the API version on first use,
// so netshim works with any engine from API 1.41 (Docker 20.10) on.
func NewClient(endpoint string) (*client.Client, error) {
	return client.NewClientWithOpts(client.WithHost(endpoint), client.WithAPIVersionNegotiation())
}
