package dockerservice

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/stats"
)

// ListMetricDescriptors describes the metrics ListPodSandboxMetrics
// returns. kubelet asks once, at start-up: the set never changes.
func (ds *DockerService) ListMetricDescriptors(context.Context, *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: stats.MetricDescriptors()}, nil
}

// ListPodSandboxMetrics reports the metrics of every sandbox with a
// running container, read from the same files as ListPodSandboxStats.
// Sandboxes with nothing running have no metrics and are left out.
func (ds *DockerService) ListPodSandboxMetrics(context.Context, *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	if err := ds.requireSynced(); err != nil {
		return nil, err
	}
	recs := ds.sandboxesMatching("", nil)
	out := make([]*runtimeapi.PodSandboxMetrics, 0, len(recs))
	for _, rec := range recs {
		ps := ds.samplePod(ds.sandboxRefOf(rec))
		if !ps.Running() {
			continue
		}
		out = append(out, stats.PodMetrics(ps))
	}
	return &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: out}, nil
}
