package dockerspec

import (
	"path/filepath"

	"github.com/docker/docker/api/types/mount"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/dockerservice/imageref"
)

// Image volumes (KEP 4639): a CRI mount with an image instead of a host
// path mounts that image's filesystem, read-only, optionally one of its
// directories (image_sub_path). kubelet pulls the image first and passes
// the pull's image_ref, which is used as it is.
//
// Docker 28 (API 1.48) has the mount type for it: mount.TypeImage, with
// ImageOptions.Subpath. Older engines have nothing to do it with, so the
// request is refused, naming the version needed.

// minImageMountAPI is the first Docker API with image mounts.
const minImageMountAPI = "1.48"

// IsImageMount says whether a CRI mount is an image volume.
func IsImageMount(m *runtimeapi.Mount) bool { return m.GetImage().GetImage() != "" }

// validateImageMount checks an image volume mount before any Docker call:
// an image instead of a host path, and a sub path inside the image.
func validateImageMount(what string, m *runtimeapi.Mount) error {
	dst := ShortQuote(m.GetContainerPath())
	if m.GetHostPath() != "" {
		return crirpc.InvalidArgf("%s: mount %s has both a host path and an image; an image volume has no host path", what, dst)
	}
	if _, err := imageref.LookupRef(m.GetImage().GetImage()); err != nil {
		return crirpc.InvalidArgf("%s: image volume %s: %v", what, dst, err)
	}
	if p := m.GetImageSubPath(); p != "" && !filepath.IsLocal(p) {
		return crirpc.InvalidArgf("%s: image volume %s: image_sub_path %s must be a relative path inside the image, without '..'", what, dst, ShortQuote(p))
	}
	return nil
}

// imageVolumeMount maps an image volume to Docker's image mount. seen
// holds the container paths already mounted.
func imageVolumeMount(m *runtimeapi.Mount, apiVersion string, seen map[string]bool) (mount.Mount, error) {
	dst := filepath.Clean(m.GetContainerPath())
	if !filepath.IsAbs(dst) {
		return mount.Mount{}, crirpc.InvalidArgf("mount %q: the container path must be absolute", m.GetContainerPath())
	}
	if !engine.APIAtLeast(apiVersion, minImageMountAPI) {
		return mount.Mount{}, crirpc.InvalidArgf("mount %s: image volumes need Docker 28 (API %s) or later; this engine speaks API %s", dst, minImageMountAPI, apiVersion)
	}
	if m.GetHostPath() != "" {
		return mount.Mount{}, crirpc.InvalidArgf("mount %s: an image volume has no host path", dst)
	}
	if len(m.GetUidMappings()) > 0 || len(m.GetGidMappings()) > 0 {
		return mount.Mount{}, crirpc.InvalidArgf("mount %s: an image volume cannot be idmapped (netshim idmaps bind mounts only, for a pod with its own user namespace)", dst)
	}
	if m.GetPropagation() != runtimeapi.MountPropagation_PROPAGATION_PRIVATE {
		// Docker's image mounts take no propagation option.
		return mount.Mount{}, crirpc.InvalidArgf("mount %s: an image volume can only have private propagation", dst)
	}
	if seen[dst] {
		return mount.Mount{}, crirpc.InvalidArgf("two mounts target %s", dst)
	}
	seen[dst] = true
	// Docker mounts images read-only whatever is asked; saying so keeps
	// the request what the CRI means. SELinux relabeling does not apply:
	// the image's files carry the container's context already.
	mt := mount.Mount{Type: mount.TypeImage, Source: m.GetImage().GetImage(), Target: dst, ReadOnly: true}
	if p := m.GetImageSubPath(); p != "" {
		mt.ImageOptions = &mount.ImageOptions{Subpath: p}
	}
	return mt, nil
}
