// Package keylock serialises operations per key (a pod sandbox ID) while
// letting different keys proceed in parallel. Waiting for a key gives up
// when the caller's context ends, so a lifecycle call stuck behind a slow
// one (a CNI ADD that takes minutes) returns to its caller instead of
// piling up.
package keylock

import (
	"context"
	"sync"
)

// Locks is a set of per-key mutexes. The zero value is ready to use.
// Entries are dropped once nobody holds or waits for them, so the set does
// not grow with every key ever seen.
type Locks struct {
	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	// sem holds one token while the key is locked.
	sem  chan struct{}
	refs int // holders and waiters
}

// Lock takes the lock of key, waiting until it is free or ctx ends. On
// success it returns the function that releases it; call it exactly once.
func (l *Locks) Lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*entry{}
	}
	e := l.m[key]
	if e == nil {
		e = &entry{sem: make(chan struct{}, 1)}
		l.m[key] = e
	}
	e.refs++
	l.mu.Unlock()

	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		// A free lock wins over an ended context only by chance of the
		// select; either way the caller sees a consistent answer.
		l.release(key, e)
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-e.sem
			l.release(key, e)
		})
	}, nil
}

func (l *Locks) release(key string, e *entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(l.m, key)
	}
}

// Len is the number of keys held or waited for (for tests).
func (l *Locks) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
