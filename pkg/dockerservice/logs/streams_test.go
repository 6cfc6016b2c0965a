package logs

import (
	"context"
	"testing"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/crilog"
)

// StateFunc tells a follower whether its container may still write.
func TestStateFunc(t *testing.T) {
	docker := fakedocker.New()
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	docker.AddContainer(fakedocker.Container{ID: id, Status: "running"})
	state := StateFunc(docker)
	if got := state(context.Background(), id); got != crilog.StateRunning {
		t.Errorf("running container: %v", got)
	}
	docker.ExitBehindBack(id, 0, false)
	if got := state(context.Background(), id); got != crilog.StateExited {
		t.Errorf("exited container: %v", got)
	}
	docker.RemoveBehindBack(id)
	if got := state(context.Background(), id); got != crilog.StateGone {
		t.Errorf("removed container: %v", got)
	}
}
