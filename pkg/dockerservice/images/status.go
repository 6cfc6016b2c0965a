package images

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/imageref"
)

// ImageStatus returns the image a spec names, or no image (not an error)
// when it does not exist. With verbose, Info["info"] holds Docker's image
// inspect document as JSON.
func (s *Service) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref, err := imageref.LookupRef(req.GetImage().GetImage())
	if err != nil {
		return nil, err
	}
	ins, err := s.engine.ImageInspect(ctx, ref)
	if errdefs.IsNotFound(err) {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspecting image %s: %w", ref, err)
	}
	resp := &runtimeapi.ImageStatusResponse{
		Image: s.criImage(ins.ID, inspectedImage(ins, "")),
	}
	if req.GetVerbose() {
		data, err := json.Marshal(ins)
		if err != nil {
			return nil, fmt.Errorf("encoding verbose status of image %s: %w", ins.ID, err)
		}
		resp.Info = map[string]string{"info": string(data)}
	}
	return resp, nil
}

// ListImages lists Docker's images (not the intermediate ones), filtered
// by the image spec of the filter if any (see imageMatcher). One ImageList
// call, plus one ImageInspect per image not seen before or whose
// references changed since (cached by ID).
//
// The answer for each image is ImageInspect's, as ImageStatus gives it;
// the list only says which images exist and when to look again. Both
// agree on Docker's graph drivers (Docker 20.10–28 by default), not on
// the containerd image store (Docker 29's default):
//   - the list names one repo digest per image (that of one of its names)
//     where inspect names one per name (recorded: an image tagged
//     netshim.local/busybox and localhost:5000/netshim/busybox lists only
//     the first's digest);
//   - sizes: the store keeps compressed blobs beside the unpacked
//     snapshots. Inspect gives the two for the node's platform, which is
//     what removing the image frees for kubelet's image GC; the list adds
//     up every platform variant present. (Graph drivers keep no blobs:
//     their size is the unpacked layers, so the same image reads bigger
//     on Docker 29, e.g. 1982365 bytes on 20.10, 1069680 + 2011136 on 29.)
//   - the User, which the list lacks on either.
func (s *Service) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	match, err := imageMatcher(req.GetFilter().GetImage().GetImage())
	if err != nil {
		return nil, err
	}
	summaries, err := s.engine.ImageList(ctx, image.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	cache := &s.users
	live := make(map[string]bool, len(summaries))
	resp := &runtimeapi.ListImagesResponse{}
	for _, sum := range mergeSummaries(summaries) {
		live[sum.ID] = true
		listed := strings.Join(sum.RepoTags, ",") + "@" + strings.Join(sum.RepoDigests, ",")
		info, ok := cache.get(sum.ID)
		if !ok || info.listed != listed {
			ins, err := s.engine.ImageInspect(ctx, sum.ID)
			if errdefs.IsNotFound(err) {
				continue // removed since the list
			}
			if err != nil {
				return nil, fmt.Errorf("inspecting image %s: %w", sum.ID, err)
			}
			info = inspectedImage(ins, listed)
			cache.put(sum.ID, info)
		}
		if !match(sum.ID, info.tags, info.digests) {
			continue
		}
		resp.Images = append(resp.Images, s.criImage(sum.ID, info))
	}
	cache.retain(live)
	return resp, nil
}

// mergeSummaries gives one summary per image ID, with the references of
// all that had it, in the engine's order. Both image stores list an image
// once today (the containerd one merges its per-name records by target
// itself), but kubelet keys its image records by ID and would count a
// duplicate's size twice in its GC, so a duplicate is merged rather than
// passed on.
func mergeSummaries(in []image.Summary) []image.Summary {
	out := make([]image.Summary, 0, len(in))
	at := make(map[string]int, len(in))
	for _, s := range in {
		i, ok := at[s.ID]
		if !ok {
			at[s.ID] = len(out)
			out = append(out, s)
			continue
		}
		m := &out[i]
		m.RepoTags = appendMissing(slices.Clone(m.RepoTags), s.RepoTags...)
		m.RepoDigests = appendMissing(slices.Clone(m.RepoDigests), s.RepoDigests...)
	}
	return out
}

