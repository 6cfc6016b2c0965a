package dockerservice

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The image half of fakeDocker. Its model: fakeDocker.images holds every
// reference (a tag like "docker.io/library/busybox:latest" or a digest
// reference "name@sha256:..."), in the form a test stored it ("busybox:1"
// or "docker.io/library/busybox:1": like Docker, lookups compare them
// normalised); fakeImage, keyed by reference, gives it an ID, and
// references that share an ID are one image. A reference without a
// fakeImage is an image of its own whose ID is the sha256 of the reference.

// fakeImage is what the fake knows of an image beyond its references.
type fakeImage struct {
	ID   string
	User string
	Size int64
}

var fakeHexRE = regexp.MustCompile(`^(sha256:)?[0-9a-f]{1,64}$`)

// addImage adds an image with the given ID and references. Test helper.
func (f *fakeDocker) addImage(img fakeImage, refs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range refs {
		f.images[r] = map[string]string{}
		f.imageMeta[r] = img
	}
}

// hasImageRef reports whether a reference exists. Test helper.
func (f *fakeDocker) hasImageRef(ref string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.images[ref]
	return ok
}

// imageIDLocked is the ID of the image a reference names.
func (f *fakeDocker) imageIDLocked(ref string) string {
	if m, ok := f.imageMeta[ref]; ok && m.ID != "" {
		return m.ID
	}
	sum := sha256.Sum256([]byte(ref))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// sameRef compares two references as Docker does: normalised, with
// ":latest" for a name alone.
func sameRef(a, b string) bool {
	if a == b {
		return true
	}
	na, errA := reference.ParseNormalizedNamed(a)
	nb, errB := reference.ParseNormalizedNamed(b)
	return errA == nil && errB == nil && reference.TagNameOnly(na).String() == reference.TagNameOnly(nb).String()
}

// findRefLocked returns the stored reference equal to ref, if any.
func (f *fakeDocker) findRefLocked(ref string) (string, bool) {
	if _, ok := f.images[ref]; ok {
		return ref, true
	}
	for r := range f.images {
		if sameRef(r, ref) {
			return r, true
		}
	}
	return "", false
}

// lookupImageLocked resolves a reference, a full ID or a hex ID prefix (with
// or without "sha256:") as Docker does, to the image ID and its references.
func (f *fakeDocker) lookupImageLocked(ref string) (id string, refs []string, ok bool) {
	if stored, found := f.findRefLocked(ref); found {
		id = f.imageIDLocked(stored)
	} else if fakeHexRE.MatchString(ref) {
		want := "sha256:" + strings.TrimPrefix(ref, "sha256:")
		for r := range f.images {
			if cand := f.imageIDLocked(r); strings.HasPrefix(cand, want) {
				if id != "" && id != cand {
					return "", nil, false // ambiguous prefix
				}
				id = cand
			}
		}
	}
	if id == "" {
		return "", nil, false
	}
	for r := range f.images {
		if f.imageIDLocked(r) == id {
			refs = append(refs, r)
		}
	}
	sort.Strings(refs)
	return id, refs, true
}

func splitRefs(refs []string) (tags, digests []string) {
	for _, r := range refs {
		if strings.Contains(r, "@") {
			digests = append(digests, r)
		} else {
			tags = append(tags, r)
		}
	}
	return tags, digests
}

func (f *fakeDocker) inspectImageLocked(id string, refs []string) image.InspectResponse {
	tags, digests := splitRefs(refs)
	var meta fakeImage
	if len(refs) > 0 {
		meta = f.imageMeta[refs[0]]
	}
	return image.InspectResponse{
		ID: id, RepoTags: tags, RepoDigests: digests, Size: meta.Size,
		Config: &dockerspec.DockerOCIImageConfig{ImageConfig: ocispec.ImageConfig{User: meta.User}},
	}
}

func (f *fakeDocker) ImageList(_ context.Context, _ image.ListOptions) ([]image.Summary, error) {
	f.record("ImageList")
	f.mu.Lock()
	defer f.mu.Unlock()
	byID := map[string][]string{}
	for r := range f.images {
		id := f.imageIDLocked(r)
		byID[id] = append(byID[id], r)
	}
	var out []image.Summary
	for id, refs := range byID {
		sort.Strings(refs)
		tags, digests := splitRefs(refs)
		if len(tags) == 0 {
			tags = []string{"<none>:<none>"} // as Docker 20.10 reports an untagged image
		}
		out = append(out, image.Summary{ID: id, RepoTags: tags, RepoDigests: digests, Size: f.imageMeta[refs[0]].Size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// ImageRemove follows Docker: a reference is untagged, and the image goes
// with its last reference; an ID removes the image only if it has at most
// one reference (or with Force); a stopped container using the image
// blocks removing its last reference.
func (f *fakeDocker) ImageRemove(_ context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error) {
	f.record("ImageRemove " + ref)
	f.mu.Lock()
	defer f.mu.Unlock()
	id, refs, ok := f.lookupImageLocked(ref)
	if !ok {
		return nil, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	stored, isRef := f.findRefLocked(ref)
	byID := !isRef
	if byID && len(refs) > 1 && !opts.Force {
		return nil, errdefs.ErrConflict.WithMessage("conflict: unable to delete " + ref + " (must be forced) - image is referenced in multiple repositories")
	}
	toRemove := refs
	if !byID {
		toRemove = []string{stored}
	}
	if len(toRemove) == len(refs) && !opts.Force {
		for _, c := range f.containers {
			if c.Image == id || slices.ContainsFunc(refs, func(r string) bool { return sameRef(r, c.Image) }) {
				return nil, errdefs.ErrConflict.WithMessage("conflict: unable to remove repository reference " + ref + " (must force) - container " + c.ID[:12] + " is using its referenced image")
			}
		}
	}
	var resp []image.DeleteResponse
	for _, r := range toRemove {
		delete(f.images, r)
		delete(f.imageMeta, r)
		resp = append(resp, image.DeleteResponse{Untagged: r})
	}
	if len(toRemove) == len(refs) {
		resp = append(resp, image.DeleteResponse{Deleted: id})
	}
	return resp, nil
}
