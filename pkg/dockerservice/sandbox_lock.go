package dockerservice

import (
	"context"
	"fmt"
)

// lockSandbox resolves a sandbox ID (or unique prefix), takes the sandbox's
// lifecycle lock and returns what is known of it as read under the lock, so
// that a Stop or Remove acts on the state the previous operation left and
// never interleaves its checkpoint writes with another's. found is false
// (and nothing is locked) when no sandbox has that ID. Waiting for the lock
// gives up with ctx: a call queued behind a long CNI ADD returns
// DeadlineExceeded to its caller, which retries.
func (ds *DockerService) lockSandbox(ctx context.Context, id string) (ref sandboxRef, found bool, unlock func(), err error) {
	ref, found, err = ds.lookupSandbox(id)
	if err != nil || !found {
		return ref, found, nil, err
	}
	unlock, err = ds.lifecycle.Lock(ctx, ref.id)
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
