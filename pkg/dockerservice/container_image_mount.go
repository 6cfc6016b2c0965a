package dockerservice

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
)

// checkImageVolumes makes sure the images of a container's image volumes
// are present, so that a missing one is NotFound naming it: Docker would
// fail the create with a message about the container's image.
func (ds *DockerService) checkImageVolumes(ctx context.Context, cfg *runtimeapi.ContainerConfig) error {
	for _, m := range cfg.GetMounts() {
		if !dockerspec.IsImageMount(m) {
			continue
		}
		ref := m.GetImage().GetImage()
		_, err := ds.engine.ImageInspect(ctx, ref)
		if errdefs.IsNotFound(err) {
			return crirpc.NotFoundf("image %q of the image volume at %s is not present on the node; pull it first (kubelet pulls image volumes before it creates the container)", ref, m.GetContainerPath())
		}
		if err != nil {
			return fmt.Errorf("inspecting image %q of the image volume at %s: %w", ref, m.GetContainerPath(), err)
		}
	}
	return nil
}
