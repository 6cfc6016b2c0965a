package dockerservice

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/logs"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// StopContainer sends the container its stop signal (the CRI config's,
// else the image's STOPSIGNAL, else SIGTERM: Docker keeps it on the
// container) and SIGKILL after timeout seconds. A container that is
// missing, never started or already stopped is fine: the CRI wants Stop
// idempotent.
func (ds *DockerService) StopContainer(ctx context.Context, r *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	rec, err := ds.lookupContainer(ctx, r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if rec == nil {
		klog.FromContext(ctx).V(4).Info("StopContainer: container not found; nothing to stop", "containerID", r.GetContainerId())
		return &runtimeapi.StopContainerResponse{}, nil
	}
	if !rec.Running() {
		return &runtimeapi.StopContainerResponse{}, nil
	}
	timeout := int(max(r.GetTimeout(), 0))
	opts := container.StopOptions{
		Timeout: &timeout,
		// Only API 1.42+ takes the signal per stop; below that Docker
		// uses the container's own, which is the same one.
		Signal: labelcodec.DockerSignal(rec.ContainerInfo().StopSignal),
	}
	start := time.Now()
	err = ds.engine.ContainerStop(ctx, rec.ID, opts)
	if errdefs.IsNotFound(err) {
		ds.store().Delete(rec.ID)
		return &runtimeapi.StopContainerResponse{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stopping container %s (timeout %ds): %w", rec.ID, timeout, err)
	}
	// Docker answers once the container is dead: its exit code and finish
	// time are final, so the index can have them before kubelet asks.
	ds.markStopped(ctx, rec.ID)
	// Its exit shows once the end of its log is in the file.
	ds.containers.streams.WaitCopied(ctx, rec.ID, logs.DrainGrace)
	klog.FromContext(ctx).V(4).Info("Stopped container", "containerID", rec.ID, "timeout", timeout, "took", time.Since(start))
	return &runtimeapi.StopContainerResponse{}, nil
}

// markStopped refreshes a just-stopped container's record from Docker;
// if that fails, readers still must not see it running.
func (ds *DockerService) markStopped(ctx context.Context, id string) {
	_, err := ds.index.Refresh(backgroundCtx(ctx), id)
	if err == nil || errdefs.IsNotFound(err) {
		return
	}
	ds.store().Update(id, func(r *store.Record) {
		if r.State == store.StateRunning {
			r.State, r.Pid, r.FinishedAt = store.StateExited, 0, time.Now().UnixNano()
		}
	})
}
