package main

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// containerInspector is the one Docker call checkPauseless makes; the
// Docker client is one, and tests give a fake.
type containerInspector interface {
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
}

// checkPauseless checks that the sandbox id has no Docker container: the
// ID of a sandbox with a pause container is that container's, and a
// pause-less one's is netshim's own. The pause-less netshim says at
// start-up that new pods get that mode (checkMode), but a pod it judged
// unable to go without a pause container (one sharing a PID namespace,
// say) would silently get one, and the rows would be the pinned mode's.
func checkPauseless(ctx context.Context, docker containerInspector, id string) error {
	c, err := docker.ContainerInspect(ctx, id)
	switch {
	case errdefs.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("checking that pause-less sandbox %.12s has no container: %w", id, err)
	}
	name := "?"
	if c.ContainerJSONBase != nil {
		name = c.Name
	}
	return fmt.Errorf("sandbox %.12s has a Docker container (%s): the netshim made it with a pause container, not pause-less (a pod sharing a PID namespace keeps one: the bench's pods must have NamespaceOption Pid CONTAINER)", id, name)
}
