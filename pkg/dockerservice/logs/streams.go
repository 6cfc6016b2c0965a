// Package logs is the runtime's side of container logs: where a log file
// may be (Places), whether a container's log is still being copied, which
// decides when its exit shows (Streams), and what a log follower asks the
// engine (StateFunc). Copying itself is pkg/crilog's.
package logs

import (
	"context"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/crilog"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// DrainClockSlack is added to a container's finish time for the end of
// its drain. Docker stamps a log line when its copier reads it, which it
// waits for (boundedly) before it records the exit: a line read in that
// wait may carry a time just after the recorded finish.
const DrainClockSlack = time.Second

// DrainGrace bounds how long an exited container is still reported
// running while its follower copies the end of its log: a Docker stream
// that does not end must not hide an exit for ever.
const DrainGrace = 5 * time.Second

// Streams tells whether a container's log is still being copied.
//
// kubelet and critest read a container's log as soon as they see it
// exited, and expect all of it there (containerd reports an exit only once
// the container's output is copied), so the exit is reported only once
// the follower has finished (see Visible). A follower finishes when
// the container has exited and Docker has sent it everything, restarts
// included (crilog.Manager).
type Streams struct {
	logs *crilog.Manager

	mu sync.Mutex
	// starting holds containers whose follower is not set up yet, with
	// when they were marked: one being started (it may exit at once) or
	// one to drain after a restart.
	starting map[string]time.Time
	synced   bool // the first index sync has resumed the logs
	// onSettled, if set, is told when a container's mark ends: its exit
	// may show from then on (container events watch for that).
	onSettled func(id string)
}

// OnSettled sets what is told when a container's mark ends. It is set
// once, before the streams are used.
func (l *Streams) OnSettled(f func(id string)) { l.onSettled = f }

// NewStreams tells of the copies the follower manager logs makes.
func NewStreams(logs *crilog.Manager) *Streams {
	return &Streams{logs: logs, starting: map[string]time.Time{}}
}

// MarkStarting says container id's log is about to be copied; the
// returned function says its follower is set up (or will not be).
func (l *Streams) MarkStarting(id string) (done func()) {
	l.mu.Lock()
	l.starting[id] = time.Now()
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.starting, id)
		l.mu.Unlock()
		if l.onSettled != nil {
			l.onSettled(id)
		}
	}
}

// FirstSync reports whether this is the first call.
func (l *Streams) FirstSync() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := !l.synced
	l.synced = true
	return first
}

// CopyingSince reports whether container id's log is still being copied,
// and since when.
func (l *Streams) CopyingSince(id string) (time.Time, bool) {
	l.mu.Lock()
	marked, starting := l.starting[id]
	l.mu.Unlock()
	since, following := l.logs.Following(id)
	switch {
	case starting && following && marked.Before(since):
		return marked, true
	case following:
		return since, true
	}
	return marked, starting
}

// WaitCopied waits until container id's log is copied, at most timeout:
// a stopped container's exit then shows at once.
func (l *Streams) WaitCopied(ctx context.Context, id string, timeout time.Duration) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-l.logs.Done(id):
	case <-t.C:
	case <-ctx.Done():
	}
}

// stateTimeout bounds the inspect of StateFunc: a Docker that does not
// answer leaves the state unknown, and the follower is retried later.
const stateTimeout = 10 * time.Second

// StateFunc reads a container's state for its log follower: whether more
// output may come. Docker is asked rather than the index, which learns of
// an exit from an event that may come after the end of the log stream.
func StateFunc(client engine.Client) crilog.StateFunc {
	return func(ctx context.Context, id string) crilog.ContainerState {
		ctx, cancel := context.WithTimeout(ctx, stateTimeout)
		defer cancel()
		c, err := client.ContainerInspect(ctx, id)
		switch {
		case errdefs.IsNotFound(err):
			return crilog.StateGone
		case err != nil || c.ContainerJSONBase == nil || c.State == nil:
			return crilog.StateUnknown
		case c.State.Running || c.State.Paused || c.State.Restarting:
			return crilog.StateRunning
		}
		return crilog.StateExited
	}
}

// Visible is the state the CRI reports of a container whose state is st:
// st, except that a container that exited is still running to its
// readers until its log is copied. That lasts at most DrainGrace from the
// exit, or from when the copy began for a container that exited while
// netshim was down.
func (l *Streams) Visible(rec *store.Record, st runtimeapi.ContainerState) runtimeapi.ContainerState {
	if st != runtimeapi.ContainerState_CONTAINER_EXITED || rec.StartedAt == 0 {
		return st
	}
	since, copying := l.CopyingSince(rec.ID)
	if !copying {
		return st
	}
	if rec.FinishedAt != 0 {
		from := time.Unix(0, rec.FinishedAt)
		if since.After(from) {
			from = since
		}
		if time.Since(from) > DrainGrace {
			return st
		}
	}
	return runtimeapi.ContainerState_CONTAINER_RUNNING
}
