package streaming

import (
	"testing"

	"github.com/netshim/netshim/internal/fakedocker"
)

var _ DockerAPI = (*fakedocker.Engine)(nil)

// newFakeDocker is the shared fake engine as this package's tests use it.
// They test the exec and attach streams, not containers' lives, so an exec
// may run in any container ID; an exec reports no pid (a test that wants
// the runtime to kill a real process sets ExecPid), so the runtime never
// signals a made-up pid; and the engine fails the test on an exec started
// with a Tty setting other than the one it was created with, which would
// garble a real session's output.
func newFakeDocker(t *testing.T) *fakedocker.Engine {
	f := fakedocker.New()
	f.Do(func(s *fakedocker.State) {
		s.TB = t
		s.AnyExecContainer = true
		s.ExecPid = func() int { return 0 }
	})
	return f
}
