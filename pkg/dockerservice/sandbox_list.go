package dockerservice

import (
	"context"
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListPodSandbox answers from a single Docker ContainerList (whatever the
// number of pods) plus the in-memory checkpoints: sandboxes whose infra
// container is gone but whose checkpoint remains are listed NOTREADY so
// that kubelet garbage-collects them, tearing their network down.
func (ds *DockerService) ListPodSandbox(ctx context.Context, r *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := r.GetFilter()
	args := filters.NewArgs(filters.Arg("label", labelType+"="+typeSandbox))
	if f.GetId() != "" {
		args.Add("id", f.GetId())
	}
	cs, err := ds.client.ContainerList(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, fmt.Errorf("listing pod sandboxes: %w", err)
	}
	seen := make(map[string]bool, len(cs))
	items := make([]*runtimeapi.PodSandbox, 0, len(cs))
	for _, c := range cs {
		seen[c.ID] = true
		labels, annotations := splitLabels(c.Labels)
		if !matchesSelector(labels, f.GetLabelSelector()) {
			continue
		}
		state := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if c.State == "running" && !ds.isSettingUp(c.ID) {
			state = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		if f.GetState() != nil && f.GetState().State != state {
			continue
		}
		created := c.Created * 1e9
		if cp := ds.getCheckpoint(c.ID); cp != nil && cp.CreatedAt != 0 {
			// Docker's list has second precision; kubelet orders
			// sandboxes by creation time.
			created = cp.CreatedAt
		}
		items = append(items, &runtimeapi.PodSandbox{
			Id:             c.ID,
			Metadata:       sandboxMetadataFromLabels(c.Labels),
			State:          state,
			CreatedAt:      created,
			Labels:         labels,
			Annotations:    annotations,
			RuntimeHandler: c.Labels[labelRuntimeHandler],
		})
	}
	items = append(items, ds.checkpointOnlySandboxes(seen, f)...)
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

// checkpointOnlySandboxes lists sandboxes known only from their checkpoint.
// Their labels are unknown, so a label selector excludes them.
func (ds *DockerService) checkpointOnlySandboxes(seen map[string]bool, f *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
	if len(f.GetLabelSelector()) > 0 || (f.GetState() != nil && f.GetState().State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY) {
		return nil
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	var out []*runtimeapi.PodSandbox
	for id, cp := range ds.sandboxes {
		if seen[id] || ds.settingUp[id] || !strings.HasPrefix(id, f.GetId()) {
			continue
		}
		out = append(out, &runtimeapi.PodSandbox{
			Id:        id,
			Metadata:  &runtimeapi.PodSandboxMetadata{Name: cp.Name, Namespace: cp.Namespace, Uid: cp.UID, Attempt: cp.Attempt},
			State:     runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
			CreatedAt: cp.CreatedAt,
		})
	}
	return out
}
