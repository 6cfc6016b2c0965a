package dockerservice

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// lockSandbox resolves a sandbox ID (or unique prefix), takes the sandbox's
// lifecycle lock and returns what is known of it as read under the lock, so
// that a Stop or Remove acts on the state the previous operation left and
// never interleaves its checkpoint writes with another's. found is false
// (and nothing is locked) when no sandbox has that ID. Waiting for the lock
// gives up with ctx: a call queued behind a long CNI ADD returns
// DeadlineExceeded to its caller, which retries.
func (ds *DockerService) lockSandbox(ctx context.Context, id string) (ref sandboxRef, found bool, unlock func(), err error) {
	// Before Lookup, which would ask Docker about an ID the index lacks.
	if err := dockerspec.ValidateID("pod sandbox", "pod_sandbox_id", id); err != nil {
		return ref, false, nil, err
	}
	// The index may lack a sandbox that exists (events dropped, a resync
	// not done yet): Lookup asks Docker then and records what it finds,
	// so that Stop and Remove never skip a live infra container. A known
	// ID costs no Docker call.
	if _, err := ds.index.Lookup(ctx, id); err != nil {
		var amb store.ErrAmbiguous
		if errors.As(err, &amb) {
			return ref, false, nil, crirpc.InvalidArgf("%v", err)
		}
		return ref, false, nil, crirpc.WithCode(codes.Unavailable, fmt.Errorf("looking up pod sandbox %s: %w", id, err))
	}
	ref, found, err = ds.lookupSandbox(id)
	if err != nil || !found {
		return ref, found, nil, err
	}
	unlock, err = ds.pods.Lock(ctx, ref.id)
	if err != nil {
		return ref, false, nil, fmt.Errorf("waiting for another operation on pod sandbox %s to finish: %w", ref.id, err)
	}
	// Re-read: the operation we waited for may have changed or removed it.
	ref, found, err = ds.lookupSandbox(ref.id)
	if err != nil || !found {
		unlock()
		return ref, found, nil, err
	}
	return ref, true, unlock, nil
}
