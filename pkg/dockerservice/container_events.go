package dockerservice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/broadcast"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// GetContainerEvents feeds kubelet's evented PLEG. kubelet 1.36 builds a
// pod's status from an event alone (its sandbox status and the statuses of
// all its containers) and caches it as of the event's time; 1.37 takes a
// CONTAINER_STOPPED_EVENT as a cue to relist the pod at once. Either way
// an event must describe what the status RPCs answer by then, never
// something they do not show yet.
//
// So events are not derived from Docker's events but from what readers
// see. Every write to the index, to a sandbox's checkpoint, and the end of
// a container's log copy marks the ID as changed; one goroutine takes the
// marked IDs in order, computes each one's state as the status RPCs would
// report it, and publishes the steps between what subscribers were last
// told and that state. A container that exits is "stopped" once its exit
// shows (after its log is copied, see visibleState); a sandbox is
// "started" once it is READY (its network is set up), and "stopped" when
// it no longer is. Each step carries the statuses as they are when the
// event is built, which are at least as new as the event's time.
//
// Publishing goes through a broadcast.Broadcaster: nothing the index, the
// RPCs or a subscriber does waits for a slow subscriber. One that lets its
// buffer fill is dropped with ResourceExhausted, and kubelet falls back to
// relisting.
//
// What the index holds at the first sync (what was there before netshim
// started) is the baseline, not news: kubelet lists it when it starts. A
// change Docker reports between the first listing and the baseline (a few
// milliseconds at start-up) is folded into it without an event.

// eventsBuffer is how many events a subscriber may leave unread before it
// is dropped. kubelet reads into a channel of 1000 and keeps up unless it
// is wedged; a burst (a node draining 100 pods emits about 10 events per
// pod) fits.
const eventsBuffer = 1024

// errEventsShutdown ends the event streams when the daemon stops: a
// long-lived stream must not hold up a graceful shutdown.
var errEventsShutdown = errors.New("netshim is shutting down")

// lifecyclePhase is how far along its life a container or sandbox is, as
// events have told it.
type lifecyclePhase uint8

const (
	phaseNone lifecyclePhase = iota
	phaseCreated
	phaseStarted
	phaseStopped
)

// lifecycle is a phase and the start it belongs to (Docker start time, ns),
// which tells a restart from a container that stayed up.
type lifecycle struct {
	phase     lifecyclePhase
	startedAt int64
}

// eventTarget is what the events goroutine knows of one ID.
type eventTarget struct {
	kind      store.Kind
	sandboxID string // the pod's sandbox; the ID itself for a sandbox
	lifecycle
	// sandbox is a sandbox's status when last looked at: its DELETED
	// event must still say which pod it was.
	sandbox *runtimeapi.PodSandboxStatus
}

// containerEvents turns changes of the index and the checkpoints into
// container events.
type containerEvents struct {
	ds  *DockerService
	bus broadcast.Broadcaster[*runtimeapi.ContainerEventResponse]
	// buffer is each subscriber's (eventsBuffer; tests lower it).
	buffer int

	mu     sync.Mutex
	queue  []string        // marked IDs, oldest first
	queued map[string]bool // IDs in queue
	busy   bool            // an ID taken from queue is being looked at
	wake   chan struct{}
	// waiting holds the log-copy waiter of each container whose exit is
	// not visible yet.
	waiting map[string]*copyWaiter

	// known is owned by run's goroutine; seeded is closed once it holds
	// the baseline.
	known  map[string]*eventTarget
	seeded chan struct{}
}

type copyWaiter struct{ done <-chan struct{} }

func newContainerEvents(ds *DockerService) *containerEvents {
	return &containerEvents{
		ds:      ds,
		buffer:  eventsBuffer,
		queued:  map[string]bool{},
		wake:    make(chan struct{}, 1),
		waiting: map[string]*copyWaiter{},
		known:   map[string]*eventTarget{},
		seeded:  make(chan struct{}),
	}
}

