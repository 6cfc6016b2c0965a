package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/crilog"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// ReopenContainerLog makes the container's log follower write to a fresh
// file at the log path, after kubelet renamed the old one to rotate it.
// Only a running container has a follower; for any other the CRI (and
// containerd) answer FailedPrecondition.
func (ds *DockerService) ReopenContainerLog(ctx context.Context, r *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	rec, err := ds.mustFindContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if !rec.Running() {
		return nil, withCode(codes.FailedPrecondition, fmt.Errorf("container %s is not running: it has no log to reopen", rec.ID))
	}
	info := containerInfoOf(rec)
	if info.logPath == "" {
		return nil, withCode(codes.FailedPrecondition, fmt.Errorf("container %s was created without a log path", rec.ID))
	}
	err = ds.containers.logs.Reopen(rec.ID)
	if errors.Is(err, crilog.ErrNotFollowing) {
		// The follower ended (its stream broke) while the container runs:
		// a new one opens a fresh file at the path, resuming after the
		// last line of the rotated one.
		err = ds.containers.logs.Start(ctx, rec.ID, info.logPath, info.tty)
	}
	if err != nil {
		return nil, fmt.Errorf("reopening log %s of container %s: %w", info.logPath, rec.ID, err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

// resumeContainerLogs starts a follower for every running container with a
// log path, after a sync of the index: at daemon start-up, and after the
// events stream reconnected (a dockerd restart ends every Docker log
// stream). Each follower resumes after the last line of its file, so
// nothing is lost or written twice; one already running is left alone.
//
// Containers that exited while netshim was down are not resumed: their
// file may already be rotated or removed by kubelet, and writing it again
// would bring back what kubelet deleted.
func (ds *DockerService) resumeContainerLogs(ctx context.Context) {
	n := 0
	for _, rec := range ds.store.List(store.KindContainer) {
		info := containerInfoOf(rec)
		if !rec.Running() || info.logPath == "" {
			continue
		}
		if err := ds.containers.logs.Start(ctx, rec.ID, info.logPath, info.tty); err != nil {
			if ctx.Err() != nil {
				return
			}
			klog.ErrorS(err, "Failed to resume copying a container's log", "containerID", rec.ID, "path", info.logPath)
			continue
		}
		n++
	}
	klog.V(2).InfoS("Container log followers resumed", "count", n)
}

// logDrainGrace bounds how long an exited container is still reported
// running while its follower copies the end of its log: a Docker stream
// that does not end must not hide an exit for ever.
const logDrainGrace = 5 * time.Second

// logStreams wraps the Docker client as the followers' log source and
// remembers which containers have a Docker log stream open. A follower
// closes its stream only once it has written everything it read, so an
// open stream means the file may still lack the container's last lines.
//
// kubelet and critest read a container's log as soon as they see it
// exited, and expect all of it there (containerd reports an exit only once
// the container's output is copied), so the exit is reported only once
// the stream is closed (see visibleState).
type logStreams struct {
	src crilog.LogSource

	mu   sync.Mutex
	open map[string]*logStream
	// starting holds containers being started whose follower is not set
	// up yet: a container that exits at once must not show exited then.
	starting map[string]bool
}

func newLogStreams(src crilog.LogSource) *logStreams {
	return &logStreams{src: src, open: map[string]*logStream{}, starting: map[string]bool{}}
}

// markStarting says container id's log stream is about to open; the
// returned function says it is open (or will not be).
func (l *logStreams) markStarting(id string) (done func()) {
	l.mu.Lock()
	l.starting[id] = true
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.starting, id)
		l.mu.Unlock()
	}
}

type logStream struct {
	io.ReadCloser
	owner *logStreams
	id    string
	once  sync.Once
	done  chan struct{} // closed by Close
}

// ContainerLogs implements crilog.LogSource.
func (l *logStreams) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error) {
	rc, err := l.src.ContainerLogs(ctx, id, opts)
	if err != nil {
		return nil, err
	}
	s := &logStream{ReadCloser: rc, owner: l, id: id, done: make(chan struct{})}
	l.mu.Lock()
	l.open[id] = s
	l.mu.Unlock()
	return s, nil
}

func (s *logStream) Close() error {
	s.once.Do(func() {
		close(s.done)
		s.owner.mu.Lock()
		if s.owner.open[s.id] == s {
			delete(s.owner.open, s.id)
		}
		s.owner.mu.Unlock()
	})
	return s.ReadCloser.Close()
}

// copying reports whether container id's log is still being copied.
func (l *logStreams) copying(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[id] != nil || l.starting[id]
}

// waitCopied waits until container id's log stream is closed, at most
// timeout: a stopped container's exit then shows at once.
func (l *logStreams) waitCopied(ctx context.Context, id string, timeout time.Duration) {
	l.mu.Lock()
	s := l.open[id]
	l.mu.Unlock()
	if s == nil {
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// visibleState is the state the CRI reports: containerState, except that
// a container that exited is still running to its readers until its log
// is copied (bounded by logDrainGrace).
func (ds *DockerService) visibleState(rec *store.Record) runtimeapi.ContainerState {
	st := containerState(rec)
	if st != runtimeapi.ContainerState_CONTAINER_EXITED || rec.StartedAt == 0 {
		return st
	}
	if rec.FinishedAt != 0 && time.Since(time.Unix(0, rec.FinishedAt)) > logDrainGrace {
		return st
	}
	if ds.containers.streams.copying(rec.ID) {
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	return st
}
