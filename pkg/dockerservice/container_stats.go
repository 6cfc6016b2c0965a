package dockerservice

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStats reports one container's CPU and memory usage.
func (ds *DockerService) ContainerStats(_ context.Context, r *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	rec, err := ds.mustFindContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	s := ds.containers.stats
	return &runtimeapi.ContainerStatsResponse{Stats: s.Container(rec, s.Now())}, nil
}

// ListContainerStats reports the usage of the containers matching the
// filter (ID prefix, pod sandbox, label selector), created and exited
// ones included, with no usage figures for those not running.
func (ds *DockerService) ListContainerStats(_ context.Context, r *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	if err := ds.requireSynced(); err != nil {
		return nil, err
	}
	f := r.GetFilter()
	recs := ds.containersMatching(f.GetPodSandboxId(), f.GetId(), f.GetLabelSelector())
	s := ds.containers.stats
	now := s.Now()
	out := make([]*runtimeapi.ContainerStats, 0, len(recs))
	for _, rec := range recs {
		out = append(out, s.Container(rec, now))
	}
	if f.GetId() == "" && f.GetPodSandboxId() == "" && len(f.GetLabelSelector()) == 0 {
		s.ForgetContainersBut(recs, func(id string) bool { _, ok := ds.store().Get(id); return ok })
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: out}, nil
}
