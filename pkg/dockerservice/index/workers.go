package index

import (
	"context"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"k8s.io/klog/v2"
)

// scheduler holds the containers waiting for an inspect. Requests for the
// same ID coalesce: a queued ID is queued once, and an ID whose inspect is
// in flight gets one follow-up inspect however many events arrive
// meanwhile (the follow-up sees the latest state).
type scheduler struct {
	mu      sync.Mutex
	pending map[string]*job
	queue   []string // FIFO of queued (not in flight) IDs
	// wake holds a token while the queue may be non-empty; each worker
	// that takes an ID passes the token on if more remain.
	wake chan struct{}
}

type job struct {
	queuedAt  time.Time
	inFlight  bool
	again     bool // another inspect was asked for while in flight
	destroyed bool // a destroy arrived while in flight: drop its result
}

func newScheduler() *scheduler {
	return &scheduler{pending: map[string]*job{}, wake: make(chan struct{}, 1)}
}

func (s *scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// add asks for an inspect of id.
func (s *scheduler) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.pending[id]; ok {
		if j.inFlight {
			j.again = true
		}
		return
	}
	s.pending[id] = &job{queuedAt: time.Now()}
	s.queue = append(s.queue, id)
	s.signal()
}

// take waits for a queued ID and marks it in flight.
func (s *scheduler) take(ctx context.Context) (string, bool) {
	for {
		s.mu.Lock()
		for len(s.queue) > 0 {
			id := s.queue[0]
			s.queue[0] = ""
			s.queue = s.queue[1:]
			j, ok := s.pending[id]
			if !ok || j.inFlight {
				continue // dropped by a destroy while queued
			}
			j.inFlight = true
			if len(s.queue) > 0 {
				s.signal()
			}
			s.mu.Unlock()
			return id, true
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", false
		case <-s.wake:
		}
	}
}

// backlog is how many IDs wait for a worker and since when the oldest
// has waited. Queued IDs are in arrival order, so the oldest is first.
func (s *scheduler) backlog() (n int, oldest time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.queue {
		if j, ok := s.pending[id]; ok && !j.inFlight {
			if n == 0 {
				oldest = j.queuedAt
			}
			n++
		}
	}
	return n, oldest
}

// runWorkers runs the inspect workers until ctx ends.
func (x *Index) runWorkers(ctx context.Context) {
	var wg sync.WaitGroup
	for range x.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				id, ok := x.sched.take(ctx)
				if !ok {
					return
				}
				x.refreshQueued(ctx, id)
			}
		}()
	}
	wg.Wait()
}

// refreshQueued makes one scheduled inspect and stores its result, unless
// the container was destroyed while it ran.
func (x *Index) refreshQueued(ctx context.Context, id string) {
	since := x.store.Generation()
	ictx, cancel := context.WithTimeout(ctx, x.opts.InspectTimeout)
	c, err := x.client.ContainerInspect(ictx, id)
	cancel()

	s := x.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.pending[id]
	switch {
	case j.destroyed:
	case errdefs.IsNotFound(err):
		x.store.Delete(id)
	case err != nil:
		// The record may be stale: a resync lists every container's
		// state without touching its lock, and inspects only those the
		// index has wrong.
		klog.ErrorS(err, "Failed to inspect container for the state index; resyncing", "containerID", id)
		x.requestResync()
	default:
		if rec := x.decode(c); rec != nil {
			x.putInspected(rec, since)
		}
	}
	if j.again && !j.destroyed {
		j.again, j.inFlight, j.queuedAt = false, false, time.Now()
		s.queue = append(s.queue, id)
		s.signal()
		return
	}
	delete(s.pending, id)
}

// forget removes a destroyed container from the index and from the
// inspect queue; an inspect of it in flight will not store its result.
func (x *Index) forget(id string) {
	s := x.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.pending[id]; ok {
		if j.inFlight {
			j.destroyed = true
		} else {
			delete(s.pending, id)
		}
	}
	x.store.Delete(id)
}
