package images

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/imageref"
)

// PullImage pulls an image, with the request's credentials if any, and
// returns its image ref: the image ID ("sha256:<hex>").
//
// The ID rather than a repo digest, because that is what kubelet compares
// it with: ImageStatus(...).Id is what kubelet's image manager reads back
// for an image it did not pull, the image pull records of kubelet ≥ 1.33
// are keyed by it, and critest matches PullImage's result against
// ListImages' ids. It also exists for every image (one imported with
// `docker load` or built locally has no digest) and CreateContainer accepts
// it. containerd returns the ID too.
//
// The spec is normalised first ("busybox" → "docker.io/library/busybox:latest").
// The image is then remembered as present for EnsurePresent, under the spec as
// given and normalised.
func (s *Service) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	spec := req.GetImage().GetImage()
	named, err := imageref.PullRef(spec)
	if err != nil {
		return nil, err
	}
	auth, err := registryAuth(req.GetAuth(), named)
	if err != nil {
		return nil, err
	}
	ref := named.String()
	if err := s.pull(ctx, ref, auth); err != nil {
		return nil, err
	}
	ins, err := s.engine.ImageInspect(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("inspecting image %s after pulling it: %w", ref, err)
	}
	s.markPresent(spec, ref)
	klog.FromContext(ctx).V(2).Info("Pulled image", "image", ref, "imageID", ins.ID)
	return &runtimeapi.PullImageResponse{ImageRef: ins.ID}, nil
}
