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
	ds.imageState().users.put(ins.ID, configUser(ins))
	tags, digests := repoRefs(ins.RepoTags, ins.RepoDigests)
	resp := &runtimeapi.ImageStatusResponse{
		Image: ds.criImage(ins.ID, tags, digests, ins.Size, configUser(ins)),
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
// which the list lacks; it is cached by ID).
func (ds *DockerService) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	match, err := imageMatcher(req.GetFilter().GetImage().GetImage())
	if err != nil {
		return nil, err
	}
	summaries, err := ds.client.ImageList(ctx, image.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	users := &ds.imageState().users
	live := make(map[string]bool, len(summaries))
	resp := &runtimeapi.ListImagesResponse{}
	for _, s := range summaries {
		live[s.ID] = true
		tags, digests := repoRefs(s.RepoTags, s.RepoDigests)
		if !match(s.ID, tags, digests) {
			continue
		}
		user, ok := users.get(s.ID)
		if !ok {
			ins, err := ds.client.ImageInspect(ctx, s.ID)
			if errdefs.IsNotFound(err) {
				continue // removed since the list
			}
			if err != nil {
				return nil, fmt.Errorf("inspecting image %s: %w", s.ID, err)
			}
			user = configUser(ins)
			users.put(s.ID, user)
		}
		resp.Images = append(resp.Images, ds.criImage(s.ID, tags, digests, s.Size, user))
	}
	users.retain(live)
	return resp, nil
}

// criImage builds the CRI image. Its spec is its ID, so the status is the
// same whichever reference it was asked by. The pod infra image is pinned:
// kubelet's image garbage collection never removes a pinned image.
func (ds *DockerService) criImage(id string, tags, digests []string, size int64, user string) *runtimeapi.Image {
	img := &runtimeapi.Image{
		Id:          id,
		RepoTags:    tags,
		RepoDigests: digests,
		Spec:        &runtimeapi.ImageSpec{Image: id},
		Pinned:      ds.isPodInfraImage(tags, digests),
	}
	if size > 0 {
		img.Size = uint64(size)
	}
	uid, username := imageUser(user)
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
