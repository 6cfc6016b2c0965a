package streaming

import (
	"context"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// DockerAPI is the part of the Docker API the streaming runtime uses. It is
// narrower than dockerservice's client interface on purpose: this package
// must not depend on dockerservice, and its tests fake only these calls.
// *client.Client satisfies it.
type DockerAPI interface {
	ContainerInspect(ctx context.Context, container string) (container.InspectResponse, error)

	ContainerExecCreate(ctx context.Context, container string, options container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, options container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
	ContainerExecResize(ctx context.Context, execID string, options container.ResizeOptions) error

	ContainerAttach(ctx context.Context, container string, options container.AttachOptions) (types.HijackedResponse, error)
	ContainerResize(ctx context.Context, container string, options container.ResizeOptions) error
}

var _ DockerAPI = (*client.Client)(nil)
