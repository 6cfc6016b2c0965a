package broadcast

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/netshim/netshim/internal/testutil"
)

// read takes n values from s, failing if it ends first.
func read(t *testing.T, s *Subscription[int], n int) []int {
	t.Helper()
	out := make([]int, 0, n)
	for len(out) < n {
		select {
		case v := <-s.C():
			out = append(out, v)
		case <-s.Done():
			t.Fatalf("subscription ended after %d of %d values: %v", len(out), n, s.Err())
		}
	}
	return out
}

func TestEverySubscriberGetsEverythingInOrder(t *testing.T) {
	var b Broadcaster[int]
	const n = 1000
	subs := make([]*Subscription[int], 3)
	for i := range subs {
		subs[i] = b.Subscribe(context.Background(), 16)
		defer subs[i].Close()
	}
	// Readers keep up, so nobody overflows however the publisher races
	// them.
	got := make([][]int, len(subs))
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for len(got[i]) < n {
				got[i] = append(got[i], <-s.C())
				if len(got[i])%8 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	for v := range n {
		for b.Len() > 0 && !roomFor(subs) {
			runtime.Gosched() // a reader is behind: let it catch up
		}
		b.Publish(v)
	}
	wg.Wait()
	for i, g := range got {
		for j, v := range g {
			if v != j {
				t.Fatalf("subscriber %d: value %d is %d: order not kept", i, j, v)
			}
		}
		if err := subs[i].Err(); err != nil {
			t.Errorf("subscriber %d ended: %v", i, err)
		}
	}
}

func roomFor(subs []*Subscription[int]) bool {
	for _, s := range subs {
		if len(s.ch) == cap(s.ch) {
			return false
		}
	}
	return true
}

func TestSlowSubscriberIsDroppedOthersGetEverything(t *testing.T) {
	var b Broadcaster[int]
	slow := b.Subscribe(context.Background(), 4)
	fast := b.Subscribe(context.Background(), 4)
	defer fast.Close()
	var got []int
	for v := range 10 {
		b.Publish(v) // never blocks, though slow never reads
		got = append(got, read(t, fast, 1)...)
	}
	select {
	case <-slow.Done():
	default:
		t.Fatal("slow subscriber still subscribed after overflowing")
	}
	var oe *OverflowError
	if !errors.As(slow.Err(), &oe) || oe.Buffered != 4 {
		t.Fatalf("slow subscriber ended with %v, want an OverflowError with 4 buffered", slow.Err())
	}
	if want := "events subscriber too slow: 4 events buffered"; slow.Err().Error() != want {
		t.Errorf("error %q, want %q", slow.Err(), want)
	}
	// What it had buffered is still there, in order, and nothing after.
	if n := len(slow.C()); n != 4 {
		t.Fatalf("slow subscriber holds %d values, want the 4 it buffered", n)
	}
	for i := range 4 {
		if v := <-slow.C(); v != i {
			t.Errorf("slow subscriber's value %d is %d", i, v)
		}
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("fast subscriber's value %d is %d", i, v)
		}
	}
	if fast.Err() != nil || b.Len() != 1 {
		t.Errorf("fast subscriber: err %v, subscribers %d; want it alone and subscribed", fast.Err(), b.Len())
	}
}

func TestSubscriptionEndsWithItsContext(t *testing.T) {
	var b Broadcaster[int]
	ctx, cancel := context.WithCancel(context.Background())
	s := b.Subscribe(ctx, 1)
	other := b.Subscribe(context.Background(), 1)
	defer other.Close()
	if b.Len() != 2 {
		t.Fatalf("%d subscribers, want 2", b.Len())
	}
	cancel()
	<-s.Done()
	if !errors.Is(s.Err(), context.Canceled) {
		t.Errorf("ended with %v, want context.Canceled", s.Err())
	}
	if b.Len() != 1 {
		t.Errorf("%d subscribers after the cancel, want 1", b.Len())
	}
	b.Publish(1) // only the other one gets it
	if got := read(t, other, 1); got[0] != 1 {
		t.Errorf("other subscriber got %v", got)
	}
}

func TestCloseIsIdempotentAndEndsWithCanceled(t *testing.T) {
	var b Broadcaster[int]
	s := b.Subscribe(context.Background(), 1)
	s.Close()
	s.Close()
	if !errors.Is(s.Err(), context.Canceled) || b.Len() != 0 {
		t.Errorf("after Close: err %v, %d subscribers", s.Err(), b.Len())
	}
	b.Publish(1)
	if len(s.C()) != 0 {
		t.Error("a closed subscription was fed")
	}
}

func TestClosedBroadcasterEndsAndRefusesSubscriptions(t *testing.T) {
	var b Broadcaster[int]
	s := b.Subscribe(context.Background(), 1)
	stop := errors.New("shutting down")
	b.Close(stop)
	if !errors.Is(s.Err(), stop) {
		t.Errorf("live subscription ended with %v, want %v", s.Err(), stop)
	}
	late := b.Subscribe(context.Background(), 1)
	<-late.Done()
	if !errors.Is(late.Err(), stop) {
		t.Errorf("late subscription ended with %v, want %v", late.Err(), stop)
	}
	late.Close()
	b.Publish(1) // no one to feed, nothing to block on
	b.Close(nil) // a second close changes nothing
	if !errors.Is(s.Err(), stop) {
		t.Errorf("second close changed the error to %v", s.Err())
	}
}

func TestPublishNeverBlocksWithUnreadSubscribers(t *testing.T) {
	var b Broadcaster[int]
	subs := make([]*Subscription[int], 50)
	for i := range subs {
		subs[i] = b.Subscribe(context.Background(), 1+i%3)
	}
	// No one reads: each subscriber is dropped once full and publishing
	// goes on.
	for v := range 100 {
		b.Publish(v)
	}
	if b.Len() != 0 {
		t.Errorf("%d subscribers left, want all dropped", b.Len())
	}
	for i, s := range subs {
		var oe *OverflowError
		if !errors.As(s.Err(), &oe) || oe.Buffered != 1+i%3 {
			t.Errorf("subscriber %d ended with %v", i, s.Err())
		}
	}
}

func TestConcurrentUseLeaksNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	var b Broadcaster[int]
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			s := b.Subscribe(ctx, 8)
			for range 50 {
				select {
				case <-s.C():
				case <-s.Done():
				}
			}
			if i%2 == 0 {
				cancel()
				<-s.Done()
			} else {
				s.Close()
				cancel()
			}
		}()
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range 500 {
				b.Publish(v)
			}
		}()
	}
	// Unblock subscribers that are waiting for values no one publishes
	// any more.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
loop:
	for {
		select {
		case <-done:
			break loop
		default:
			b.Publish(-1)
			runtime.Gosched()
		}
	}
	if b.Len() != 0 {
		t.Errorf("%d subscribers left after all ended", b.Len())
	}
	testutil.Eventually(t, "goroutines back to the start count", func() bool { return runtime.NumGoroutine() <= before })
}

// BenchmarkPublish is the publisher's cost per value, which the events
// goroutine pays for each event, with subscribers that keep up.
func BenchmarkPublish(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
			var br Broadcaster[int]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			for range n {
				s := br.Subscribe(ctx, 1<<20)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-s.C():
						case <-s.Done():
							return
						}
					}
				}()
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				br.Publish(i)
			}
			if br.Len() != n {
				b.Fatalf("%d subscribers dropped", n-br.Len())
			}
			cancel()
			wg.Wait()
		})
	}
}
