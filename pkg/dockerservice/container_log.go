package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/crilog"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
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
		return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("container %s is not running: it has no log to reopen", rec.ID))
	}
	info := rec.ContainerInfo()
	if info.LogPath == "" {
		return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("container %s was created without a log path", rec.ID))
	}
	err = ds.containers.logs.Reopen(rec.ID)
	if errors.Is(err, crilog.ErrNotFollowing) {
		// No follower although the container runs: its setup failed when
		// netshim started, or it gave up on an unusable file. A new one
		// opens a fresh file at the path (checked again), resuming after
		// the last line of the rotated one.
		if err = ds.checkLogFilePath(info.LogPath); err != nil {
			return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("reopening log of container %s: %w", rec.ID, err))
		}
		err = ds.containers.logs.Start(ctx, rec.ID, info.LogPath, info.TTY)
	}
	if err != nil {
		return nil, fmt.Errorf("reopening log %s of container %s: %w", info.LogPath, rec.ID, err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

// resumeContainerLogs starts a follower for every running container with a
// log path, after a sync of the index: at daemon start-up, and after the
// events stream reconnected (a dockerd restart ends every Docker log
// stream). Each follower resumes after the last line of its file, so
// nothing is lost or written twice; one already running is left alone.
//
// After the first sync it also drains the containers that exited while
// netshim was down: what they wrote between netshim's stop and their exit
// is what `kubectl logs --previous` shows. Only those whose file still
// exists: kubelet removes the file only with the container, and a file it
// removed must stay removed. Later syncs need not drain: a container that
// exits while netshim runs has its follower, which copies its log to the
// end (or is restarted until it has).
//
// The work runs in the background; what must hold before the caller goes
// on is done first: each container to drain is marked as copying, so that
// its exit does not show before its log is complete (see visibleState).
func (ds *DockerService) resumeContainerLogs(ctx context.Context) {
	type job struct {
		rec   *store.Record
		info  *labelcodec.Container
		drain bool
		done  func() // ends the drain's mark
	}
	var jobs []job
	drain := ds.containers.streams.firstSync()
	for _, rec := range ds.store().List(store.KindContainer) {
		info := rec.ContainerInfo()
		if info.LogPath == "" {
			continue
		}
		switch {
		case rec.Running():
			jobs = append(jobs, job{rec, info, false, nil})
		case drain && rec.State == store.StateExited && rec.StartedAt != 0:
			jobs = append(jobs, job{rec, info, true, ds.containers.streams.markStarting(rec.ID)})
		}
	}
	go func() {
		followed, drained := 0, 0
		for i, j := range jobs {
			if ctx.Err() != nil {
				for _, j := range jobs[i:] {
					if j.done != nil {
						j.done()
					}
				}
				return
			}
			var err error
			if j.drain {
				err = ds.drainContainerLog(ctx, j.rec, j.info)
				j.done()
				if err == nil {
					drained++
				}
			} else if err = ds.checkLogFilePath(j.info.LogPath); err == nil {
				if err = ds.containers.logs.Start(ctx, j.rec.ID, j.info.LogPath, j.info.TTY); err == nil {
					followed++
				}
			}
			if err != nil && ctx.Err() == nil {
				klog.ErrorS(err, "Failed to resume copying a container's log", "containerID", j.rec.ID, "path", j.info.LogPath)
			}
		}
		klog.V(2).InfoS("Container log followers resumed", "running", followed, "drained", drained)
	}()
}

// drainClockSlack is added to a container's finish time for the end of
// its drain. Docker stamps a log line when its copier reads it, which it
// waits for (boundedly) before it records the exit: a line read in that
// wait may carry a time just after the recorded finish.
const drainClockSlack = time.Second

// drainContainerLog copies the end of an exited container's log into its
// file, if the file still exists.
func (ds *DockerService) drainContainerLog(ctx context.Context, rec *store.Record, info *labelcodec.Container) error {
	if err := ds.checkLogFilePath(info.LogPath); err != nil {
		return err
	}
	finished := time.Now()
	if rec.FinishedAt != 0 {
		finished = time.Unix(0, rec.FinishedAt).Add(drainClockSlack)
	}
	err := ds.containers.logs.Drain(ctx, rec.ID, info.LogPath, info.TTY, finished)
	if errors.Is(err, fs.ErrNotExist) {
		klog.V(4).InfoS("Log file of an exited container is gone; not writing it again", "containerID", rec.ID, "path", info.LogPath)
		return nil
	}
	return err
}

// logDrainGrace bounds how long an exited container is still reported
// running while its follower copies the end of its log: a Docker stream
// that does not end must not hide an exit for ever.
const logDrainGrace = 5 * time.Second

// logStreams tells whether a container's log is still being copied.
//
// kubelet and critest read a container's log as soon as they see it
// exited, and expect all of it there (containerd reports an exit only once
// the container's output is copied), so the exit is reported only once
// the follower has finished (see visibleState). A follower finishes when
// the container has exited and Docker has sent it everything, restarts
// included (crilog.Manager).
type logStreams struct {
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

func newLogStreams(logs *crilog.Manager) *logStreams {
	return &logStreams{logs: logs, starting: map[string]time.Time{}}
}

// markStarting says container id's log is about to be copied; the
// returned function says its follower is set up (or will not be).
func (l *logStreams) markStarting(id string) (done func()) {
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

// firstSync reports whether this is the first call.
func (l *logStreams) firstSync() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := !l.synced
	l.synced = true
	return first
}

// copyingSince reports whether container id's log is still being copied,
// and since when.
func (l *logStreams) copyingSince(id string) (time.Time, bool) {
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

// waitCopied waits until container id's log is copied, at most timeout:
// a stopped container's exit then shows at once.
func (l *logStreams) waitCopied(ctx context.Context, id string, timeout time.Duration) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-l.logs.Done(id):
	case <-t.C:
	case <-ctx.Done():
	}
}

// logStateTimeout bounds the inspect of logState: a Docker that does not
// answer leaves the state unknown, and the follower is retried later.
const logStateTimeout = 10 * time.Second

// logState reads a container's state for its log follower: whether more
// output may come. Docker is asked rather than the index, which learns of
// an exit from an event that may come after the end of the log stream.
func logState(client engine.Client) crilog.StateFunc {
	return func(ctx context.Context, id string) crilog.ContainerState {
		ctx, cancel := context.WithTimeout(ctx, logStateTimeout)
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

// visibleState is the state the CRI reports: containerState, except that
// a container that exited is still running to its readers until its log
// is copied. That lasts at most logDrainGrace from the exit, or from when
// the copy began for a container that exited while netshim was down.
func (ds *DockerService) visibleState(rec *store.Record) runtimeapi.ContainerState {
	st := containerState(rec)
	if st != runtimeapi.ContainerState_CONTAINER_EXITED || rec.StartedAt == 0 {
		return st
	}
	since, copying := ds.containers.streams.copyingSince(rec.ID)
	if !copying {
		return st
	}
	if rec.FinishedAt != 0 {
		from := time.Unix(0, rec.FinishedAt)
		if since.After(from) {
			from = since
		}
		if time.Since(from) > logDrainGrace {
			return st
		}
	}
	return runtimeapi.ContainerState_CONTAINER_RUNNING
}
