package index

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// startIndex runs an index over f until the test ends and waits for its
// first sync.
func startIndex(t *testing.T, f *fakedocker.Engine, opts Options) *Index {
	t.Helper()
	x := New(f, decode, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-x.SyncedCh():
	case <-time.After(5 * time.Second):
		t.Fatal("index did not sync")
	}
	return x
}

func (x *Index) has(id string) bool { _, ok := x.Get(id); return ok }

func (x *Index) idle() bool { return x.Inspecting() == 0 }

func TestResyncIndexesWhatExists(t *testing.T) {
	f := newFakeEngine()
	add(f, "sb", "sandbox", "running")
	add(f, "c", "container", "exited")
	add(f, "foreign", "", "running")
	x := startIndex(t, f, Options{})
	if !x.Synced() || x.Len() != 2 {
		t.Fatalf("synced %v, %d records, want 2", x.Synced(), x.Len())
	}
	if r, _ := x.Get("sb"); r.Kind != store.KindSandbox || !r.Running() || r.Pid == 0 {
		t.Errorf("sandbox record = %+v", r)
	}
	if ready, reason := x.Health(); !ready {
		t.Errorf("Health = false (%s) after a sync", reason)
	}
}

// A container whose inspect hangs delays its own record only.
func TestHungInspectDoesNotStopOtherEvents(t *testing.T) {
	f := newFakeEngine()
	x := startIndex(t, f, Options{Workers: 2, InspectTimeout: time.Minute, StuckAfter: time.Minute})
	gate := f.GateInspect("hung")
	add(f, "hung", "container", "running")
	f.Emit(events.ActionStart, "hung", nil)
	testutil.Eventually(t, "the hung inspect to start", func() bool { return f.InspectCount("hung") == 1 })
	for _, id := range []string{"a", "b", "c"} {
		add(f, id, "container", "running")
		f.Emit(events.ActionStart, id, nil)
	}
	testutil.Eventually(t, "later containers indexed", func() bool { return x.has("a") && x.has("b") && x.has("c") })
	if x.has("hung") {
		t.Error("hung container indexed before its inspect answered")
	}
	close(gate)
	testutil.Eventually(t, "hung container indexed once its inspect answers", func() bool { return x.has("hung") })
}

// The deadline frees a worker from an inspect that never answers.
func TestInspectDeadlineFreesTheWorker(t *testing.T) {
	f := newFakeEngine()
	x := startIndex(t, f, Options{Workers: 1, InspectTimeout: 20 * time.Millisecond, MinResyncGap: time.Hour})
	f.GateInspect("stuck") // never opened
	add(f, "stuck", "container", "running")
	f.Emit(events.ActionStart, "stuck", nil)
	add(f, "next", "container", "running")
	f.Emit(events.ActionStart, "next", nil)
	testutil.Eventually(t, "the next container indexed by the only worker", func() bool { return x.has("next") })
}

func TestHealthReportsUndrainedEventsAndRecovers(t *testing.T) {
	f := newFakeEngine()
	x := startIndex(t, f, Options{Workers: 1, InspectTimeout: time.Minute, StuckAfter: 30 * time.Millisecond})
	gate := f.GateInspect("x1")
	for _, id := range []string{"x1", "x2", "x3"} {
		add(f, id, "container", "running")
		f.Emit(events.ActionStart, id, nil)
	}
	var reason string
	testutil.Eventually(t, "Health not ready", func() bool {
		var ready bool
		ready, reason = x.Health()
		return !ready
	})
	if !strings.Contains(reason, "not drained") || !strings.Contains(reason, "2 pending") {
		t.Errorf("reason = %q, want it to say events are not drained and 2 are pending", reason)
	}
	close(gate)
	testutil.Eventually(t, "Health ready again with every container indexed", func() bool {
		ready, _ := x.Health()
		return ready && x.has("x1") && x.has("x2") && x.has("x3")
	})
}

