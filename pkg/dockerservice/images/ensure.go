package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"google.golang.org/grpc/codes"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/imageref"
)

// EnsurePresent makes sure ref is present locally, pulling it only when
// missing. Presence is remembered so the pause image costs no Docker call
// per sandbox; a create that later finds it gone forgets it (see
// ForgetPresent) and the next EnsurePresent pulls again.
func (s *Service) EnsurePresent(ctx context.Context, ref string) error {
	if s.present.has(ref) {
		return nil
	}
	_, err := s.engine.ImageInspect(ctx, ref)
	if errdefs.IsNotFound(err) {
		err = s.pull(ctx, ref, "")
	}
	if err != nil {
		return fmt.Errorf("ensuring image %s is present: %w", ref, err)
	}
	s.present.mark(ref)
	return nil
}

// ForgetPresent forgets that ref is present: the next EnsurePresent looks
// again (a create that found the image gone).
func (s *Service) ForgetPresent(ref string) { s.present.forget(ref) }

// markPresent records refs (as callers of EnsurePresent spell them) as
// present.
func (s *Service) markPresent(refs ...string) { s.present.mark(refs...) }

// forgetRefs forgets every remembered image whose key, as given or
// normalised, is one of gone (normalised references and IDs of a removed
// image), so EnsurePresent checks again however its caller spelled it.
func (s *Service) forgetRefs(gone map[string]bool) {
	s.present.forgetIf(func(key string) bool {
		norm := key
		if named, err := imageref.NormalizeName(key); err == nil {
			norm = named.String()
		}
		return gone[key] || gone[norm]
	})
}

// DefaultPullProgressDeadline is how long a pull may go without a
// progress message before it is cancelled: cri-dockerd's (and dockershim's)
// default for the same flag. A registry or a connection that stalls would
// otherwise hold the pull, and kubelet's image puller with it, until
// kubelet's own deadline.
const DefaultPullProgressDeadline = time.Minute

// errPullStalled is the cause of a pull's cancellation for lack of
// progress.
var errPullStalled = errors.New("no progress")

// pull pulls ref, reading Docker's progress stream to its end: the
// pull is done when the stream ends without an error message. A stream
// that sends nothing for the progress deadline is cancelled; each message
// (any layer's status or progress) starts the deadline again, so a slow
// pull that moves is never cut.
func (s *Service) pull(ctx context.Context, ref, registryAuth string) error {
	klog.FromContext(ctx).Info("Pulling image", "image", ref, "withCredentials", registryAuth != "")
	deadline := s.opts.PullProgressDeadline
	if deadline <= 0 {
		deadline = DefaultPullProgressDeadline
	}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(deadline, func() { cancel(errPullStalled) })
	defer stall.Stop()
	stalled := func() error {
		if errors.Is(context.Cause(pctx), errPullStalled) {
			return crirpc.WithCode(codes.DeadlineExceeded, fmt.Errorf("pulling %s: cancelled after no progress for %s (--image-pull-progress-deadline)", ref, deadline))
		}
		return nil
	}
	rc, err := s.engine.ImagePull(pctx, ref, image.PullOptions{RegistryAuth: registryAuth})
	if err != nil {
		if serr := stalled(); serr != nil {
			return serr
		}
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
			if serr := stalled(); serr != nil {
				return serr
			}
			if ctx.Err() != nil {
				return fmt.Errorf("pulling %s: %w", ref, ctx.Err())
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading pull progress of %s: %w", ref, err)
		}
		// Progress: the deadline starts again. (A Reset that comes after
		// the timer fired changes nothing: the pull is cancelled.)
		stall.Reset(deadline)
		if msg.Error != "" || msg.ErrorDetail.Message != "" {
			text := msg.ErrorDetail.Message
			if text == "" {
				text = msg.Error
			}
			return fmt.Errorf("pulling %s: %s", ref, text)
		}
	}
}
