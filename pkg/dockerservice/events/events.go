// Package events publishes the CRI's container events (GetContainerEvents,
// kubelet's evented PLEG) from what the status RPCs report, never from
// Docker's events directly.
package events

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
// shows (after its log is copied: the runtime's visible state); a sandbox is
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

// DefaultBuffer is how many events a subscriber may leave unread before it
// is dropped. kubelet reads into a channel of 1000 and keeps up unless it
// is wedged; a burst (a node draining 100 pods emits about 10 events per
// pod) fits.
const DefaultBuffer = 1024

// errEventsShutdown ends the event streams when the daemon stops: a
// long-lived stream must not hold up a graceful shutdown.
var errEventsShutdown = errors.New("netshim is shutting down")

// Phase is how far along its life a container or sandbox is, as
// events have told it.
type Phase uint8

const (
	PhaseNone Phase = iota
	PhaseCreated
	PhaseStarted
	PhaseStopped
)

// Lifecycle is a phase and the start it belongs to (Docker start time, ns),
// which tells a restart from a container that stayed up.
type Lifecycle struct {
	Phase     Phase
	StartedAt int64
}

// Target is what the events goroutine knows of one ID.
type Target struct {
	Kind      store.Kind
	SandboxID string // the pod's sandbox; the ID itself for a sandbox
	Lifecycle
	// Sandbox is a sandbox's status when last looked at: its DELETED
	// event must still say which pod it was.
	Sandbox *runtimeapi.PodSandboxStatus
}

// Publisher turns changes of the index and the checkpoints into
// container events.
type Publisher struct {
	src Source
	bus broadcast.Broadcaster[*runtimeapi.ContainerEventResponse]
	// buffer is each new subscriber's (DefaultBuffer; tests lower it).
	buffer atomic.Int64

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
	known  map[string]*Target
	seeded chan struct{}
}

type copyWaiter struct{ done <-chan struct{} }

// Source is the state events are made of: what the status RPCs answer.
type Source interface {
	// Synced is closed once the index has read Docker for the first
	// time: what it holds then is the baseline.
	Synced() <-chan struct{}
	// IDs are every sandbox and container known now.
	IDs() []string
	// Observe is id's state as the status RPCs report it now; false when
	// they no longer know it. prev is what subscribers were last told of
	// it, nil if nothing. A container whose exit does not show yet is
	// looked at again through RecheckWhen.
	Observe(ctx context.Context, id string, prev *Target) (Target, bool)
	// SandboxStatus is a sandbox's status now; false when it is not
	// known.
	SandboxStatus(id string) (*runtimeapi.PodSandboxStatus, bool)
	// ContainerStatuses are the statuses of a pod's containers, in
	// creation order, as kubelet sorts them.
	ContainerStatuses(sandboxID string) []*runtimeapi.ContainerStatus
}

// New is a publisher of the events of src; Run starts it.
func New(src Source) *Publisher {
	e := &Publisher{
		src:     src,
		queued:  map[string]bool{},
		wake:    make(chan struct{}, 1),
		waiting: map[string]*copyWaiter{},
		known:   map[string]*Target{},
		seeded:  make(chan struct{}),
	}
	e.buffer.Store(DefaultBuffer)
	return e
}

// Touch marks id as possibly changed. It never blocks: the store calls it
// under its lock.
func (e *Publisher) Touch(id string) {
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
func (e *Publisher) next(ctx context.Context) (string, bool) {
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

// Idle says that every change marked so far has been published, and no
// exit is waiting to show.
func (e *Publisher) Idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.queue) == 0 && !e.busy && len(e.waiting) == 0
}

// Seeded is closed once the baseline is taken: what readers saw at the
// first sync, which gets no events.
func (e *Publisher) Seeded() <-chan struct{} { return e.seeded }

// Subscribers is the number of open subscriptions.
func (e *Publisher) Subscribers() int { return e.bus.Len() }

// SetBuffer sets how many events a new subscriber may leave unread
// (DefaultBuffer unless set).
func (e *Publisher) SetBuffer(n int) { e.buffer.Store(int64(n)) }

