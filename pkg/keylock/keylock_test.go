package keylock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSameKeyIsExclusive(t *testing.T) {
	var l Locks
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			unlock, err := l.Lock(context.Background(), "a")
			if err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			for {
				m := maxInside.Load()
				if n <= m || maxInside.CompareAndSwap(m, n) {
					break
				}
			}
			inside.Add(-1)
			unlock()
		})
	}
	wg.Wait()
	if got := maxInside.Load(); got != 1 {
		t.Errorf("%d goroutines held the same key at once, want 1", got)
	}
	if l.Len() != 0 {
		t.Errorf("Len() = %d after every unlock, want 0", l.Len())
	}
}

func TestOtherKeysDoNotWait(t *testing.T) {
	var l Locks
	unlockA, err := l.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer unlockA()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	unlockB, err := l.Lock(ctx, "b")
	if err != nil {
		t.Fatalf("Lock(b) while a is held: %v", err)
	}
	unlockB()
}

func TestWaitGivesUpWithContext(t *testing.T) {
	var l Locks
	unlock, err := l.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := l.Lock(ctx, "a")
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Lock with a cancelled context: err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return after its context was cancelled")
	}
	unlock()
	unlock() // a second call is harmless
	if l.Len() != 0 {
		t.Errorf("Len() = %d, want 0: the waiter that gave up must not keep the entry", l.Len())
	}
	// The key is free again.
	u, err := l.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	u()
}
