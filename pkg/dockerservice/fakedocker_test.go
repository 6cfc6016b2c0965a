package dockerservice

import (
	"testing"
	"time"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
)

// newFakeDocker is the shared fake engine as this package's tests use it:
// an exec is reported finished a moment after its output ends, as Docker
// does, so the exec code's wait for the exit code is exercised.
func newFakeDocker() *fakedocker.Engine {
	f := fakedocker.New()
	f.Do(func(s *fakedocker.State) { s.ExecExitDelay = 20 * time.Millisecond })
	return f
}

// quiesce waits until the service has made the Docker calls that the events
// the fake emitted so far ask for, so that a test can count the calls of
// one RPC alone. The events loop applies events in order and asks for an
// inspect of a container it does not know: once that inspect comes for a
// barrier event emitted last, every earlier event is applied; once the
// index has no inspect pending, the inspects they asked for are done.
func (e *testEnv) quiesce(t testing.TB) {
	t.Helper()
	id := e.docker.Barrier()
	testutil.Eventually(t, "the events loop to reach "+id, func() bool { return e.docker.BarrierSeen(id) })
	testutil.Eventually(t, "the inspects the events asked for", func() bool { return e.ds.index.Inspecting() == 0 })
}
