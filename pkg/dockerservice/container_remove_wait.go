package dockerservice

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
)

// Docker refuses to remove a container while another removal of it runs:
// a Conflict, "removal of container X is already in progress". kubelet does
// remove one container from two places at once (its pod sync removing a
// restarted init container, and its container GC; seen in make
// e2e-cluster), and the CRI wants RemoveContainer idempotent: the second
// caller waits for the first removal to end, and then has what it asked
// for, instead of failing.

var (
	// removalWaitTimeout bounds the wait for another removal of the
	// same container; a var so that tests can shorten it.
	removalWaitTimeout = 30 * time.Second
	// removalPollInterval is how often the wait looks again.
	removalPollInterval = 100 * time.Millisecond
)

// isRemovalInProgress says whether Docker refused a removal because
// another one of the same container runs.
func isRemovalInProgress(err error) bool {
	return err != nil && errdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress")
}

// waitRemoved waits, at most removalWaitTimeout, until container id no
// longer exists. It fails with Unavailable (retry) if it still does, and
// with the caller's context error if the caller gave up first.
func (ds *DockerService) waitRemoved(ctx context.Context, id string) error {
	klog.FromContext(ctx).V(4).Info("Container removal already in progress in Docker; waiting for it", "containerID", id)
	wctx, cancel := context.WithTimeout(ctx, removalWaitTimeout)
	defer cancel()
	tick := time.NewTicker(removalPollInterval)
	defer tick.Stop()
	for {
		_, err := ds.engine.ContainerInspect(wctx, id)
		switch {
		case errdefs.IsNotFound(err):
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && wctx.Err() == nil:
			return fmt.Errorf("waiting for another removal of container %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wctx.Done():
			return crirpc.WithCode(codes.Unavailable, fmt.Errorf("another removal of container %s is still in progress in Docker after %s; retry later", id, removalWaitTimeout))
		case <-tick.C:
		}
	}
}
