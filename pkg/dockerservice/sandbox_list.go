package dockerservice

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// ListPodSandbox answers from the state index and the in-memory
// checkpoints, with no Docker call however many pods there are. Sandboxes
// whose infra container is gone but whose checkpoint remains are listed
// NOTREADY, so that kubelet garbage-collects them, tearing their network
// down.
func (ds *DockerService) ListPodSandbox(_ context.Context, r *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	if err := ds.requireSynced(); err != nil {
		return nil, err
	}
	ds.refreshPauselessPinned()
	f := r.GetFilter()
	if f.GetId() == "" && len(f.GetLabelSelector()) == 0 {
		// kubelet's relist and housekeeping: the same answer until the
		// state changes.
		if slot := ds.wire.sandboxes.slot(f.GetState() != nil, int32(f.GetState().GetState())); slot != nil {
			return cachedOrBuild(slot, ds.currentStateKey(), func() *runtimeapi.ListPodSandboxResponse {
				return ds.listPodSandbox(f)
			}), nil
		}
	}
	return ds.listPodSandbox(f), nil
}

func (ds *DockerService) listPodSandbox(f *runtimeapi.PodSandboxFilter) *runtimeapi.ListPodSandboxResponse {
	recs := ds.store().List(store.KindSandbox)
	seen := make(map[string]bool, len(recs))
	items := make([]*runtimeapi.PodSandbox, 0, len(recs))
	for _, rec := range recs {
		seen[rec.ID] = true
		if !strings.HasPrefix(rec.ID, f.GetId()) {
			continue
		}
		info := rec.SandboxInfo()
		if !matchesSelector(info.Labels, f.GetLabelSelector()) {
			continue
		}
		state := ds.sandboxState(rec.ID, rec.Running())
		if f.GetState() != nil && f.GetState().State != state {
			continue
		}
		items = append(items, &runtimeapi.PodSandbox{
			Id:             rec.ID,
			Metadata:       info.Metadata,
			State:          state,
			CreatedAt:      rec.CreatedAt,
			Labels:         info.Labels,
			Annotations:    info.Annotations,
			RuntimeHandler: info.RuntimeHandler,
		})
	}
	items = append(items, ds.checkpointOnlySandboxes(seen, f)...)
	return &runtimeapi.ListPodSandboxResponse{Items: items}
}

// checkpointOnlySandboxes lists sandboxes known only from their checkpoint.
// Their labels are unknown, so a label selector excludes them.
func (ds *DockerService) checkpointOnlySandboxes(seen map[string]bool, f *runtimeapi.PodSandboxFilter) []*runtimeapi.PodSandbox {
	if len(f.GetLabelSelector()) > 0 || (f.GetState() != nil && f.GetState().State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY) {
		return nil
	}
	var out []*runtimeapi.PodSandbox
	for _, cp := range ds.pods.All() {
		id := cp.SandboxID
		if seen[id] || !strings.HasPrefix(id, f.GetId()) {
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

// matchesSelector reports whether CRI labels satisfy every key=value of the
// selector, the only form CRI filters use.
func matchesSelector(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
