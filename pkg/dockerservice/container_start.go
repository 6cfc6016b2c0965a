package dockerservice

import (
	"context"
	"errors"
	"fmt"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/crilog"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// StartContainer starts a created container, then copies its log into the
// CRI log file kubelet reads. A container whose log cannot be written is
// not left running: kubelet would see it run with no log at all.
func (ds *DockerService) StartContainer(ctx context.Context, r *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	rec, err := ds.mustFindContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	id := rec.ID
	if st := containerState(rec); st != runtimeapi.ContainerState_CONTAINER_CREATED {
		return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("container %s is %s: only a created container can be started (kubelet creates a new one to restart)", id, st))
	}
	info := rec.ContainerInfo()
	t := newStepTimer(ctx, "StartContainer", "containerID", id)
	// Fail before Docker starts anything if the log file cannot be made:
	// it is the commonest reason the follower could not start.
	if info.LogPath != "" {
		if err := ds.prepareLogFile(info.LogPath); err != nil {
			return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("container %s: %w", id, err))
		}
	}

	if info.LogPath != "" {
		// From before the start: the container may exit at once.
		defer ds.containers.streams.MarkStarting(id)()
	}
	// The index records the new state (pid, start time) before the
	// answer, or, when Docker refuses, why (the exit code and error) for
	// ContainerStatus.
	if _, err := ds.index.Start(ctx, id); err != nil {
		return nil, fmt.Errorf("starting container %s: %w", id, err)
	}
	t.step("start")

	if info.LogPath != "" {
		// Started even if the container already exited: the follower then
		// copies the whole log and ends.
		if err := ds.containers.logs.Start(ctx, id, info.LogPath, info.TTY); err != nil {
			ds.killAfterFailedStart(ctx, id)
			return nil, fmt.Errorf("container %s: copying its log to %s: %w", id, info.LogPath, err)
		}
		t.step("log")
	}
	t.done()
	return &runtimeapi.StartContainerResponse{}, nil
}

// prepareLogFile makes sure the CRI log file can be written: the path
// still passes the checks of CreateContainer (the file system may have
// changed since, and a container created by an older netshim was never
// checked), and the file and its missing directories can be made, confined
// as the follower opens them (see pkg/dockerservice/logs, places.go).
func (ds *DockerService) prepareLogFile(path string) error {
	if err := ds.logPlaces().CheckFile(path); err != nil {
		return err
	}
	w, err := crilog.NewWriter(path)
	if err != nil {
		return err
	}
	return w.Close()
}

// killAfterFailedStart undoes a start whose log could not be set up. It
// runs detached from the caller, who may have given up.
func (ds *DockerService) killAfterFailedStart(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(backgroundCtx(ctx), cleanupTimeout)
	defer cancel()
	zero := 0
	if err := ds.engine.ContainerStop(ctx, id, container.StopOptions{Timeout: &zero}); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to kill a container whose log could not be set up", "containerID", id)
	}
	ds.refreshRecord(ctx, id)
}

// mustFindContainer finds a workload container by ID or unique prefix in
// the index; unknown is NotFound.
func (ds *DockerService) mustFindContainer(id string) (*store.Record, error) {
	rec, err := ds.findContainer(id)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, crirpc.NotFoundf("container %s not found", id)
	}
	return rec, nil
}

// findContainer finds a workload container by ID or unique prefix in the
// index. It returns (nil, nil) when there is none.
func (ds *DockerService) findContainer(id string) (*store.Record, error) {
	return ds.resolveContainer(id, func() (*store.Record, error) {
		rec, err := ds.store().Resolve(id)
		if err != nil {
			return nil, crirpc.InvalidArgf("%v", err)
		}
		return rec, nil
	})
}

// lookupContainer is findContainer for Stop and Remove: a container the
// index lacks (its events were dropped) is looked up in Docker, so that it
// is not reported gone while it still exists. (nil, nil) means done.
func (ds *DockerService) lookupContainer(ctx context.Context, id string) (*store.Record, error) {
	return ds.resolveContainer(id, func() (*store.Record, error) {
		rec, err := ds.index.Lookup(ctx, id)
		var amb store.ErrAmbiguous
		switch {
		case errors.As(err, &amb):
			return nil, crirpc.InvalidArgf("%v", err)
		case err != nil:
			return nil, crirpc.WithCode(codes.Unavailable, err)
		}
		return rec, nil
	})
}

func (ds *DockerService) resolveContainer(id string, resolve func() (*store.Record, error)) (*store.Record, error) {
	if err := dockerspec.ValidateID("container", "container_id", id); err != nil {
		return nil, err
	}
	if err := ds.requireSynced(); err != nil {
		return nil, err
	}
	rec, err := resolve()
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, nil
	}
	if rec.Kind != store.KindContainer {
		return nil, crirpc.NotFoundf("%s is a pod sandbox, not a container", id)
	}
	return rec, nil
}
