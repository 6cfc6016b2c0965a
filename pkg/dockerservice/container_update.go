package dockerservice

import (
	"context"
	"fmt"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// UpdateContainerResources changes a container's limits in place
// (kubelet's in-place pod resize, crictl update) through Docker's
// ContainerUpdate. The mapping is dockerspec's (resources.go): a 0 field
// leaves a limit as it is, -1 lifts it; unified (cgroup v2) keys and
// hugepage limits Docker has no setting for are skipped with a warning, as
// at create, so that a resize kubelet sends on a cgroup v2 node is not
// refused for them.
//
// oom_score_adj is fixed at create in Docker; kubelet only sends the
// value the container already has (a resize keeps the QoS class), so
// only a different one is refused.
func (ds *DockerService) UpdateContainerResources(ctx context.Context, r *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	rec, err := ds.mustFindContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	res := r.GetLinux()
	if res == nil {
		// kubelet on Linux always sends linux; Windows resources alone
		// are a request for another kind of node.
		if r.GetWindows() != nil {
			return nil, crirpc.InvalidArgf("container %s: the request has only Windows resources, and netshim runs Linux containers", rec.ID)
		}
		klog.FromContext(ctx).V(4).Info("UpdateContainerResources without Linux resources: nothing to change", "containerID", rec.ID)
		return &runtimeapi.UpdateContainerResourcesResponse{}, nil
	}
	if r.GetWindows() != nil {
		klog.FromContext(ctx).V(4).Info("UpdateContainerResources: Windows resources ignored on Linux", "containerID", rec.ID)
	}
	what := "container " + rec.ID
	if err := dockerspec.ValidateResources(what, res); err != nil {
		return nil, err
	}
	cur, err := ds.currentResources(ctx, rec)
	if err != nil {
		return nil, err
	}
	// 0 reads as "unchanged", as for Docker's own fields: proto3 cannot
	// tell it from unset, and crictl update leaves it so.
	if res.GetOomScoreAdj() != 0 {
		want := ds.containers.oom.apply(int(res.GetOomScoreAdj()))
		if int64(want) != cur.GetOomScoreAdj() {
			return nil, crirpc.WithCode(codes.InvalidArgument, fmt.Errorf("%s: Docker cannot change oom_score_adj of a created container (it is %d, %d was asked); recreate the container", what, cur.GetOomScoreAdj(), want))
		}
	}
	q, err := dockerspec.ResolveResources(res)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	update := container.UpdateConfig{}
	if err := q.ApplyUpdate(&update.Resources, cur); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	resp, err := ds.engine.ContainerUpdate(ctx, rec.ID, update)
	if err != nil {
		return nil, fmt.Errorf("updating resources of container %s: %w", rec.ID, err)
	}
	for _, w := range resp.Warnings {
		klog.FromContext(ctx).V(2).Info("Docker warning on container update", "containerID", rec.ID, "warning", w)
	}
	dockerspec.WarnSkipped(rec.Name, "UpdateContainerResources", q.Skipped)
	// ContainerStatus reports the container's resources from the index.
	ds.refreshRecord(ctx, rec.ID)
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// currentResources are a container's limits as Docker has them: from the
// index, which keeps the HostConfig of every container it inspected, else
// from an inspect.
func (ds *DockerService) currentResources(ctx context.Context, rec *store.Record) (*runtimeapi.LinuxContainerResources, error) {
	if cur := rec.ContainerInfo().Resources; cur != nil {
		return cur, nil
	}
	c, err := ds.engine.ContainerInspect(ctx, rec.ID)
	if err != nil {
		return nil, fmt.Errorf("inspecting container %s for its current resources: %w", rec.ID, err)
	}
	if c.ContainerJSONBase == nil || c.HostConfig == nil {
		return &runtimeapi.LinuxContainerResources{}, nil
	}
	return dockerspec.ResourcesFromHostConfig(c.HostConfig), nil
}
