package dockerservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"k8s.io/klog/v2"
)

// ensureImage makes sure ref is present locally, pulling it only when
// missing. Presence is remembered so the pause image costs no Docker call
// per sandbox; a create that later finds it gone forgets it (see
// forgetImage) and the next ensureImage pulls again.
func (ds *DockerService) ensureImage(ctx context.Context, ref string) error {
	ds.mu.Lock()
	present := ds.imagePresent[ref]
	ds.mu.Unlock()
	if present {
		return nil
	}
	_, err := ds.client.ImageInspect(ctx, ref)
	if errdefs.IsNotFound(err) {
		err = ds.pullImage(ctx, ref, "")
	}
	if err != nil {
		return fmt.Errorf("ensuring image %s is present: %w", ref, err)
	}
	ds.mu.Lock()
	ds.imagePresent[ref] = true
	ds.mu.Unlock()
	return nil
}

func (ds *DockerService) forgetImage(ref string) {
	ds.mu.Lock()
	delete(ds.imagePresent, ref)
	ds.mu.Unlock()
}

// markImagePresent records refs (as callers of ensureImage spell them) as
// present.
func (ds *DockerService) markImagePresent(refs ...string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for _, r := range refs {
		ds.imagePresent[r] = true
	}
}

// forgetImageRefs forgets every remembered image whose key, as given or
// normalised, is one of gone (normalised references and IDs of a removed
// image), so ensureImage checks again however its caller spelled it.
func (ds *DockerService) forgetImageRefs(gone map[string]bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for key := range ds.imagePresent {
		norm := key
		if named, err := normalizeImageName(key); err == nil {
			norm = named.String()
		}
		if gone[key] || gone[norm] {
			delete(ds.imagePresent, key)
		}
	}
}

// pullImage pulls ref (a normalised name) with the given X-Registry-Auth
// value ("" for anonymous) and waits for the pull to finish. Docker reports
// pull failures inside the progress stream, not as the call's error, so the
// stream is read to the end and checked. A cancelled or timed-out ctx is
// reported as such (the interceptor maps it to Canceled/DeadlineExceeded).
func (ds *DockerService) pullImage(ctx context.Context, ref, registryAuth string) error {
	klog.FromContext(ctx).Info("Pulling image", "image", ref, "withCredentials", registryAuth != "")
	rc, err := ds.client.ImagePull(ctx, ref, image.PullOptions{RegistryAuth: registryAuth})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("pulling %s: %w", ref, ctx.Err())
		}
		return fmt.Errorf("pulling %s: %w", ref, err)
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var msg struct {
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("pulling %s: %w", ref, ctx.Err())
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading pull progress of %s: %w", ref, err)
		}
		if msg.Error != "" || msg.ErrorDetail.Message != "" {
			text := msg.ErrorDetail.Message
			if text == "" {
				text = msg.Error
			}
			return fmt.Errorf("pulling %s: %s", ref, text)
		}
	}
}
