package events

import (
	"context"
	"fmt"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

const (
	evCreated = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	evStarted = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	evStopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	evDeleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
)

func TestAdvance(t *testing.T) {
	type ev = runtimeapi.ContainerEventType
	lc := func(p Phase, started int64) Lifecycle { return Lifecycle{Phase: p, StartedAt: started} }
	cases := []struct {
		name         string
		prev, cur    Lifecycle
		startVisible bool
		want         []ev
		next         Lifecycle
	}{
		{"new", lc(PhaseNone, 0), lc(PhaseCreated, 0), false, []ev{evCreated}, lc(PhaseCreated, 0)},
		{"start", lc(PhaseCreated, 0), lc(PhaseStarted, 5), true, []ev{evStarted}, lc(PhaseStarted, 5)},
		{"exit", lc(PhaseStarted, 5), lc(PhaseStopped, 5), true, []ev{evStopped}, lc(PhaseStopped, 5)},
		{"ran and exited between two looks", lc(PhaseCreated, 0), lc(PhaseStopped, 5), true, []ev{evStarted, evStopped}, lc(PhaseStopped, 5)},
		{"born, ran and exited unseen", lc(PhaseNone, 0), lc(PhaseStopped, 5), true, []ev{evCreated, evStarted, evStopped}, lc(PhaseStopped, 5)},
		{"start failed: no STARTED", lc(PhaseCreated, 0), lc(PhaseStopped, 0), false, []ev{evStopped}, lc(PhaseStopped, 0)},
		{"sandbox stopped before ready", lc(PhaseCreated, 5), lc(PhaseStopped, 5), false, []ev{evStopped}, lc(PhaseStopped, 5)},
		{"no change", lc(PhaseStarted, 5), lc(PhaseStarted, 5), true, nil, lc(PhaseStarted, 5)},
		{"never backwards", lc(PhaseStopped, 5), lc(PhaseCreated, 5), false, nil, lc(PhaseStopped, 5)},
		{"restart after exit", lc(PhaseStopped, 5), lc(PhaseStarted, 9), true, []ev{evStarted}, lc(PhaseStarted, 9)},
		{"restart unseen", lc(PhaseStarted, 5), lc(PhaseStarted, 9), true, []ev{evStopped, evStarted}, lc(PhaseStarted, 9)},
		{"restart and exit unseen", lc(PhaseStarted, 5), lc(PhaseStopped, 9), true, []ev{evStopped, evStarted, evStopped}, lc(PhaseStopped, 9)},
		{"removed while running", lc(PhaseStarted, 5), lc(PhaseNone, 0), false, []ev{evStopped, evDeleted}, lc(PhaseNone, 0)},
		{"removed after exit", lc(PhaseStopped, 5), lc(PhaseNone, 0), false, []ev{evDeleted}, lc(PhaseNone, 0)},
		{"removed before start", lc(PhaseCreated, 0), lc(PhaseNone, 0), false, []ev{evDeleted}, lc(PhaseNone, 0)},
		{"never known", lc(PhaseNone, 0), lc(PhaseNone, 0), false, nil, lc(PhaseNone, 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, next := advance(tc.prev, tc.cur, tc.startVisible)
			if !slices.Equal(got, tc.want) || next != tc.next {
				t.Errorf("advance(%+v, %+v) = %v, %+v; want %v, %+v", tc.prev, tc.cur, got, next, tc.want, tc.next)
			}
		})
	}
}

// podSource is a pod of a sandbox and n running containers, whose
// statuses are built anew at each call, as the runtime's are.
type podSource struct {
	sandboxID string
	ids       []string
	synced    chan struct{}
}

func newPodSource(n int) *podSource {
	s := &podSource{sandboxID: "sb", synced: make(chan struct{})}
	for i := range n {
		s.ids = append(s.ids, fmt.Sprintf("c%d", i))
	}
	close(s.synced)
	return s
}

func (s *podSource) Synced() <-chan struct{} { return s.synced }
func (s *podSource) IDs() []string           { return append([]string{s.sandboxID}, s.ids...) }

func (s *podSource) Observe(_ context.Context, id string, _ *Target) (Target, bool) {
	if id == s.sandboxID {
		st, _ := s.SandboxStatus(id)
		return Target{Kind: store.KindSandbox, SandboxID: id, Sandbox: st, Lifecycle: Lifecycle{Phase: PhaseStarted, StartedAt: 1}}, true
	}
	return Target{Kind: store.KindContainer, SandboxID: s.sandboxID, Lifecycle: Lifecycle{Phase: PhaseStarted, StartedAt: 2}}, true
}

func (s *podSource) SandboxStatus(id string) (*runtimeapi.PodSandboxStatus, bool) {
	return &runtimeapi.PodSandboxStatus{
		Id: id, State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: 1,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "bench", Namespace: "ns", Uid: "uid-bench"},
		Labels:   map[string]string{"app": "bench"},
	}, true
}

func (s *podSource) ContainerStatuses(string) []*runtimeapi.ContainerStatus {
	out := make([]*runtimeapi.ContainerStatus, 0, len(s.ids))
	for _, id := range s.ids {
		out = append(out, &runtimeapi.ContainerStatus{
			Id: id, State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: 2, StartedAt: 2,
			Metadata: &runtimeapi.ContainerMetadata{Name: id},
			Image:    &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.36"},
			Labels:   map[string]string{"io.kubernetes.container.name": id},
		})
	}
	return out
}

// BenchmarkContainerEvent is the publisher's cost of one event for a
// container of a pod with 10 containers: the pod's statuses asked of the
// source, the event built and published to one subscriber. The index does
// not pay it: it only marks the ID. (What the runtime's own source costs
// to build the statuses is that of its status RPCs.)
func BenchmarkContainerEvent(b *testing.B) {
	src := newPodSource(10)
	id := src.ids[len(src.ids)-1]
	ev := New(src)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev.seed(ctx)
	sub := ev.bus.Subscribe(ctx, 1<<20)
	got := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case x := <-sub.C():
				if len(x.ContainersStatuses) != 10 || x.ContainerEventType != evStarted {
					panic(fmt.Sprintf("unexpected event %v", x))
				}
				n++
			case <-sub.Done():
				got <- n + len(sub.C()) // what is left was sent too
				return
			}
		}
	}()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		ev.known[id].Phase = PhaseCreated // so that each update is a STARTED
		ev.update(ctx, id)
		n++
	}
	sub.Close()
	if sent := <-got; sent != n {
		b.Fatalf("%d events for %d updates", sent, n)
	}
}
