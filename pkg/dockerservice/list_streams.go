package dockerservice

import (
	"context"
	"fmt"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The Stream* RPCs (CRI v0.36+, kubelet's CRIListStreaming gate) are the
// List RPCs cut into several messages, so that a node with many pods never
// hits gRPC's message size limit. Each answers from its List twin, so the
// two can never disagree, and sends the items in messages of at least one
// item (none at all when there are no items: the client reads until EOF),
// each item exactly once.

// streamChunkBytes bounds the encoded items of one message. kubelet
// accepts 16 MiB messages, crictl and most gRPC clients 4 MiB; 1 MiB stays
// far below both while keeping the messages few (one for ~500 typical
// pods). An item larger than this goes alone in its message.
const streamChunkBytes = 1 << 20

// sendChunked sends items in order, in messages of at most
// streamChunkBytes of encoded items (or one item), stopping when ctx ends.
func sendChunked[T proto.Message](ctx context.Context, items []T, send func([]T) error) error {
	start, size := 0, 0
	flush := func(end int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := send(items[start:end]); err != nil {
			return err
		}
		start, size = end, 0
		return nil
	}
	for i, item := range items {
		// A repeated field's tag and length prefix cost a few bytes
		// more than the item itself.
		n := proto.Size(item) + 8
		if i > start && size+n > streamChunkBytes {
			if err := flush(i); err != nil {
				return err
			}
		}
		size += n
	}
	if start < len(items) {
		return flush(len(items))
	}
	return nil
}

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
	return sendChunked(ctx, resp.GetItems(), func(items []*runtimeapi.PodSandbox) error {
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
	return sendChunked(ctx, resp.GetContainers(), func(items []*runtimeapi.Container) error {
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
	return sendChunked(ctx, resp.GetStats(), func(items []*runtimeapi.ContainerStats) error {
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
	return sendChunked(ctx, resp.GetStats(), func(items []*runtimeapi.PodSandboxStats) error {
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
	return sendChunked(ctx, resp.GetPodMetrics(), func(items []*runtimeapi.PodSandboxMetrics) error {
		return stream.Send(&runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: items})
	})
}

// StreamImages is ListImages as a stream.
func (ds *DockerService) StreamImages(r *runtimeapi.StreamImagesRequest, stream runtimeapi.ImageService_StreamImagesServer) error {
	ctx := stream.Context()
	resp, err := ds.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: r.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunked(ctx, resp.GetImages(), func(items []*runtimeapi.Image) error {
		return stream.Send(&runtimeapi.StreamImagesResponse{Images: items})
	})
}
