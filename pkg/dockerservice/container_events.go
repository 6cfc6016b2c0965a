package dockerservice

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/events"
	"github.com/netshim/netshim/pkg/dockerservice/logs"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// The container events (pkg/dockerservice/events) are made of what the
// status RPCs report: eventSource is the service as their source.

// GetContainerEvents streams container and sandbox lifecycle events until
// the client goes away.
func (ds *DockerService) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	return ds.events.Serve(stream)
}

// StopEvents ends every container events stream, for a graceful shutdown
// that would otherwise wait for them.
func (ds *DockerService) StopEvents() { ds.events.Stop() }

// checkpointChanged marks a change of a sandbox's checkpoint, which its
// state derives from, for the cached list and for events.
// (The store's generation, which the cache is keyed by, moved with the
// change itself.)
func (ds *DockerService) checkpointChanged(id string) {
	ds.events.Touch(id)
}

// eventSource is the service seen by the events publisher.
type eventSource struct{ ds *DockerService }

var _ events.Source = eventSource{}

func (s eventSource) Synced() <-chan struct{} { return s.ds.index.SyncedCh() }

// IDs are the sandboxes and containers of the index, and the sandboxes
// known only from their checkpoint.
func (s eventSource) IDs() []string {
	ids := map[string]bool{}
	for _, kind := range []store.Kind{store.KindSandbox, store.KindContainer} {
		for _, r := range s.ds.store().List(kind) {
			ids[r.ID] = true
		}
	}
	for _, id := range s.ds.pods.IDs() {
		ids[id] = true
	}
	out := make([]string, 0, len(ids))
	for id := range ids {
		out = append(out, id)
	}
	return out
}

// Observe is id's state as the status RPCs report it now: a container's
// visible state (its exit shows once its log is copied), a sandbox's
// status.
func (s eventSource) Observe(ctx context.Context, id string, prev *events.Target) (events.Target, bool) {
	ds := s.ds
	rec, _ := ds.store().Get(id)
	if rec != nil && rec.Kind == store.KindContainer {
		visible := ds.visibleState(rec)
		if visible != runtimeapi.ContainerState_CONTAINER_EXITED && containerState(rec) == runtimeapi.ContainerState_CONTAINER_EXITED {
			s.recheckWhenCopied(ctx, rec)
		}
		return events.Target{
			Kind:      store.KindContainer,
			SandboxID: rec.SandboxID,
			Lifecycle: events.Lifecycle{Phase: events.ContainerPhase(visible), StartedAt: rec.StartedAt},
		}, true
	}
	if prev != nil && prev.Kind == store.KindContainer {
		return events.Target{}, false
	}
	ref := sandboxRef{id: id, rec: rec, cp: ds.getCheckpoint(id)}
	if ref.rec == nil && ref.cp == nil {
		return events.Target{}, false
	}
	st := ds.sandboxStatusOf(ref)
	var was events.Phase
	if prev != nil {
		was = prev.Phase
	}
	cur := events.Target{Kind: store.KindSandbox, SandboxID: id, Sandbox: st}
	cur.Phase = events.SandboxPhase(ref.rec, st.State, was)
	if ref.rec != nil {
		cur.StartedAt = ref.rec.StartedAt
	}
	return cur, true
}

// SandboxStatus is a sandbox's status as PodSandboxStatus reports it.
func (s eventSource) SandboxStatus(id string) (*runtimeapi.PodSandboxStatus, bool) {
	ref, found, err := s.ds.lookupSandbox(id)
	if err != nil || !found {
		return nil, false
	}
	return s.ds.sandboxStatusOf(ref), true
}

// ContainerStatuses are the statuses of a pod's containers, in creation
// order, as kubelet sorts them.
func (s eventSource) ContainerStatuses(sandboxID string) []*runtimeapi.ContainerStatus {
	recs := s.ds.store().ContainersOf(sandboxID)
	slices.SortFunc(recs, func(a, b *store.Record) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	containers := make([]*runtimeapi.ContainerStatus, 0, len(recs))
	for _, r := range recs {
		st, _ := s.ds.containerStatusOf(r)
		containers = append(containers, st)
	}
	return containers
}

// recheckWhenCopied looks at a container again when its exit may become
// visible: when its log follower finishes, or when the grace after which
// an exit shows anyway has passed. A container hidden only by the mark of
// a start in progress is looked at again when the mark goes (the log
// streams touch it).
func (s eventSource) recheckWhenCopied(ctx context.Context, rec *store.Record) {
	id := rec.ID
	mgr := s.ds.containers.logs
	var done <-chan struct{}
	if _, following := mgr.Following(id); following {
		done = mgr.Done(id)
	}
	var deadline time.Time
	if rec.FinishedAt != 0 {
		deadline = time.Unix(0, rec.FinishedAt)
		if since, copying := s.ds.containers.streams.CopyingSince(id); copying && since.After(deadline) {
			deadline = since
		}
		deadline = deadline.Add(logs.DrainGrace + time.Millisecond)
	}
	s.ds.events.RecheckWhen(ctx, id, done, deadline)
}