func appendMissing(dst []string, add ...string) []string {
	for _, a := range add {
		if !slices.Contains(dst, a) {
			dst = append(dst, a)
		}
	}
	return dst
}

// inspectedImage is what the CRI image is made of, from an inspect.
func inspectedImage(ins image.InspectResponse, listed string) cachedImage {
	tags, digests := imageref.RepoRefs(ins.RepoTags, ins.RepoDigests)
	return cachedImage{user: configUser(ins), size: ins.Size, tags: tags, digests: digests, listed: listed}
}

// criImage builds the CRI image. Its spec is its ID, so the status is the
// same whichever reference it was asked by. The pod infra image is pinned:
// kubelet's image garbage collection never removes a pinned image.
func (s *Service) criImage(id string, info cachedImage) *runtimeapi.Image {
	img := &runtimeapi.Image{
		Id:          id,
		RepoTags:    info.tags,
		RepoDigests: info.digests,
		Spec:        &runtimeapi.ImageSpec{Image: id},
		Pinned:      s.isPodInfraImage(info.tags, info.digests),
	}
	if info.size > 0 {
		img.Size = uint64(info.size)
	}
	uid, username := imageref.User(info.user)
	if uid != nil {
		img.Uid = &runtimeapi.Int64Value{Value: *uid}
	}
	img.Username = username
	return img
}

func (s *Service) isPodInfraImage(tags, digests []string) bool {
	if s.opts.PodInfraImage == "" {
		return false
	}
	named, err := imageref.NormalizeName(s.opts.PodInfraImage)
	if err != nil {
		return false
	}
	infra := named.String()
	return slices.Contains(tags, infra) || slices.Contains(digests, infra)
}

func configUser(ins image.InspectResponse) string {
	if ins.Config == nil {
		return ""
	}
	return ins.Config.User
}

// imageMatcher returns the predicate of a ListImages filter spec:
//   - empty: every image;
//   - an ID or hex ID prefix (with or without "sha256:"): the image with
//     that ID (a hex string is also tried as a name, as Docker does);
//   - a name with a tag ("busybox:1.36") or digest: the image with that
//     normalised reference;
//   - a name alone ("busybox"): every image of that repository, whatever
//     its tag, like `docker images busybox` (the name is normalised, so
//     "busybox" and "docker.io/library/busybox" are the same repository).
func imageMatcher(spec string) (func(id string, tags, digests []string) bool, error) {
	if spec == "" {
		return func(string, []string, []string) bool { return true }, nil
	}
	var idPrefix string
	if imageref.IsID(spec) {
		idPrefix = "sha256:" + strings.TrimPrefix(spec, "sha256:")
	}
	var named reference.Named
	if !strings.HasPrefix(spec, "sha256:") {
		n, err := reference.ParseNormalizedNamed(spec)
		if err != nil && idPrefix == "" {
			return nil, crirpc.InvalidArgf("invalid image filter %q: %v", spec, err)
		}
		named = n
	} else if idPrefix == "" {
		return nil, crirpc.InvalidArgf("invalid image filter %q: want sha256: followed by up to 64 lowercase hex digits", spec)
	}
	return func(id string, tags, digests []string) bool {
		if idPrefix != "" && strings.HasPrefix(id, idPrefix) {
			return true
		}
		if named == nil {
			return false
		}
		if c, ok := named.(reference.Canonical); ok {
			byDigest, err := reference.WithDigest(reference.TrimNamed(named), c.Digest())
			return err == nil && slices.Contains(digests, byDigest.String())
		}
		if _, ok := named.(reference.Tagged); ok {
			return slices.Contains(tags, named.String())
		}
		for _, r := range slices.Concat(tags, digests) {
			if n, err := reference.ParseNormalizedNamed(r); err == nil && n.Name() == named.Name() {
				return true
			}
		}
		return false
	}, nil
}
