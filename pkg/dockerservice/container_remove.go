package dockerservice

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// RemoveContainer force-removes a container (a running one is killed) and
// stops copying its log; the CRI log file stays, kubelet removes it. A
// missing container is fine: the CRI wants Remove idempotent.
func (ds *DockerService) RemoveContainer(ctx context.Context, r *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	rec, err := ds.lookupContainer(ctx, r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if rec == nil {
		klog.FromContext(ctx).V(4).Info("RemoveContainer: container not found; nothing to remove", "containerID", r.GetContainerId())
		return &runtimeapi.RemoveContainerResponse{}, nil
	}
	if err := ds.removeContainer(ctx, rec.ID); err != nil {
		return nil, fmt.Errorf("removing container %s: %w", rec.ID, err)
	}
	// After the removal, so that a follower still copying the last lines
	// of a container that just exited gets them; Docker has ended its
	// stream by now anyway.
	ds.containers.logs.Stop(rec.ID)
	return &runtimeapi.RemoveContainerResponse{}, nil
}
