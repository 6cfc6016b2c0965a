package index

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
)

// beatsAgain waits for the heartbeat to move past since and returns it.
func beatsAgain(t *testing.T, x *Index, since time.Time, what string) time.Time {
	t.Helper()
	var h time.Time
	testutil.Eventually(t, what, func() bool {
		h = x.Heartbeat()
		return h.After(since)
	})
	return h
}

// A Docker that refuses every call is not a stuck loop: the loop retries,
// and beats while it does.
func TestHeartbeatWhileDockerIsDown(t *testing.T) {
	f := newFakeEngine()
	f.Do(func(s *fakedocker.State) { s.ListErr = errors.New("Cannot connect to the Docker daemon") })
	x := New(f, decode, Options{ReconnectMinDelay: time.Millisecond, ReconnectMaxDelay: 2 * time.Millisecond, StuckAfter: time.Hour})
	if h := x.Heartbeat(); !h.IsZero() {
		t.Fatalf("Heartbeat = %v before Run, want zero", h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	h := beatsAgain(t, x, time.Time{}, "a first beat")
	h = beatsAgain(t, x, h, "a beat on a retry")
	beatsAgain(t, x, h, "another beat on a retry")
	if x.Synced() {
		t.Fatal("index synced with every listing refused")
	}

	// The heartbeat is read without the index's lock: a watchdog must
	// not hang on the loop it watches. With the lock held the loop
	// cannot beat; once it is free the beats resume.
	x.mu.Lock()
	held := x.Heartbeat()
	x.mu.Unlock()
	beatsAgain(t, x, held, "beats after the lock is free")
}

// While the events stream is up, the session's ticker beats.
func TestHeartbeatWhileConnected(t *testing.T) {
	f := newFakeEngine()
	add(f, "sb", "sandbox", "running")
	x := startIndex(t, f, Options{StuckAfter: 20 * time.Millisecond})
	h := beatsAgain(t, x, time.Time{}, "a first beat")
	h = beatsAgain(t, x, h, "a beat from the session's ticker")
	beatsAgain(t, x, h, "another beat from the session's ticker")
	if ready, reason := x.Health(); !ready {
		t.Errorf("Health = false (%s) while beating", reason)
	}
}

func TestHeartbeatPeriod(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want time.Duration
	}{
		{"defaults: a quarter of StuckAfter plus the longest backoff", Options{}, 30*time.Second/4 + 2*time.Second},
		{"short StuckAfter", Options{StuckAfter: 40 * time.Millisecond, ReconnectMaxDelay: time.Second}, 10*time.Millisecond + time.Second},
		{"tiny StuckAfter floors the ticker", Options{StuckAfter: time.Microsecond, ReconnectMaxDelay: time.Millisecond}, 2 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := New(newFakeEngine(), decode, tc.opts).HeartbeatPeriod(); got != tc.want {
				t.Errorf("HeartbeatPeriod = %v, want %v", got, tc.want)
			}
		})
	}
}

// WedgeForTest holds the lock the loop's beat takes, for good.
func TestWedgeForTestHoldsTheLock(t *testing.T) {
	x := New(newFakeEngine(), decode, Options{})
	x.WedgeForTest()
	if x.mu.TryLock() {
		t.Fatal("the index's lock is free after WedgeForTest")
	}
}
