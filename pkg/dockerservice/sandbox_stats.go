package dockerservice

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/stats"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// PodSandboxStats reports one sandbox's usage. A sandbox known only from
// its checkpoint, or whose containers are not running, is reported with no
// figures.
func (ds *DockerService) PodSandboxStats(_ context.Context, r *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	ref, err := ds.mustFindSandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	s := ds.containers.stats
	now := s.Now()
	return &runtimeapi.PodSandboxStatsResponse{Stats: s.PodStats(ds.samplePod(ref), now)}, nil
}

// ListPodSandboxStats reports the usage of the sandboxes matching the
// filter (ID prefix, label selector), as ListContainerStats does for
// containers: those not running are listed with no figures. Sandboxes
// known only from a checkpoint have nothing to measure and no labels to
// select on, and are left out.
func (ds *DockerService) ListPodSandboxStats(_ context.Context, r *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	if err := ds.requireSynced(); err != nil {
		return nil, err
	}
	f := r.GetFilter()
	recs := ds.sandboxesMatching(f.GetId(), f.GetLabelSelector())
	s := ds.containers.stats
	now := s.Now()
	out := make([]*runtimeapi.PodSandboxStats, 0, len(recs))
	for _, rec := range recs {
		out = append(out, s.PodStats(ds.samplePod(ds.sandboxRefOf(rec)), now))
	}
	if f.GetId() == "" && len(f.GetLabelSelector()) == 0 {
		s.ForgetPodsBut(recs)
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: out}, nil
}

// sandboxesMatching returns the indexed sandboxes whose ID starts with
// idPrefix and whose CRI labels match selector.
func (ds *DockerService) sandboxesMatching(idPrefix string, selector map[string]string) []*store.Record {
	recs := ds.store().List(store.KindSandbox)
	out := recs[:0]
	for _, rec := range recs {
		if strings.HasPrefix(rec.ID, idPrefix) && matchesSelector(rec.SandboxInfo().Labels, selector) {
			out = append(out, rec)
		}
	}
	return out
}

func (ds *DockerService) sandboxRefOf(rec *store.Record) sandboxRef {
	return sandboxRef{id: rec.ID, rec: rec, cp: ds.getCheckpoint(rec.ID)}
}

// samplePod reads the figures of a sandbox and its containers
// (pkg/dockerservice/stats). A sandbox known only from its checkpoint is
// named by it.
func (ds *DockerService) samplePod(ref sandboxRef) *stats.PodSample {
	p := stats.Pod{ID: ref.id, Sandbox: ref.rec, Containers: ds.store().ContainersOf(ref.id), HostNetwork: ref.hostNetwork()}
	if ref.rec != nil {
		p.Metadata = ref.rec.SandboxInfo().Metadata
	} else {
		p.Metadata = &runtimeapi.PodSandboxMetadata{Name: ref.cp.Name, Namespace: ref.cp.Namespace, Uid: ref.cp.UID, Attempt: ref.cp.Attempt}
	}
	return ds.containers.stats.SamplePod(p)
}
