package dockerservice

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
)

// ImageStatus returns the image a spec names, or no image (not an error)
// when it does not exist. With verbose, Info["info"] holds Docker's image
// inspect document as JSON.
func (ds *DockerService) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref, err := imageLookupRef(req.GetImage().GetImage())
	if err != nil {
		return nil, err
	}
	ins, err := ds.client.ImageInspect(ctx, ref)
	if errdefs.IsNotFound(err) {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspecting image %s: %w", ref, err)
	}
	info := cachedImage{user: configUser(ins), size: ins.Size}
	ds.imageState().users.put(ins.ID, info)
	tags, digests := repoRefs(ins.RepoTags, ins.RepoDigests)
	resp := &runtimeapi.ImageStatusResponse{
		Image: ds.criImage(ins.ID, tags, digests, info),
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
// call, plus one ImageInspect per image not seen before (for its User,
// which the list lacks, and its size; both are cached by ID).
//
// Sizes come from ImageInspect, not from the list, so that ListImages and
// ImageStatus agree on every engine. With Docker's graph drivers (Docker
// 20.10–28 by default) both say the same: the unpacked layers. With the
// containerd image store (Docker 29's default) the image keeps its
// compressed blobs beside the unpacked snapshots; inspect gives the two
// for the node's platform, which is what removing the image frees for
// kubelet's image GC, while the list adds up every platform variant
// present and would count content the node never runs.
func (ds *DockerService) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	match, err := imageMatcher(req.GetFilter().GetImage().GetImage())
	if err != nil {
		return nil, err
	}
	summaries, err := ds.client.ImageList(ctx, image.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	cache := &ds.imageState().users
	live := make(map[string]bool, len(summaries))
	resp := &runtimeapi.ListImagesResponse{}
	for _, s := range mergeSummaries(summaries) {
		live[s.ID] = true
		tags, digests := repoRefs(s.RepoTags, s.RepoDigests)
		if !match(s.ID, tags, digests) {
			continue
		}
		info, ok := cache.get(s.ID)
		if !ok {
			ins, err := ds.client.ImageInspect(ctx, s.ID)
			if errdefs.IsNotFound(err) {
				continue // removed since the list
			}
			if err != nil {
				return nil, fmt.Errorf("inspecting image %s: %w", s.ID, err)
			}
			info = cachedImage{user: configUser(ins), size: ins.Size}
			cache.put(s.ID, info)
		}
		resp.Images = append(resp.Images, ds.criImage(s.ID, tags, digests, info))
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

// criImage builds the CRI image. Its spec is its ID, so the status is the
// same whichever reference it was asked by. The pod infra image is pinned:
// kubelet's image garbage collection never removes a pinned image.
func (ds *DockerService) criImage(id string, tags, digests []string, info cachedImage) *runtimeapi.Image {
	img := &runtimeapi.Image{
		Id:          id,
		RepoTags:    tags,
		RepoDigests: digests,
		Spec:        &runtimeapi.ImageSpec{Image: id},
		Pinned:      ds.isPodInfraImage(tags, digests),
	}
	if info.size > 0 {
		img.Size = uint64(info.size)
	}
	uid, username := imageUser(info.user)
	if uid != nil {
		img.Uid = &runtimeapi.Int64Value{Value: *uid}
	}
	img.Username = username
	return img
}

func (ds *DockerService) isPodInfraImage(tags, digests []string) bool {
	if ds.cfg.PodInfraImage == "" {
		return false
	}
	named, err := normalizeImageName(ds.cfg.PodInfraImage)
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
	if isImageID(spec) {
		idPrefix = "sha256:" + strings.TrimPrefix(spec, "sha256:")
	}
	var named reference.Named
	if !strings.HasPrefix(spec, "sha256:") {
		n, err := reference.ParseNormalizedNamed(spec)
		if err != nil && idPrefix == "" {
			return nil, invalidArgf("invalid image filter %q: %v", spec, err)
		}
		named = n
	} else if idPrefix == "" {
		return nil, invalidArgf("invalid image filter %q: want sha256: followed by up to 64 lowercase hex digits", spec)
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