// touch marks id as possibly changed. It never blocks: the store calls it
// under its lock.
func (e *containerEvents) touch(id string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	if !e.queued[id] {
		e.queued[id] = true
		e.queue = append(e.queue, id)
	}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// next waits for a marked ID.
func (e *containerEvents) next(ctx context.Context) (string, bool) {
	for {
		e.mu.Lock()
		e.busy = len(e.queue) > 0
		if e.busy {
			id := e.queue[0]
			e.queue[0] = ""
			e.queue = e.queue[1:]
			delete(e.queued, id)
			e.mu.Unlock()
			return id, true
		}
		e.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", false
		case <-e.wake:
		}
	}
}

// idle says that every change marked so far has been published, and no
// exit is waiting to show.
func (e *containerEvents) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.queue) == 0 && !e.busy && len(e.waiting) == 0
}

// run publishes events from the first index sync until ctx ends, then
// ends every subscription.
func (e *containerEvents) run(ctx context.Context) {
	defer e.bus.Close(errEventsShutdown)
	select {
	case <-e.ds.index.SyncedCh():
	case <-ctx.Done():
		return
	}
	e.seed(ctx)
	for {
		id, ok := e.next(ctx)
		if !ok {
			return
		}
		e.update(ctx, id)
	}
}

// seed takes what readers see now as what subscribers know, with no event.
func (e *containerEvents) seed(ctx context.Context) {
	// Marks made so far are in what is read below.
	e.mu.Lock()
	e.queue = nil
	clear(e.queued)
	e.mu.Unlock()
	ids := map[string]bool{}
	for _, kind := range []store.Kind{store.KindSandbox, store.KindContainer} {
		for _, r := range e.ds.store().List(kind) {
			ids[r.ID] = true
		}
	}
	for _, id := range e.ds.pods.IDs() {
		ids[id] = true
	}
	for id := range ids {
		if cur, ok := e.observe(ctx, id, nil); ok {
			e.known[id] = &cur
		}
	}
	klog.V(4).InfoS("Container events: baseline taken", "ids", len(e.known))
	close(e.seeded)
}

// update publishes what changed for id since subscribers were last told.
func (e *containerEvents) update(ctx context.Context, id string) {
	prev := e.known[id]
	cur, exists := e.observe(ctx, id, prev)
	var was lifecycle
	if prev != nil {
		was = prev.lifecycle
	}
	if !exists {
		if prev == nil {
			return // created and gone before it was looked at
		}
		delete(e.known, id)
		cur = *prev
		cur.lifecycle = lifecycle{}
	}
	types, next := advance(was, cur.lifecycle, startVisible(cur))
	if exists {
		cur.lifecycle = next
		e.known[id] = &cur
	}
	if len(types) == 0 || e.bus.Len() == 0 {
		return
	}
	at := time.Now().UnixNano() // before the statuses: they are at least this new
	sandbox, containers := e.podStatuses(&cur, exists)
	for _, t := range types {
		klog.V(5).InfoS("Container event", "containerID", id, "type", t, "podSandboxID", cur.sandboxID)
		e.bus.Publish(&runtimeapi.ContainerEventResponse{
			ContainerId:        id,
			ContainerEventType: t,
			CreatedAt:          at,
			PodSandboxStatus:   sandbox,
			ContainersStatuses: containers,
		})
	}
}

// startVisible says whether a STARTED step may be filled in when a target
// skipped past it unseen: a container that has a start time did run; a
// sandbox counts as started only while it is READY.
func startVisible(t eventTarget) bool {
	if t.kind == store.KindSandbox {
		return t.phase == phaseStarted
	}
	return t.startedAt != 0
}

