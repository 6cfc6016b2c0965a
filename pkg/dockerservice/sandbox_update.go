package dockerservice

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
)

// UpdatePodSandboxResources is how kubelet (1.33+) tells the runtime of a
// pod-level resize. kubelet resizes the pod's cgroup itself, and Docker
// has nothing of a pod to update: the infra container holds no limits of
// its own and the workload containers get theirs through
// UpdateContainerResources. So the answer only says whether the sandbox
// exists and the request is one a cgroup could hold; kubelet reads an
// error as the runtime rejecting the resize.
func (ds *DockerService) UpdatePodSandboxResources(ctx context.Context, r *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	id := r.GetPodSandboxId()
	if err := dockerspec.ValidateID("pod sandbox", "pod_sandbox_id", id); err != nil {
		return nil, err
	}
	// Checked although nothing is applied: accepting a negative CPU
	// weight or memory limit would tell kubelet the resize took effect.
	if err := dockerspec.ValidateResourceRanges("pod sandbox "+id+": resources", r.GetResources()); err != nil {
		return nil, err
	}
	if err := dockerspec.ValidateResourceRanges("pod sandbox "+id+": overhead", r.GetOverhead()); err != nil {
		return nil, err
	}
	ref, err := ds.mustFindSandbox(id)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(4).Info("Pod sandbox resources updated by kubelet; nothing for Docker to do", "podSandboxID", ref.id, "resources", r.GetResources(), "overhead", r.GetOverhead())
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}
