package fakedocker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// The image model: State.Images holds every reference, State.ImageMeta
// gives a reference an image ID, and references that share an ID are one
// image (see State).

// Image is what the engine knows of an image beyond its references.
type Image struct {
	ID   string
	User string
	Size int64
}

var hexIDRE = regexp.MustCompile(`^(sha256:)?[0-9a-f]{1,64}$`)

// LooksLikeID reports whether ref has the form of an image ID or an ID
// prefix (hex, with or without "sha256:"), which Docker tries as an ID
// when no reference matches. Exported for tests that answer image calls
// from recordings and must resolve references as the engine does.
func LooksLikeID(ref string) bool { return hexIDRE.MatchString(ref) }

// AddImage adds an image with the given metadata under each reference.
func (f *Engine) AddImage(img Image, refs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range refs {
		f.s.Images[r] = map[string]string{}
		f.s.ImageMeta[r] = img
	}
}

// HasImageRef reports whether the reference exists, as stored.
func (f *Engine) HasImageRef(ref string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.s.Images[ref]
	return ok
}

// imageIDLocked is the ID of the image a stored reference names.
func (f *Engine) imageIDLocked(ref string) string {
	if m, ok := f.s.ImageMeta[ref]; ok && m.ID != "" {
		return m.ID
	}
	sum := sha256.Sum256([]byte(ref))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SameRef compares two references as Docker does: normalised, with
// ":latest" for a name alone.
func SameRef(a, b string) bool {
	if a == b {
		return true
	}
	na, errA := reference.ParseNormalizedNamed(a)
	nb, errB := reference.ParseNormalizedNamed(b)
	return errA == nil && errB == nil && reference.TagNameOnly(na).String() == reference.TagNameOnly(nb).String()
}

// findRefLocked returns the stored reference equal to ref, if any.
func (f *Engine) findRefLocked(ref string) (string, bool) {
	if _, ok := f.s.Images[ref]; ok {
		return ref, true
	}
	for r := range f.s.Images {
		if SameRef(r, ref) {
			return r, true
		}
	}
	return "", false
}

// lookupImageLocked resolves a reference, a full ID or a hex ID prefix
// (with or without "sha256:") as Docker does, to the image ID and its
// references.
func (f *Engine) lookupImageLocked(ref string) (id string, refs []string, ok bool) {
	if stored, found := f.findRefLocked(ref); found {
		id = f.imageIDLocked(stored)
	} else if LooksLikeID(ref) {
		want := "sha256:" + strings.TrimPrefix(ref, "sha256:")
		for r := range f.s.Images {
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
	for r := range f.s.Images {
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

// ImageInspect resolves a reference or ID as Docker does.
func (f *Engine) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	f.Record("ImageInspect " + ref)
	f.mu.Lock()
	defer f.mu.Unlock()
	id, refs, ok := f.lookupImageLocked(ref)
	if !ok {
		return image.InspectResponse{}, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	tags, digests := splitRefs(refs)
	meta := f.s.ImageMeta[refs[0]]
	return image.InspectResponse{
		ID: id, RepoTags: tags, RepoDigests: digests, Size: meta.Size,
		Config: &dockerspec.DockerOCIImageConfig{ImageConfig: ocispec.ImageConfig{User: meta.User}},
	}, nil
}

// ImagePull adds the reference, answering with a progress stream; see
// State.PullErrs and State.PullStream.
func (f *Engine) ImagePull(ctx context.Context, ref string, opts image.PullOptions) (io.ReadCloser, error) {
	f.Record("ImagePull " + ref)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s.PullOpts = append(f.s.PullOpts, opts)
	if f.s.PullStream != nil {
		f.s.Images[ref] = map[string]string{}
		return f.s.PullStream(ctx), nil
	}
	if msg, ok := f.s.PullErrs[ref]; ok {
		return io.NopCloser(strings.NewReader(`{"status":"Pulling"}` + "\n" + `{"errorDetail":{"message":"` + msg + `"},"error":"` + msg + `"}` + "\n")), nil
	}
	f.s.Images[ref] = map[string]string{}
	return io.NopCloser(strings.NewReader(`{"status":"Pulling"}` + "\n" + `{"status":"Done"}` + "\n")), nil
}

// PullOptions returns a copy of the options of every pull so far.
func (f *Engine) PullOptions() []image.PullOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]image.PullOptions(nil), f.s.PullOpts...)
}

// ImageList lists one summary per image ID, as Docker does.
func (f *Engine) ImageList(context.Context, image.ListOptions) ([]image.Summary, error) {
	f.Record("ImageList")
	f.mu.Lock()
	defer f.mu.Unlock()
	byID := map[string][]string{}
	for r := range f.s.Images {
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
		out = append(out, image.Summary{ID: id, RepoTags: tags, RepoDigests: digests, Size: f.s.ImageMeta[refs[0]].Size})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// ImageRemove follows Docker: a reference is untagged, and the image goes
// with its last reference; an ID removes the image only if it has at most
// one reference (or with Force); a container using the image blocks
// removing its last reference.
func (f *Engine) ImageRemove(_ context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error) {
	f.Record("ImageRemove " + ref)
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
		for _, c := range f.s.Containers {
			if c.Image == id || slices.ContainsFunc(refs, func(r string) bool { return SameRef(r, c.Image) }) {
				return nil, errdefs.ErrConflict.WithMessage("conflict: unable to remove repository reference " + ref + " (must force) - container " + c.ID[:12] + " is using its referenced image")
			}
		}
	}
	var resp []image.DeleteResponse
	for _, r := range toRemove {
		delete(f.s.Images, r)
		delete(f.s.ImageMeta, r)
		resp = append(resp, image.DeleteResponse{Untagged: r})
	}
	if len(toRemove) == len(refs) {
		resp = append(resp, image.DeleteResponse{Deleted: id})
	}
	return resp, nil
}
