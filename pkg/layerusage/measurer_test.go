package layerusage

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/netshim/netshim/internal/testutil"
)

// measurerEnv runs a Measurer on a fake clock and counts its slices.
type measurerEnv struct {
	m      *Measurer
	clk    *clocktesting.FakeClock
	slices atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

func newMeasurerEnv(t *testing.T, opts Options, step StepFunc) *measurerEnv {
	t.Helper()
	e := &measurerEnv{clk: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), done: make(chan struct{})}
	if step == nil {
		step = func(ctx context.Context, w *Walk, b Budget) (bool, error) { return w.Step(ctx, b) }
	}
	opts.Clock = e.clk
	opts.Step = func(ctx context.Context, w *Walk, b Budget) (bool, error) {
		defer e.slices.Add(1)
		return step(ctx, w, b)
	}
	e.m = New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		defer close(e.done)
		e.m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-e.done
	})
	return e
}

// idle waits until the worker sleeps on the clock (a walk is due later).
func (e *measurerEnv) idle(t *testing.T) {
	t.Helper()
	testutil.Eventually(t, "the measurer to wait for its next walk", e.clk.HasWaiters)
}

// step advances the clock once the worker waits on it.
func (e *measurerEnv) step(t *testing.T, d time.Duration) {
	t.Helper()
	e.idle(t)
	e.clk.Step(d)
}

func (e *measurerEnv) usage(t *testing.T, id string, cond func(Usage) bool) Usage {
	t.Helper()
	var u Usage
	testutil.Eventually(t, "a measurement of "+id, func() bool {
		var ok bool
		u, ok = e.m.Get(id)
		return ok && cond(u)
	})
	return u
}

func (e *measurerEnv) interval(id string) time.Duration {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	return e.m.entries[id].interval
}

func TestMeasurerMeasuresAtOnceThenEveryInterval(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), 64<<10)
	e := newMeasurerEnv(t, Options{Interval: time.Minute}, nil)
	e.m.Track("c1", dir)
	first := e.usage(t, "c1", func(u Usage) bool { return true })
	if first.Bytes < 64<<10 || first.Inodes != 2 || first.Partial || !first.At.Equal(e.clk.Now()) {
		t.Errorf("first measurement %+v, want >= 64 KiB, 2 inodes, complete, now", first)
	}
	if d, ok := e.m.Tracked("c1"); !ok || d != dir {
		t.Errorf("Tracked = %q, %v", d, ok)
	}

	writeFile(t, filepath.Join(dir, "b"), 64<<10)
	e.step(t, 59*time.Second)
	if u, _ := e.m.Get("c1"); u != first || e.slices.Load() != 1 {
		t.Errorf("measured again before the interval: %+v, %d slices", u, e.slices.Load())
	}
	e.step(t, time.Second)
	second := e.usage(t, "c1", func(u Usage) bool { return u.Inodes == 3 })
	if second.Bytes < 128<<10 || !second.At.After(first.At) {
		t.Errorf("second measurement %+v, want >= 128 KiB at a later time", second)
	}
	if got := e.m.TotalBytes(); got != second.Bytes {
		t.Errorf("TotalBytes %d, want %d", got, second.Bytes)
	}
	// Re-tracking with the same dir changes nothing.
	e.m.Track("c1", dir)
	if u, _ := e.m.Get("c1"); u != second {
		t.Errorf("Track with the same dir reset the measurement: %+v", u)
	}
}

// A layer too big for one slice is reported partial while its walk goes
// on, measured less and less often (capped), and every minute again once
// it is cheap.
func TestMeasurerBacksOffCostlyLayers(t *testing.T) {
	dir := t.TempDir()
	for i := range 35 {
		writeFile(t, filepath.Join(dir, strconv.Itoa(i)), 10)
	}
	e := newMeasurerEnv(t, Options{Interval: time.Minute, MaxInterval: 4 * time.Minute, SlotEntries: 10, SlotGap: time.Second}, nil)
	e.m.Track("big", dir)

	// First walk: partial figures until it ends.
	if p := e.usage(t, "big", func(u Usage) bool { return u.Partial }); p.Inodes != 11 {
		t.Errorf("after one slice: %+v, want the root + 10 entries", p)
	}
	for range 3 {
		e.step(t, time.Second)
	}
	if u := e.usage(t, "big", func(u Usage) bool { return !u.Partial }); u.Inodes != 36 || e.slices.Load() != 4 {
		t.Errorf("complete walk counted %d inodes in %d slices, want 36 in 4", u.Inodes, e.slices.Load())
	}
	e.idle(t)
	if got := e.interval("big"); got != 2*time.Minute {
		t.Fatalf("interval after a 4-slice walk %s, want 2m", got)
	}
	e.step(t, time.Minute)
	if n := e.slices.Load(); n != 4 {
		t.Errorf("walked again after 1m (%d slices), want 2m", n)
	}
	e.step(t, time.Minute)
	// The new walk reports the complete figures until its partial ones
	// exceed them.
	u := e.usage(t, "big", func(Usage) bool { return e.slices.Load() == 5 })
	if u.Partial || u.Inodes != 36 {
		t.Errorf("during the second walk: %+v, want the last complete figures", u)
	}
	for range 3 {
		e.step(t, time.Second)
	}
	e.usage(t, "big", func(Usage) bool { return e.slices.Load() == 8 })
	e.idle(t)
	if got := e.interval("big"); got != 4*time.Minute {
		t.Errorf("interval after two costly walks %s, want 4m", got)
	}
	e.step(t, 4*time.Minute)
	for range 3 {
		e.step(t, time.Second)
	}
	e.usage(t, "big", func(Usage) bool { return e.slices.Load() == 12 })
	e.idle(t)
	if got := e.interval("big"); got != 4*time.Minute {
		t.Errorf("interval %s, want capped at 4m", got)
	}

	// Cheap again: back to every minute.
	for i := range 30 {
		mustDo(t, os.Remove(filepath.Join(dir, strconv.Itoa(i))))
	}
	e.step(t, 4*time.Minute)
	if u := e.usage(t, "big", func(u Usage) bool { return u.Inodes == 6 }); u.Partial {
		t.Errorf("cheap walk: %+v", u)
	}
	e.idle(t)
	if got := e.interval("big"); got != time.Minute {
		t.Errorf("interval after a one-slice walk %s, want 1m", got)
	}
}