// Run publishes events from the first index sync until ctx ends, then
// ends every subscription.
func (e *Publisher) Run(ctx context.Context) {
	defer e.bus.Close(errEventsShutdown)
	select {
	case <-e.src.Synced():
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
func (e *Publisher) seed(ctx context.Context) {
	// Marks made so far are in what is read below.
	e.mu.Lock()
	e.queue = nil
	clear(e.queued)
	e.mu.Unlock()
	for _, id := range e.src.IDs() {
		if cur, ok := e.src.Observe(ctx, id, nil); ok {
			e.known[id] = &cur
		}
	}
	klog.V(4).InfoS("Container events: baseline taken", "ids", len(e.known))
	close(e.seeded)
}

// update publishes what changed for id since subscribers were last told.
func (e *Publisher) update(ctx context.Context, id string) {
	prev := e.known[id]
	cur, exists := e.src.Observe(ctx, id, prev)
	var was Lifecycle
	if prev != nil {
		was = prev.Lifecycle
	}
	if !exists {
		if prev == nil {
			return // created and gone before it was looked at
		}
		delete(e.known, id)
		cur = *prev
		cur.Lifecycle = Lifecycle{}
	}
	types, next := advance(was, cur.Lifecycle, startVisible(cur))
	if exists {
		cur.Lifecycle = next
		e.known[id] = &cur
	}
	if len(types) == 0 || e.bus.Len() == 0 {
		return
	}
	at := time.Now().UnixNano() // before the statuses: they are at least this new
	sandbox, containers := e.podStatuses(&cur, exists)
	for _, t := range types {
		klog.V(5).InfoS("Container event", "containerID", id, "type", t, "podSandboxID", cur.SandboxID)
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
func startVisible(t Target) bool {
	if t.Kind == store.KindSandbox {
		return t.Phase == PhaseStarted
	}
	return t.StartedAt != 0
}

// ContainerPhase is the phase of a container in state s.
func ContainerPhase(s runtimeapi.ContainerState) Phase {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return PhaseStarted
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return PhaseStopped
	}
	return PhaseCreated
}

// SandboxPhase maps a sandbox's state to a phase: started while READY;
// stopped once it is no longer READY after it was, or its infra container
// has exited or is gone.
func SandboxPhase(rec *store.Record, state runtimeapi.PodSandboxState, was Phase) Phase {
	switch {
	case state == runtimeapi.PodSandboxState_SANDBOX_READY:
		return PhaseStarted
	case rec == nil:
		return PhaseStopped
	case rec.State == store.StateCreated:
		return PhaseCreated
	case rec.Running() && was < PhaseStarted:
		return PhaseCreated // being set up
	}
	return PhaseStopped
}

// advance returns the events that take a subscriber from prev to cur and
// what it knows afterwards. Steps skipped between two looks are filled in
// (a container that ran and exited in between gets STARTED and STOPPED),
// except STARTED when startVisible is false. A target that is gone gets
// STOPPED first if it was last said to run: kubelet 1.37 relists only on
// STOPPED. A later start than the one told of is a restart.
func advance(prev, cur Lifecycle, startVisible bool) ([]runtimeapi.ContainerEventType, Lifecycle) {
	var out []runtimeapi.ContainerEventType
	if cur.Phase == PhaseNone {
		if prev.Phase == PhaseStarted {
			out = append(out, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
		}
		if prev.Phase != PhaseNone {
			out = append(out, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
		}
		return out, cur
	}
	restarted := prev.Phase >= PhaseStarted && cur.Phase >= PhaseStarted && cur.StartedAt != 0 && cur.StartedAt != prev.StartedAt
	if restarted {
		if prev.Phase == PhaseStarted {
			out = append(out, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT)
		}
		prev.Phase = PhaseCreated
	}
	if cur.Phase <= prev.Phase {
		// Nothing new; a phase never goes back (the start it belongs
		// to stays the one told of).
		return out, prev
	}
	for p := prev.Phase + 1; p <= cur.Phase; p++ {
		if p == PhaseStarted && !startVisible {
			continue
		}
		out = append(out, eventTypeOf(p))
	}
	return out, cur
}

func eventTypeOf(p Phase) runtimeapi.ContainerEventType {
	switch p {
	case PhaseStarted:
		return runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	case PhaseStopped:
		return runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	}
	return runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
}

// podStatuses are the statuses an event for t carries: its pod's sandbox
// (its last known one once the sandbox is gone, nil if never known) and
// the pod's containers.
func (e *Publisher) podStatuses(t *Target, exists bool) (*runtimeapi.PodSandboxStatus, []*runtimeapi.ContainerStatus) {
	var sandbox *runtimeapi.PodSandboxStatus
	switch {
	case t.Kind == store.KindSandbox && exists:
		sandbox = t.Sandbox
	case t.Kind == store.KindSandbox:
		sandbox = goneSandbox(t.Sandbox)
	default:
		if st, ok := e.src.SandboxStatus(t.SandboxID); ok {
			sandbox = st
		} else if e.known[t.SandboxID] != nil {
			sandbox = goneSandbox(e.known[t.SandboxID].Sandbox)
		}
	}
	return sandbox, e.src.ContainerStatuses(t.SandboxID)
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

// RecheckWhen looks at id again when done is closed or deadline (if not
// zero) has passed, whichever comes first: for a container whose exit is
// hidden until its log is copied, or until the grace after which an exit
// shows anyway.
func (e *Publisher) RecheckWhen(ctx context.Context, id string, done <-chan struct{}, deadline time.Time) {
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
			e.Touch(id) // before the waiter goes: see Idle
		}
		e.mu.Lock()
		if e.waiting[id] == w {
			delete(e.waiting, id)
		}
		e.mu.Unlock()
	}()
}

// Serve streams container and sandbox lifecycle events until the client
// goes away (GetContainerEvents). The response headers are sent once the
// subscription exists: every change after that is delivered.
func (e *Publisher) Serve(stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	ctx := stream.Context()
	sub := e.bus.Subscribe(ctx, int(e.buffer.Load()))
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

// Stop ends every events stream, for a graceful shutdown that would
// otherwise wait for them.
func (e *Publisher) Stop() { e.bus.Close(errEventsShutdown) }
