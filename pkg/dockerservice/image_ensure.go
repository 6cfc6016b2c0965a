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
		err = ds.pullImage(ctx, ref)
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

// pullImage pulls ref and waits for the pull to finish. Docker reports pull
// failures inside the progress stream, not as the call's error, so the
// stream is read to the end and checked.
func (ds *DockerService) pullImage(ctx context.Context, ref string) error {
	klog.InfoS("Pulling image", "image", ref)
	rc, err := ds.client.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
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
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading pull progress of %s: %w", ref, err)
		}
		if msg.Error != "" {
			return fmt.Errorf("pulling %s: %s", ref, msg.Error)
		}
	}
}
