package cni

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// gateBound is how long the gate may take to let a caller through once
// nothing holds it back: far more than it needs, so that a loaded CI
// machine does not fail the tests, far less than a real deadline.
const gateBound = 5 * time.Second

// notWithin fails the test if ch delivers within d: what must not happen
// yet is given a fair chance to.
func notWithin[T any](t *testing.T, d time.Duration, what string, ch <-chan T) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s happened", what)
	case <-time.After(d):
	}
}

// within returns what ch delivers, failing the test if it does not within
// d.
func within[T any](t *testing.T, d time.Duration, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s did not happen within %s", what, d)
		var zero T
		return zero
	}
}

// mustEnterGC enters a GC section of g that no ADD holds back.
func mustEnterGC(t *testing.T, g *gcGate) (context.Context, func()) {
	t.Helper()
	gcCtx, leave, err := g.enterGC(context.Background())
	if err != nil {
		t.Fatalf("enterGC on an idle gate = %v", err)
	}
	t.Cleanup(leave)
	return gcCtx, leave
}

func TestGateADDPreemptsGC(t *testing.T) {
	var g gcGate
	gcCtx, leave := mustEnterGC(t, &g)
	// The GC's plugin: it stops when its context ends, as a killed
	// process does.
	gcDone := make(chan error, 1)
	go func() {
		<-gcCtx.Done()
		gcDone <- context.Cause(gcCtx)
		leave()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	type entered struct {
		release func()
		err     error
	}
	addDone := make(chan entered, 1)
	go func() {
		release, err := g.enterAdd(ctx)
		addDone <- entered{release, err}
	}()
	if cause := within(t, gateBound, "the GC's cancellation", gcDone); !errors.Is(cause, errGCPreempted) {
		t.Errorf("the GC's context ended with %v, want errGCPreempted", cause)
	}
	add := within(t, gateBound, "the ADD entering after the GC left", addDone)
	if add.err != nil {
		t.Fatalf("enterAdd = %v", add.err)
	}

	// While the ADD that preempted it is in flight, GC stays out.
	g.busyWait = 50 * time.Millisecond
	if _, _, err := g.enterGC(context.Background()); !errors.Is(err, errGCBusy) {
		t.Fatalf("enterGC with the preempting ADD in flight = %v, want errGCBusy", err)
	}
	add.release()
	add.release() // only the first release counts
	mustEnterGC(t, &g)
}

func TestGateADDWaitsForTheGCWithinItsContext(t *testing.T) {
	var g gcGate
	// A GC that does not leave, whatever its context says.
	_, leave := mustEnterGC(t, &g)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	addDone := make(chan error, 1)
	go func() {
		release, err := g.enterAdd(ctx)
		if err == nil {
			release()
		}
		addDone <- err
	}()
	err := within(t, gateBound, "enterAdd giving up at its 50ms deadline", addDone)
	if err == nil {
		t.Fatal("enterAdd got through a GC that never left")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "CNI GC") {
		t.Errorf("enterAdd = %v, want a deadline error saying it waited for a CNI GC", err)
	}

	// The ADD that gave up is not in flight: the next GC enters at once.
	leave()
	mustEnterGC(t, &g)
}

func TestGateGCStaysOutWhileADDsAreInFlight(t *testing.T) {
	for _, tc := range []struct {
		name string
		// enter tries to enter a GC section while the ADDs are in flight;
		// it must fail with want.
		enter func(g *gcGate) error
		want  error
	}{
		{"gives up after busyWait", func(g *gcGate) error {
			g.busyWait = 50 * time.Millisecond
			_, _, err := g.enterGC(context.Background())
			return err
		}, errGCBusy},
		{"gives up with its context", func(g *gcGate) error {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, _, err := g.enterGC(ctx)
			return err
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g gcGate
			r1, err := g.enterAdd(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			r2, err := g.enterAdd(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.enter(&g); !errors.Is(err, tc.want) {
				t.Fatalf("enterGC with ADDs in flight = %v, want %v", err, tc.want)
			}

			// A GC that waits long enough enters once the last ADD left,
			// and not before.
			g.busyWait = time.Hour
			entered := make(chan func(), 1)
			go func() {
				_, leave, err := g.enterGC(context.Background())
				if err != nil {
					t.Errorf("enterGC = %v", err)
					close(entered)
					return
				}
				entered <- leave
			}()
			r1()
			notWithin(t, 50*time.Millisecond, "GC entering with an ADD in flight", entered)
			r2()
			if leave := within(t, gateBound, "GC entering once the ADDs left", entered); leave != nil {
				leave()
			}
		})
	}
}

func TestGateGCSectionsDoNotOverlap(t *testing.T) {
	var g gcGate
	_, leave := mustEnterGC(t, &g)
	second := make(chan func(), 1)
	go func() {
		_, leave2, err := g.enterGC(context.Background())
		if err != nil {
			t.Errorf("second enterGC = %v", err)
			close(second)
			return
		}
		second <- leave2
	}()
	notWithin(t, 50*time.Millisecond, "a second GC entering beside the first", second)
	leave()
	if leave2 := within(t, gateBound, "the second GC entering", second); leave2 != nil {
		leave2()
	}
}

// TestGateADDsDoNotWaitForEachOther holds many ADDs in flight at once, on
// an idle gate and through a GC that they all preempt: each one waits for
// all the others to be in before it releases, which deadlocks if one
// waited for another.
func TestGateADDsDoNotWaitForEachOther(t *testing.T) {
	const n = 50
	for _, withGC := range []bool{false, true} {
		name := "idle gate"
		if withGC {
			name = "GC in its section"
		}
		t.Run(name, func(t *testing.T) {
			var g gcGate
			if withGC {
				gcCtx, leave := mustEnterGC(t, &g)
				go func() {
					<-gcCtx.Done()
					leave()
				}()
			}
			var in sync.WaitGroup
			in.Add(n)
			allIn := make(chan struct{})
			errs := make(chan error, n)
			for range n {
				go func() {
					release, err := g.enterAdd(context.Background())
					if err != nil {
						in.Done()
						errs <- err
						return
					}
					in.Done()
					<-allIn
					release()
					errs <- nil
				}()
			}
			inCh := make(chan struct{})
			go func() { in.Wait(); close(inCh) }()
			within(t, gateBound, "every ADD being in flight at once", inCh)
			close(allIn)
			for range n {
				if err := within(t, gateBound, "an ADD returning", errs); err != nil {
					t.Fatal(err)
				}
			}
			mustEnterGC(t, &g)
		})
	}
}