func TestMeasurerForgetsRemovedContainers(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), 10)
	release := make(chan struct{})
	var blockOnce sync.Once
	entered := make(chan struct{})
	e := newMeasurerEnv(t, Options{}, func(ctx context.Context, w *Walk, b Budget) (bool, error) {
		if w.Root() == dir+"/blocked" {
			blockOnce.Do(func() { close(entered) })
			<-release
		}
		return w.Step(ctx, b)
	})
	e.m.Track("gone", dir)
	e.usage(t, "gone", func(Usage) bool { return true })
	e.m.Forget("gone")
	if _, ok := e.m.Get("gone"); ok {
		t.Error("Get after Forget still reports a measurement")
	}
	if _, ok := e.m.Tracked("gone"); ok || len(e.m.IDs()) != 0 || e.m.TotalBytes() != 0 {
		t.Errorf("still tracked after Forget: %v", e.m.IDs())
	}

	// Forgotten in the middle of its walk: the walk's result is dropped.
	writeFile(t, filepath.Join(dir, "blocked", "f"), 10)
	e.m.Track("mid", dir+"/blocked")
	<-entered
	e.m.Forget("mid")
	close(release)
	// The worker is serial: once a later layer is measured, the
	// forgotten walk's slice has been dealt with.
	e.m.Track("after", dir)
	e.usage(t, "after", func(Usage) bool { return true })
	e.m.Forget("after")
	if _, ok := e.m.Get("mid"); ok {
		t.Error("a walk finished after Forget brought the measurement back")
	}
	if e.m.TotalBytes() != 0 {
		t.Errorf("TotalBytes %d after Forget", e.m.TotalBytes())
	}
}

// Get and TotalBytes answer while a walk blocks (a stuck filesystem).
func TestMeasurerGetNeverWaitsForAWalk(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), 10)
	block := make(chan struct{})
	entered := make(chan struct{}, 10)
	first := true
	e := newMeasurerEnv(t, Options{}, func(ctx context.Context, w *Walk, b Budget) (bool, error) {
		if !first {
			entered <- struct{}{}
			select {
			case <-block:
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		first = false
		return w.Step(ctx, b)
	})
	defer close(block)
	e.m.Track("c", dir)
	measured := e.usage(t, "c", func(Usage) bool { return true })
	e.step(t, DefaultInterval)
	<-entered // the second walk is blocked now
	done := make(chan Usage)
	go func() {
		u, _ := e.m.Get("c")
		_ = e.m.TotalBytes()
		e.m.Track("other", dir)
		done <- u
	}()
	select {
	case u := <-done:
		if u != measured {
			t.Errorf("Get during a blocked walk = %+v, want the last measurement %+v", u, measured)
		}
	case <-time.After(testutil.EventuallyTimeout):
		t.Fatal("Get, TotalBytes or Track waited for a blocked walk")
	}
}

func TestMeasurerBacksOffMissingLayers(t *testing.T) {
	e := newMeasurerEnv(t, Options{Interval: time.Minute, MaxInterval: 10 * time.Minute}, nil)
	e.m.Track("c", filepath.Join(t.TempDir(), "missing"))
	testutil.Eventually(t, "a first try", func() bool { return e.slices.Load() == 1 })
	e.idle(t)
	if _, ok := e.m.Get("c"); ok {
		t.Error("a missing layer reports a measurement")
	}
	if got := e.interval("c"); got != 2*time.Minute {
		t.Errorf("retry interval %s, want 2m", got)
	}
	e.step(t, 2*time.Minute)
	testutil.Eventually(t, "a second try", func() bool { return e.slices.Load() == 2 })
	e.idle(t)
	if got := e.interval("c"); got != 4*time.Minute {
		t.Errorf("retry interval %s, want 4m", got)
	}
}

func TestMeasurerStopsWhenCancelled(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		e := newMeasurerEnv(t, Options{}, nil)
		e.cancel()
		waitClosed(t, e.done)
	})
	t.Run("mid-walk", func(t *testing.T) {
		entered := make(chan struct{})
		e := newMeasurerEnv(t, Options{}, func(ctx context.Context, w *Walk, b Budget) (bool, error) {
			close(entered)
			<-ctx.Done()
			return false, ctx.Err()
		})
		e.m.Track("c", t.TempDir())
		<-entered
		e.cancel()
		waitClosed(t, e.done)
		if _, ok := e.m.Get("c"); ok {
			t.Error("a cancelled walk reported a measurement")
		}
	})
}

func waitClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testutil.EventuallyTimeout):
		t.Fatal("Run did not return after cancel")
	}
}
