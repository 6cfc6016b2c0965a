package images

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/imageref"
)

// RemoveImage removes the image a spec names (kubelet passes its ID, crictl
// a tag or ID) with all its references. A missing image is success: the
// CRI asks RemoveImage to be idempotent.
//
// Docker refuses to remove by ID an image referenced by several
// repositories unless forced, and forcing would also remove an image that
// a stopped container still uses. So each reference is removed in turn
// without force (Docker deletes the image with its last reference), then
// the ID, which is already gone unless the image had no reference. An
// image in use by a container stays, and the error (FailedPrecondition)
// says which container.
func (s *Service) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	spec := req.GetImage().GetImage()
	ref, err := imageref.LookupRef(spec)
	if err != nil {
		return nil, err
	}
	ins, err := s.engine.ImageInspect(ctx, ref)
	if errdefs.IsNotFound(err) {
		s.forgetRefs(map[string]bool{spec: true, ref: true})
		return &runtimeapi.RemoveImageResponse{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspecting image %s: %w", ref, err)
	}
	tags, digests := imageref.RepoRefs(ins.RepoTags, ins.RepoDigests)
	gone := map[string]bool{spec: true, ref: true, ins.ID: true}
	for _, r := range append(tags, digests...) {
		gone[r] = true
	}
	// Whatever happens below, the image may be gone or partly untagged:
	// EnsurePresent must look again.
	defer s.forgetRefs(gone)

	for _, r := range append(append(ins.RepoTags, ins.RepoDigests...), ins.ID) {
		if r == "<none>:<none>" || r == "<none>@<none>" {
			continue
		}
		_, err := s.engine.ImageRemove(ctx, r, image.RemoveOptions{PruneChildren: true})
		if err != nil && !errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("removing image %s (%s): %w", ins.ID, r, err)
		}
	}
	klog.FromContext(ctx).V(2).Info("Removed image", "image", spec, "imageID", ins.ID)
	return &runtimeapi.RemoveImageResponse{}, nil
}
