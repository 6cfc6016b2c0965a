// Package broadcast hands every published value to every subscriber, in
// publishing order, without ever making the publisher wait.
//
// Each subscriber has a bounded buffer. A subscriber that lets it fill up
// is dropped (its subscription ends with an *OverflowError) rather than
// slowing the publisher down or being fed a stream with holes in it: a
// consumer that missed values must learn that it did, and start over from
// a full listing.
package broadcast

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrClosed ends the subscriptions of a closed Broadcaster.
var ErrClosed = errors.New("broadcaster closed")

// OverflowError ends the subscription of a subscriber that did not keep up.
type OverflowError struct {
	// Buffered is how many values were waiting for it.
	Buffered int
}

func (e *OverflowError) Error() string {
	return fmt.Sprintf("events subscriber too slow: %d events buffered", e.Buffered)
}

// Broadcaster fans values out to subscribers. The zero value is ready to
// use.
type Broadcaster[T any] struct {
	mu     sync.Mutex
	subs   map[*Subscription[T]]struct{}
	closed error
}

// Subscription is one subscriber's feed.
type Subscription[T any] struct {
	b    *Broadcaster[T]
	ch   chan T
	done chan struct{}
	err  error // set before done is closed
	// stopCtx unregisters the context watch.
	stopCtx func() bool
}

// Subscribe starts a feed that buffers up to buffer values (at least 1). It
// ends when ctx ends, when Close is called, when the subscriber lets its
// buffer overflow, or when the broadcaster is closed.
func (b *Broadcaster[T]) Subscribe(ctx context.Context, buffer int) *Subscription[T] {
	s := &Subscription[T]{b: b, ch: make(chan T, max(buffer, 1)), done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed != nil {
		s.err = b.closed
		close(s.done)
		return s
	}
	if b.subs == nil {
		b.subs = map[*Subscription[T]]struct{}{}
	}
	b.subs[s] = struct{}{}
	// Registered under the lock: the callback takes it, so it cannot end
	// the subscription before the subscription exists.
	s.stopCtx = context.AfterFunc(ctx, func() { s.end(context.Cause(ctx)) })
	return s
}

// Publish hands v to every subscriber. It never blocks: a subscriber whose
// buffer is full is dropped instead.
func (b *Broadcaster[T]) Publish(v T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		select {
		case s.ch <- v:
		default:
			s.endLocked(&OverflowError{Buffered: len(s.ch)})
		}
	}
}

// Len is the number of subscribers: a publisher with none may skip
// building what it would publish.
func (b *Broadcaster[T]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// Close ends every subscription with err (ErrClosed if nil) and refuses
// new ones.
func (b *Broadcaster[T]) Close(err error) {
	if err == nil {
		err = ErrClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed != nil {
		return
	}
	b.closed = err
	for s := range b.subs {
		s.endLocked(err)
	}
}

// C delivers the values. It is never closed: select on Done as well.
func (s *Subscription[T]) C() <-chan T { return s.ch }

// Done is closed when the subscription has ended; Err then says why.
// Values still buffered may be read but the feed is incomplete.
func (s *Subscription[T]) Done() <-chan struct{} { return s.done }

// Err is nil while the subscription lasts, then why it ended: its
// context's error, context.Canceled after Close, an *OverflowError, or
// the broadcaster's close error.
func (s *Subscription[T]) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Close ends the subscription. It may be called any number of times.
func (s *Subscription[T]) Close() { s.end(context.Canceled) }

func (s *Subscription[T]) end(err error) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.endLocked(err)
}

// endLocked ends the subscription once; b.mu is held.
func (s *Subscription[T]) endLocked(err error) {
	if _, ok := s.b.subs[s]; !ok {
		return
	}
	delete(s.b.subs, s)
	s.err = err
	close(s.done)
	// Does not wait for the callback: it may be waiting for b.mu.
	s.stopCtx()
}