// observe is id's state as the status RPCs report it now; false when they
// no longer know it.
func (e *containerEvents) observe(ctx context.Context, id string, prev *eventTarget) (eventTarget, bool) {
	rec, _ := e.ds.store().Get(id)
	if rec != nil && rec.Kind == store.KindContainer {
		visible := e.ds.visibleState(rec)
		if visible != runtimeapi.ContainerState_CONTAINER_EXITED && containerState(rec) == runtimeapi.ContainerState_CONTAINER_EXITED {
			e.recheckWhenCopied(ctx, rec)
		}
		return eventTarget{
			kind:      store.KindContainer,
			sandboxID: rec.SandboxID,
			lifecycle: lifecycle{phase: containerPhase(visible), startedAt: rec.StartedAt},
		}, true
	}
	if prev != nil && prev.kind == store.KindContainer {
		return eventTarget{}, false
	}
	ref := sandboxRef{id: id, rec: rec, cp: e.ds.getCheckpoint(id)}
	if ref.rec == nil && ref.cp == nil {
		return eventTarget{}, false
	}
	st := e.ds.sandboxStatusOf(ref)
	var was lifecyclePhase
	if prev != nil {
		was = prev.phase
	}
	cur := eventTarget{kind: store.KindSandbox, sandboxID: id, sandbox: st}
	cur.phase = sandboxPhase(ref.rec, st.State, was)
	if ref.rec != nil {
		cur.startedAt = ref.rec.StartedAt
	}
	return cur, true
}

func containerPhase(s runtimeapi.ContainerState) lifecyclePhase {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return phaseStarted
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return phaseStopped
	}
	return phaseCreated
}

// sandboxPhase maps a sandbox's state to a phase: started while READY;
// stopped once it is no longer READY after it was, or its infra container
// has exited or is gone.
func sandboxPhase(rec *store.Record, state runtimeapi.PodSandboxState, was lifecyclePhase) lifecyclePhase {
	switch {
	case state == runtimeapi.PodSandboxState_SANDBOX_READY:
		return phaseStarted
	case rec == nil:
		return phaseStopped
	case rec.State == store.StateCreated:
		return phaseCreated
	case rec.Running() && was < phaseStarted:
		return phaseCreated // being set up
	}
	return phaseStopped
}

