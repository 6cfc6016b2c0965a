package dockerservice

import (
	"fmt"

	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
)

// The Stream* RPCs (CRI v0.36+, kubelet's CRIListStreaming gate) are the
// List RPCs cut into several messages, so that a node with many pods never
// hits gRPC's message size limit. Each answers from its List twin, so the
// two can never disagree, and sends the items in messages of at least one
// item (none at all when there are no items: the client reads until EOF),
// each item exactly once (crirpc.SendChunked).

// twinFailed names the stream in its List twin's error: an Unimplemented
// twin must not read as if the stream were the one missing.
func twinFailed(method string, err error) error {
	if st, ok := status.FromError(err); ok {
		return status.Errorf(st.Code(), "%s: %s", method, st.Message())
	}
	return fmt.Errorf("%s: %w", method, err)
}

// StreamPodSandboxes is ListPodSandbox as a stream.
func (ds *DockerService) StreamPodSandboxes(r *runtimeapi.StreamPodSandboxesRequest, stream runtimeapi.RuntimeService_StreamPodSandboxesServer) error {
	ctx := stream.Context()
	resp, err := ds.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: r.GetFilter()})
	if err != nil {
		return err
	}
	return crirpc.SendChunked(ctx, resp.GetItems(), func(items []*runtimeapi.PodSandbox) error {
		return stream.Send(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: items})
	})
}

// StreamContainers is ListContainers as a stream.
func (ds *DockerService) StreamContainers(r *runtimeapi.StreamContainersRequest, stream runtimeapi.RuntimeService_StreamContainersServer) error {
	ctx := stream.Context()
	resp, err := ds.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: r.GetFilter()})
	if err != nil {
		return err
	}
	return crirpc.SendChunked(ctx, resp.GetContainers(), func(items []*runtimeapi.Container) error {
		return stream.Send(&runtimeapi.StreamContainersResponse{Containers: items})
	})
}

// StreamContainerStats is ListContainerStats as a stream.
func (ds *DockerService) StreamContainerStats(r *runtimeapi.StreamContainerStatsRequest, stream runtimeapi.RuntimeService_StreamContainerStatsServer) error {
	ctx := stream.Context()
	resp, err := ds.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: r.GetFilter()})
	if err != nil {
		return err
	}
	return crirpc.SendChunked(ctx, resp.GetStats(), func(items []*runtimeapi.ContainerStats) error {
		return stream.Send(&runtimeapi.StreamContainerStatsResponse{ContainerStats: items})
	})
}

// StreamPodSandboxStats is ListPodSandboxStats as a stream.
func (ds *DockerService) StreamPodSandboxStats(r *runtimeapi.StreamPodSandboxStatsRequest, stream runtimeapi.RuntimeService_StreamPodSandboxStatsServer) error {
	ctx := stream.Context()
	resp, err := ds.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: r.GetFilter()})
	if err != nil {
		return twinFailed("StreamPodSandboxStats", err)
	}
	return crirpc.SendChunked(ctx, resp.GetStats(), func(items []*runtimeapi.PodSandboxStats) error {
		return stream.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: items})
	})
}

// StreamPodSandboxMetrics is ListPodSandboxMetrics as a stream.
func (ds *DockerService) StreamPodSandboxMetrics(_ *runtimeapi.StreamPodSandboxMetricsRequest, stream runtimeapi.RuntimeService_StreamPodSandboxMetricsServer) error {
	ctx := stream.Context()
	resp, err := ds.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		return twinFailed("StreamPodSandboxMetrics", err)
	}
	return crirpc.SendChunked(ctx, resp.GetPodMetrics(), func(items []*runtimeapi.PodSandboxMetrics) error {
		return stream.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: items})
	})
}
