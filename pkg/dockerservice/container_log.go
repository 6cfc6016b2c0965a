package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/crilog"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/logs"
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
		if err = ds.logPlaces().CheckFile(info.LogPath); err != nil {
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
	drain := ds.containers.streams.FirstSync()
	for _, rec := range ds.store().List(store.KindContainer) {
		info := rec.ContainerInfo()
		if info.LogPath == "" {
			continue
		}
		switch {
		case rec.Running():
			jobs = append(jobs, job{rec, info, false, nil})
		case drain && rec.State == store.StateExited && rec.StartedAt != 0:
			jobs = append(jobs, job{rec, info, true, ds.containers.streams.MarkStarting(rec.ID)})
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
			} else if err = ds.logPlaces().CheckFile(j.info.LogPath); err == nil {
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

// drainContainerLog copies the end of an exited container's log into its
// file, if the file still exists.
func (ds *DockerService) drainContainerLog(ctx context.Context, rec *store.Record, info *labelcodec.Container) error {
	if err := ds.logPlaces().CheckFile(info.LogPath); err != nil {
		return err
	}
	finished := time.Now()
	if rec.FinishedAt != 0 {
		finished = time.Unix(0, rec.FinishedAt).Add(logs.DrainClockSlack)
	}
	err := ds.containers.logs.Drain(ctx, rec.ID, info.LogPath, info.TTY, finished)
	if errors.Is(err, fs.ErrNotExist) {
		klog.V(4).InfoS("Log file of an exited container is gone; not writing it again", "containerID", rec.ID, "path", info.LogPath)
		return nil
	}
	return err
}

// visibleState is the state the CRI reports: containerState, except that
// a container that exited is still running to its readers until its log
// is copied (logs.Streams.Visible).
func (ds *DockerService) visibleState(rec *store.Record) runtimeapi.ContainerState {
	return ds.containers.streams.Visible(rec, containerState(rec))
}

// logPlaces is where container log files may be.
func (ds *DockerService) logPlaces() logs.Places { return logs.Places{RootDir: ds.cfg.RootDir} }
