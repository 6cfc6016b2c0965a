package dockerservice

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
)

// removalInProgress is Docker's answer to a removal while another runs.
func removalInProgress(id string) error {
	return errdefs.ErrConflict.WithMessage(fmt.Sprintf("removal of container %s is already in progress", id))
}

// removeAsync runs RemoveContainer in the background.
func removeAsync(ctx context.Context, ds *DockerService, id string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := ds.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		done <- err
	}()
	return done
}

// waitErr waits for a removeAsync to answer.
func waitErr(t *testing.T, done <-chan error) error {
	t.Helper()
	var err error
	answered := false
	testutil.Eventually(t, "RemoveContainer to answer", func() bool {
		select {
		case err = <-done:
			answered = true
		default:
		}
		return answered
	})
	return err
}

// TestRemoveContainerWaitsForARemovalInProgress: kubelet removes one
// container from two places at once; the second RemoveContainer, which
// Docker refuses while the first runs, waits for it and succeeds.
func TestRemoveContainerWaitsForARemovalInProgress(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("twice"))
	e.start(t, id)
	e.docker.Do(func(s *fakedocker.State) { s.RemoveErr = removalInProgress(id) })
	before := e.docker.Count("ContainerInspect")

	done := removeAsync(context.Background(), e.ds, id)
	testutil.Eventually(t, "RemoveContainer to look at the container again", func() bool {
		return e.docker.Count("ContainerInspect") >= before+2
	})
	select {
	case err := <-done:
		t.Fatalf("RemoveContainer answered (%v) while the other removal still ran", err)
	default:
	}
	// The other removal ends.
	e.docker.Do(func(s *fakedocker.State) {
		delete(s.Containers, id)
		s.RemoveErr = nil
	})
	if err := waitErr(t, done); err != nil {
		t.Fatalf("RemoveContainer: %v, want success once the other removal ended", err)
	}
	if _, ok := e.ds.store().Get(id); ok {
		t.Error("the index still holds the removed container")
	}
}

// TestRemoveContainerGivesUpOnAStuckRemoval: a removal in progress that
// does not end is Unavailable (kubelet retries), after a bounded wait, and
// the container stays known; a caller who gives up first gets its own
// context's error.
func TestRemoveContainerGivesUpOnAStuckRemoval(t *testing.T) {
	old := removalWaitTimeout
	removalWaitTimeout = 300 * time.Millisecond
	t.Cleanup(func() { removalWaitTimeout = old })
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("stuck"))
	e.docker.Do(func(s *fakedocker.State) { s.RemoveErr = removalInProgress(id) })

	err := waitErr(t, removeAsync(context.Background(), e.ds, id))
	if codeOf(err) != codes.Unavailable || !strings.Contains(err.Error(), "retry") {
		t.Errorf("stuck removal: %v (%v), want Unavailable telling to retry", err, codeOf(err))
	}
	if _, ok := e.ds.store().Get(id); !ok {
		t.Error("the index dropped a container that still exists")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := removeAsync(ctx, e.ds, id)
	cancel()
	if err := waitErr(t, done); codeOf(err) != codes.Canceled {
		t.Errorf("removal whose caller gave up: %v, want Canceled", err)
	}
}

// TestRemoveContainerConflictOtherThanRemovalFails: another conflict is
// not taken for a removal in progress.
func TestRemoveContainerConflictOtherThanRemovalFails(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("held"))
	e.docker.Do(func(s *fakedocker.State) { s.RemoveErr = errdefs.ErrConflict.WithMessage("container is paused") })
	before := e.docker.Count("ContainerInspect")
	_, err := e.ds.RemoveContainer(context.Background(), &runtimeapi.RemoveContainerRequest{ContainerId: id})
	if codeOf(err) != codes.FailedPrecondition {
		t.Errorf("RemoveContainer: %v, want FailedPrecondition", err)
	}
	if n := e.docker.Count("ContainerInspect") - before; n > 1 {
		t.Errorf("%d inspects after a plain conflict: it waited", n)
	}
}