func TestDroppedEventsAreHealedByThePeriodicResync(t *testing.T) {
	f := newFakeEngine()
	add(f, "c", "container", "running")
	x := startIndex(t, f, Options{ResyncPeriod: 10 * time.Millisecond})
	// No events: as if dockerd dropped them.
	add(f, "new", "sandbox", "running")
	f.SetStatus("c", "exited")
	add(f, "gone", "container", "running")
	testutil.Eventually(t, "new container indexed", func() bool { return x.has("new") && x.has("gone") })
	f.DropContainer("gone")
	testutil.Eventually(t, "exit and removal seen", func() bool {
		r, _ := x.Get("c")
		return r.State == store.StateExited && r.Pid == 0 && !x.has("gone")
	})
}

// A failed inspect triggers an early resync, which heals the record.
func TestFailedInspectTriggersResync(t *testing.T) {
	f := newFakeEngine()
	x := startIndex(t, f, Options{ResyncPeriod: time.Hour, MinResyncGap: time.Millisecond})
	f.Do(func(s *fakedocker.State) { s.FailInspect["c"] = 1 })
	add(f, "c", "container", "running")
	f.Emit(events.ActionStart, "c", nil)
	testutil.Eventually(t, "container indexed by the triggered resync", func() bool { return x.has("c") })
	if n := f.InspectCount("c"); n != 2 {
		t.Errorf("%d inspects of c, want 2 (the failed one and the resync's)", n)
	}
}

func TestResyncFailureMakesHealthNotReady(t *testing.T) {
	f := newFakeEngine()
	x := startIndex(t, f, Options{ResyncPeriod: 5 * time.Millisecond, ReconnectMaxDelay: 5 * time.Millisecond})
	f.Do(func(s *fakedocker.State) { s.ListErr = errors.New("list refused") })
	testutil.Eventually(t, "Health not ready", func() bool {
		ready, reason := x.Health()
		return !ready && strings.Contains(reason, "list refused")
	})
	f.Do(func(s *fakedocker.State) { s.ListErr = nil })
	testutil.Eventually(t, "Health ready", func() bool { ready, _ := x.Health(); return ready })
}

