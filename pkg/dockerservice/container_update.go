package dockerservice

import (
	"context"
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// UpdateContainerResources changes a container's CPU and memory limits in
// place (kubelet's in-place pod resize) through Docker's ContainerUpdate.
//
// Docker cannot change everything live: oom_score_adj is fixed at create
// (kubelet only asks for the value the container already has, as a
// resize cannot change the QoS class), hugepages are not limited at all,
// and a zero field means "unchanged" to Docker, so a limit cannot be
// lifted. A request to change what Docker cannot is refused, saying so.
func (ds *DockerService) UpdateContainerResources(ctx context.Context, r *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	rec, err := ds.mustFindContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	res := r.GetLinux()
	if res == nil {
		return &runtimeapi.UpdateContainerResourcesResponse{}, nil
	}
	if err := validateResources("container "+rec.ID, res); err != nil {
		return nil, err
	}
	// 0 reads as "unchanged", as for Docker's own fields: proto3 cannot
	// tell it from unset, and crictl update leaves it so.
	if cur := containerInfoOf(rec).resources; cur != nil && res.GetOomScoreAdj() != 0 {
		want := ds.oomScoreAdj(int(res.GetOomScoreAdj()))
		if int64(want) != cur.GetOomScoreAdj() {
			return nil, withCode(codes.InvalidArgument, fmt.Errorf("container %s: Docker cannot change oom_score_adj of a created container (it is %d, %d was asked); recreate the container", rec.ID, cur.GetOomScoreAdj(), want))
		}
	}
	var unsupported []string
	for _, h := range res.GetHugepageLimits() {
		if h.GetLimit() > 0 {
			unsupported = append(unsupported, "hugepage limit "+h.GetPageSize())
		}
	}
	if len(res.GetUnified()) > 0 {
		unsupported = append(unsupported, "unified cgroup settings")
	}
	if len(unsupported) > 0 {
		return nil, withCode(codes.InvalidArgument, fmt.Errorf("container %s: Docker cannot set %s", rec.ID, strings.Join(unsupported, ", ")))
	}

	var oom int
	update := container.UpdateConfig{}
	ds.setResources(&update.Resources, &oom, res, rec.Name)
	resp, err := ds.client.ContainerUpdate(ctx, rec.ID, update)
	if err != nil {
		return nil, fmt.Errorf("updating resources of container %s: %w", rec.ID, err)
	}
	for _, w := range resp.Warnings {
		klog.V(2).InfoS("Docker warning on container update", "containerID", rec.ID, "warning", w)
	}
	// ContainerStatus reports the container's resources from the index.
	ds.refreshRecord(ctx, rec.ID)
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}