// advance returns the events that take a subscriber from prev to cur and
// what it knows afterwards. Steps skipped between two looks are filled in
// (a container that ran and exited in between gets STARTED and STOPPED),
// except STARTED when startVisible is false. A target that is gone gets
// STOPPED first if it was last said to run: kubelet 1.37 relists only on
// STOPPED. A later start than the one told of is a restart.
func advance(prev, cur lifecycle, startVisible bool) ([]runtimeapi.ContainerEventType, lifecycle) {
	var out []runtimeapi.ContainerEventType
	if cur.phase == phaseNone {
		if prev.phase == phaseStarted {
			out = append(out, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
		}
		if prev.phase != phaseNone {
			out = append(out, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
		}
		return out, cur
	}
	restarted := prev.phase >= phaseStarted && cur.phase >= phaseStarted && cur.startedAt != 0 && cur.startedAt != prev.startedAt
	if restarted {
		if prev.phase == phaseStarted {
			out = append(out, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
		}
		prev.phase = phaseCreated
	}
	if cur.phase <= prev.phase {
		// Nothing new; a phase never goes back (the start it belongs
		// to stays the one told of).
		return out, prev
	}
	for p := prev.phase + 1; p <= cur.phase; p++ {
		if p == phaseStarted && !startVisible {
			continue
		}
		out = append(out, eventTypeOf(p))
	}
	return out, cur
}

func eventTypeOf(p lifecyclePhase) runtimeapi.ContainerEventType {
	switch p {
	case phaseStarted:
		return runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	case phaseStopped:
		return runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	}
	return runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
}

// podStatuses are the statuses an event for t carries: its pod's sandbox
// (its last known one once the sandbox is gone, nil if never known) and
// the pod's containers.
func (e *containerEvents) podStatuses(t *eventTarget, exists bool) (*runtimeapi.PodSandboxStatus, []*runtimeapi.ContainerStatus) {
	var sandbox *runtimeapi.PodSandboxStatus
	switch {
	case t.kind == store.KindSandbox && exists:
		sandbox = t.sandbox
	case t.kind == store.KindSandbox:
		sandbox = goneSandbox(t.sandbox)
	default:
		ref, found, err := e.ds.lookupSandbox(t.sandboxID)
		switch {
		case err == nil && found:
			sandbox = e.ds.sandboxStatusOf(ref)
		case e.known[t.sandboxID] != nil:
			sandbox = goneSandbox(e.known[t.sandboxID].sandbox)
		}
	}
	recs := e.ds.store().ContainersOf(t.sandboxID)
	// In creation order, as kubelet sorts them.
	slices.SortFunc(recs, func(a, b *store.Record) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	containers := make([]*runtimeapi.ContainerStatus, 0, len(recs))
	for _, r := range recs {
		st, _ := e.ds.containerStatusOf(r)
		containers = append(containers, st)
	}
	return sandbox, containers
}

// goneSandbox is the last status of a sandbox that no longer exists: not
// ready. The status may already be in flight to subscribers, so it is
// copied, not changed.
func goneSandbox(last *runtimeapi.PodSandboxStatus) *runtimeapi.PodSandboxStatus {
	if last == nil {
		return nil
	}
	st := proto.Clone(last).(*runtimeapi.PodSandboxStatus)
	st.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	st.Network = &runtimeapi.PodSandboxNetworkStatus{}
	return st
}

// recheckWhenCopied looks at a container again when its exit may become
// visible: when its log follower finishes, or when the grace after which
// an exit shows anyway has passed. A container hidden only by the mark of
// a start in progress is looked at again when the mark goes (the log
// streams touch it).
func (e *containerEvents) recheckWhenCopied(ctx context.Context, rec *store.Record) {
	id := rec.ID
	logs := e.ds.containers.logs
	var done <-chan struct{}
	if _, following := logs.Following(id); following {
		done = logs.Done(id)
	}
	var deadline time.Time
	if rec.FinishedAt != 0 {
		deadline = time.Unix(0, rec.FinishedAt)
		if since, copying := e.ds.containers.streams.copyingSince(id); copying && since.After(deadline) {
			deadline = since
		}
		deadline = deadline.Add(logDrainGrace + time.Millisecond)
	}
	if done == nil && deadline.IsZero() {
		return
	}
	w := &copyWaiter{done: done}
	e.mu.Lock()
	if cur := e.waiting[id]; cur != nil && cur.done == done {
		e.mu.Unlock()
		return // already waiting for that
	}
	e.waiting[id] = w
	e.mu.Unlock()
	go func() {
		var timeout <-chan time.Time
		if !deadline.IsZero() {
			t := time.NewTimer(time.Until(deadline))
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-done:
		case <-timeout:
		case <-ctx.Done():
		}
		if ctx.Err() == nil {
			e.touch(id) // before the waiter goes: see idle
		}
		e.mu.Lock()
		if e.waiting[id] == w {
			delete(e.waiting, id)
		}
		e.mu.Unlock()
	}()
}

// GetContainerEvents streams container and sandbox lifecycle events until
// the client goes away. The response headers are sent once the
// subscription exists: every change after that is delivered.
func (ds *DockerService) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	ctx := stream.Context()
	sub := ds.events.bus.Subscribe(ctx, ds.events.buffer)
	defer sub.Close()
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return fmt.Errorf("starting the container events stream: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Container events subscriber connected")
	for {
		select {
		case <-sub.Done():
			return eventsEnded(sub.Err())
		default:
		}
		select {
		case <-sub.Done():
			return eventsEnded(sub.Err())
		case ev := <-sub.C():
			if err := stream.Send(ev); err != nil {
				return fmt.Errorf("sending a container event: %w", err)
			}
		}
	}
}

// eventsEnded is the status an events stream ends with.
func eventsEnded(err error) error {
	var oe *broadcast.OverflowError
	switch {
	case errors.As(err, &oe):
		klog.InfoS("Dropped a container events subscriber that fell behind; it must relist", "buffered", oe.Buffered)
		return crirpc.WithCode(codes.ResourceExhausted, err)
	case errors.Is(err, errEventsShutdown):
		return crirpc.WithCode(codes.Unavailable, err)
	}
	return err // the client went away
}

// checkpointChanged marks a change of a sandbox's checkpoint, which its
// state derives from, for the cached list and for events.
// (The store's generation, which the cache is keyed by, moved with the
// change itself.)
func (ds *DockerService) checkpointChanged(id string) {
	ds.events.touch(id)
}

// StopEvents ends every container events stream, for a graceful shutdown
// that would otherwise wait for them.
func (ds *DockerService) StopEvents() { ds.events.bus.Close(errEventsShutdown) }