func TestFirstSyncFailureIsReported(t *testing.T) {
	f := newFakeEngine()
	f.Do(func(s *fakedocker.State) { s.ListErr = errors.New("Cannot connect to the Docker daemon") })
	x := New(f, decode, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go x.Run(ctx)
	<-x.FirstSync()
	if ready, reason := x.Health(); ready || x.Synced() || !strings.Contains(reason, "Cannot connect") {
		t.Errorf("Health = %v %q, synced %v", ready, reason, x.Synced())
	}
}

// Events for an ID being inspected coalesce into one follow-up inspect.
func TestEventsForOneIDCoalesce(t *testing.T) {
	f := newFakeEngine()
	add(f, "marker", "sandbox", "running")
	x := startIndex(t, f, Options{Workers: 1, InspectTimeout: time.Minute})
	gate := f.GateInspect("c")
	add(f, "c", "container", "created")
	f.Emit(events.ActionCreate, "c", map[string]string{"name": "c"})
	testutil.Eventually(t, "the first inspect in flight", func() bool { return f.InspectCount("c") == 1 })
	for range 5 {
		f.Emit(events.ActionRename, "c", nil)
	}
	// Events are applied in order: once the marker's death is seen, so
	// are the renames.
	f.Emit(events.ActionDie, "marker", map[string]string{"exitCode": "1"})
	testutil.Eventually(t, "the events applied", func() bool { r, _ := x.Get("marker"); return !r.Running() })
	x.sched.mu.Lock()
	again := x.sched.pending["c"].again
	x.sched.mu.Unlock()
	if !again {
		t.Error("no follow-up inspect asked for")
	}
	close(gate)
	testutil.Eventually(t, "the queue drained", x.idle)
	if n := f.InspectCount("c"); n != 2 {
		t.Errorf("%d inspects, want 2 (one, and one follow-up for the events that came meanwhile)", n)
	}
}

func TestDestroyWinsOverASlowInspect(t *testing.T) {
	f := newFakeEngine()
	x := startIndex(t, f, Options{InspectTimeout: time.Minute})
	// The events loop's inspect.
	gate := f.GateInspect("d")
	add(f, "d", "container", "running")
	f.Emit(events.ActionStart, "d", nil)
	testutil.Eventually(t, "the inspect in flight", func() bool { return f.InspectCount("d") == 1 })
	f.DropContainer("d")
	f.Emit(events.ActionDestroy, "d", nil)
	testutil.Eventually(t, "the destroy applied", func() bool {
		x.sched.mu.Lock()
		defer x.sched.mu.Unlock()
		return x.sched.pending["d"].destroyed
	})
	close(gate)
	testutil.Eventually(t, "the inspect finished", x.idle)
	if x.has("d") {
		t.Error("an inspect begun before the destroy brought the container back")
	}

	// An RPC's refresh.
	add(f, "r", "container", "running")
	f.Emit(events.ActionStart, "r", nil)
	testutil.Eventually(t, "r indexed", func() bool { return x.has("r") })
	testutil.Eventually(t, "the queue drained", x.idle)
	gate = f.GateInspect("r")
	errc := make(chan error, 1)
	go func() {
		_, err := x.Refresh(context.Background(), "r")
		errc <- err
	}()
	testutil.Eventually(t, "the refresh in flight", func() bool { return f.InspectCount("r") == 2 })
	f.DropContainer("r")
	f.Emit(events.ActionDestroy, "r", nil)
	testutil.Eventually(t, "the destroy applied", func() bool { return !x.has("r") })
	close(gate)
	if err := <-errc; !errdefs.IsNotFound(err) {
		t.Errorf("Refresh of a container destroyed meanwhile: %v, want NotFound", err)
	}
	if x.has("r") {
		t.Error("a refresh begun before the destroy brought the container back")
	}
}

func TestOwnCreateAndStartAreRecordedWithoutEventInspects(t *testing.T) {
	f := newFakeEngine()
	add(f, "marker", "sandbox", "running")
	x := startIndex(t, f, Options{})
	decorated := false
	created, err := x.Create(context.Background(), &container.Config{Labels: map[string]string{testLabel: "container"}}, nil, "own", func(r *store.Record) { decorated = true })
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := x.Get(created.ID); !ok || r.State != store.StateCreated || !decorated {
		t.Fatalf("after Create: %+v (decorated %v)", r, decorated)
	}
	rec, err := x.Start(context.Background(), created.ID)
	if err != nil || !rec.Running() || rec.Pid == 0 {
		t.Fatalf("Start = %+v, %v", rec, err)
	}
	// Events are applied in order: once the marker's death is seen, the
	// create and start events before it have been handled.
	f.Emit(events.ActionDie, "marker", map[string]string{"exitCode": "1"})
	testutil.Eventually(t, "die event applied", func() bool { r, _ := x.Get("marker"); return !r.Running() })
	testutil.Eventually(t, "the queue drained", x.idle)
	if n := f.InspectCount(created.ID); n != 1 {
		t.Errorf("%d inspects, want 1 (Start's write-back)", n)
	}
}

func TestFailedWriteBackInspectIsRefreshedLater(t *testing.T) {
	f := newFakeEngine()
	x := startIndex(t, f, Options{})
	created, err := x.Create(context.Background(), &container.Config{Labels: map[string]string{testLabel: "container"}}, nil, "c", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Do(func(s *fakedocker.State) { s.FailInspect[created.ID] = 1 })
	if _, err := x.Start(context.Background(), created.ID); err == nil {
		t.Fatal("Start succeeded though its inspect failed")
	}
	testutil.Eventually(t, "the detached refresh to record the start", func() bool {
		r, _ := x.Get(created.ID)
		return r.Running() && r.Pid != 0
	})
}

func TestCreateThatFailedAfterDockerMadeTheContainer(t *testing.T) {
	f := newFakeEngine()
	x := startIndex(t, f, Options{})
	cfg := &container.Config{Labels: map[string]string{testLabel: "sandbox"}}
	f.Do(func(s *fakedocker.State) { s.CreateErr, s.CreateMakes = context.DeadlineExceeded, true })
	created, err := x.Create(context.Background(), cfg, nil, "orphan", nil)
	if !errors.Is(err, context.DeadlineExceeded) || created.ID == "" {
		t.Fatalf("Create = %+v, %v; want the timeout and the ID of what Docker made", created, err)
	}
	if r, ok := x.Get(created.ID); !ok || r.Name != "orphan" {
		t.Errorf("orphan not indexed: %+v", r)
	}

	// A container of that name older than the call was not made by it.
	f.AddContainer(fakedocker.Container{ID: "older", Name: "busy", Status: "exited", Labels: map[string]string{testLabel: "sandbox"}, Created: time.Now().Add(-time.Hour)})
	f.Do(func(s *fakedocker.State) { s.CreateErr, s.CreateMakes = errors.New("connection reset"), false })
	if created, err := x.Create(context.Background(), cfg, nil, "busy", nil); err == nil || created.ID != "" {
		t.Errorf("Create = %+v, %v; must not claim an older container", created, err)
	}
	// Docker refusing proves nothing was made: no lookup, no ID.
	f.Do(func(s *fakedocker.State) { s.CreateErr = nil })
	before := f.InspectCount("busy")
	if created, err := x.Create(context.Background(), cfg, nil, "busy", nil); !errdefs.IsConflict(err) || created.ID != "" {
		t.Errorf("Create over a used name = %+v, %v; want Conflict and no ID", created, err)
	}
	if f.InspectCount("busy") != before {
		t.Error("a refused create looked the name up")
	}
}

func TestLookupFallsBackToDocker(t *testing.T) {
	f := newFakeEngine()
	x := startIndex(t, f, Options{})
	add(f, "unseen", "sandbox", "exited")
	add(f, "foreign", "", "running")
	rec, err := x.Lookup(context.Background(), "unseen")
	if err != nil || rec == nil || rec.ID != "unseen" || !x.has("unseen") {
		t.Errorf("Lookup of a container the index lacks = %+v, %v", rec, err)
	}
	for _, id := range []string{"missing", "foreign"} {
		if rec, err := x.Lookup(context.Background(), id); rec != nil || err != nil {
			t.Errorf("Lookup(%s) = %+v, %v; want nothing", id, rec, err)
		}
	}
	f.Do(func(s *fakedocker.State) { s.FailInspect["other"] = 1 })
	if _, err := x.Lookup(context.Background(), "other"); err == nil {
		t.Error("Lookup hid a failed inspect")
	}
}

// An inspect made while a container ran, stored after the record of its
// death, must not bring it back to life.
func TestStaleInspectDoesNotResurrect(t *testing.T) {
	x := New(newFakeEngine(), decode, Options{})
	x.store.Put(&store.Record{ID: "c1", Kind: store.KindContainer, State: store.StateExited, StartedAt: 100, FinishedAt: 200, ExitCode: 3})
	since := x.store.Generation()
	x.putInspected(&store.Record{ID: "c1", Kind: store.KindContainer, State: store.StateRunning, StartedAt: 100, Pid: 42}, since)
	if r, _ := x.Get("c1"); r.State != store.StateExited || r.ExitCode != 3 {
		t.Errorf("stale running record replaced the exit: %+v", r)
	}
	// A real restart (docker start behind our back) starts later.
	x.putInspected(&store.Record{ID: "c1", Kind: store.KindContainer, State: store.StateRunning, StartedAt: 300, Pid: 43}, since)
	if r, _ := x.Get("c1"); r.State != store.StateRunning || r.Pid != 43 {
		t.Errorf("restart not recorded: %+v", r)
	}
	x.putInspected(&store.Record{ID: "c2", Kind: store.KindContainer, State: store.StateCreated}, since)
	if !x.has("c2") {
		t.Error("a new record was not stored")
	}
}
