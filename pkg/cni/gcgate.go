package cni

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// gcLockWait bounds how long GC waits for the ADDs in flight to finish
// before giving up on a pass (errGCBusy). It never blocks new ADDs while
// it waits: a hung ADD postpones GC, never the other pods.
const gcLockWait = 30 * time.Second

var (
	errGCBusy = errors.New("network setups kept running; GC postponed")
	// errGCPreempted is the cause with which a pod's ADD cancels a GC in
	// its critical section: that GC pass did not fail, it gave way.
	errGCPreempted = errors.New("CNI GC gave way to a pod's network setup")
)

// gcGate keeps CNI GC and the pods' ADDs apart, and gives the ADDs the
// right of way. GC must not look at the live sandboxes, libcni's cache and
// netshim's ledger, nor let the plugins collect by that snapshot, while
// an ADD is in flight: an address allocated after the snapshot would look
// stale. But a pod start must never wait for GC, whose plugins may be slow
// or hung: right after netshim starts, GC runs exactly when kubelet
// recreates every pod of the node, and kubelet gives each RunPodSandbox
// two minutes. A sync.RWMutex gives neither (its readers wait for the
// writer whatever their context says), hence this type.
//
// The protocol:
//
//   - An ADD calls enterAdd before it records or adds anything, and the
//     release func once the plugins returned. It counts as in flight from
//     the moment it called enterAdd. ADDs never wait for one another.
//   - GC calls enterGC before each of its critical sections and leave at
//     the end of it. enterGC waits, up to busyWait (or its ctx), until no
//     ADD is in flight and no other GC is in a section; meanwhile ADDs
//     start freely.
//   - An ADD that arrives while a GC is in a section preempts it: it
//     cancels the section's context with the cause errGCPreempted (libcni
//     runs plugins under that context, so their processes are killed), then
//     waits, within its own ctx, for the GC to leave. As the ADD is already
//     counted, no GC enters again until it is released.
//
// The zero value is ready to use.
type gcGate struct {
	// busyWait bounds enterGC's wait for the ADDs in flight; 0 means
	// gcLockWait. Tests shorten it.
	busyWait time.Duration

	mu sync.Mutex
	// adds is the number of ADDs in flight.
	adds int
	// gc is the GC in a critical section, or nil.
	gc *gcTurn
	// wake, when not nil, is closed (and set back to nil) when GC may be
	// able to enter: the last ADD left, or a GC did. enterGC waits on it.
	wake chan struct{}
}

// gcTurn is one GC critical section.
type gcTurn struct {
	cancel context.CancelCauseFunc
	// left is closed once the section is over.
	left chan struct{}
}

// enterAdd marks an ADD in flight until release is called (only the first
// call counts). If a GC is in a critical section, it is cancelled and
// waited for, up to ctx's end: the error then wraps ctx.Err(), and the ADD
// is not in flight.
func (g *gcGate) enterAdd(ctx context.Context) (release func(), err error) {
	g.mu.Lock()
	g.adds++
	gc := g.gc
	if gc != nil {
		gc.cancel(errGCPreempted)
	}
	g.mu.Unlock()
	release = sync.OnceFunc(g.releaseAdd)
	if gc == nil {
		return release, nil
	}
	select {
	case <-gc.left:
		return release, nil
	case <-ctx.Done():
		release()
		return nil, fmt.Errorf("waiting for a running CNI GC to give way: %w", ctx.Err())
	}
}

func (g *gcGate) releaseAdd() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.adds--
	if g.adds == 0 {
		g.wakeLocked()
	}
}

// enterGC starts a GC critical section once no ADD is in flight and no
// other GC is in one. gcCtx is ctx, cancelled with the cause
// errGCPreempted when an ADD arrives (see context.Cause), and in any case
// by leave: it is for the section's calls only. leave must be called when
// the section ends (only the first call counts). It fails with errGCBusy
// after busyWait, or with ctx's error.
func (g *gcGate) enterGC(ctx context.Context) (gcCtx context.Context, leave func(), err error) {
	wait := g.busyWait
	if wait <= 0 {
		wait = gcLockWait
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		g.mu.Lock()
		if g.adds == 0 && g.gc == nil {
			gcCtx, cancel := context.WithCancelCause(ctx)
			turn := &gcTurn{cancel: cancel, left: make(chan struct{})}
			g.gc = turn
			g.mu.Unlock()
			return gcCtx, sync.OnceFunc(func() { g.leaveGC(turn) }), nil
		}
		if g.wake == nil {
			g.wake = make(chan struct{})
		}
		wake := g.wake
		g.mu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
			return nil, nil, errGCBusy
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("waiting for the pods' network setups in flight: %w", ctx.Err())
		}
	}
}

func (g *gcGate) leaveGC(turn *gcTurn) {
	g.mu.Lock()
	g.gc = nil
	g.wakeLocked()
	g.mu.Unlock()
	// Cancelled only now, after the section's calls: a preempted section
	// keeps errGCPreempted as its cause, and every context is released.
	turn.cancel(nil)
	close(turn.left)
}

func (g *gcGate) wakeLocked() {
	if g.wake != nil {
		close(g.wake)
		g.wake = nil
	}
}

// gcStopped is err, from a GC critical section, marked errGCPreempted when
// an ADD preempted the section: the host's or a plugin's error is then
// only the consequence of the cancellation.
func gcStopped(gcCtx context.Context, err error) error {
	if errors.Is(context.Cause(gcCtx), errGCPreempted) && !errors.Is(err, errGCPreempted) {
		return fmt.Errorf("%w: %w", errGCPreempted, err)
	}
	return err
}
