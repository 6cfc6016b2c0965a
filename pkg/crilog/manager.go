package crilog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/klog/v2"
)

// Manager keeps one Follower per container ID. A follower removes itself
// when it ends, so the map holds only containers whose log is being copied.
type Manager struct {
	src LogSource

	mu        sync.Mutex
	followers map[string]*managed
}

type managed struct {
	f      *Follower
	cancel context.CancelFunc
}

// NewManager returns a manager whose followers read from src.
func NewManager(src LogSource) *Manager {
	return &Manager{src: src, followers: map[string]*managed{}}
}

// Start follows the log of container id into the CRI log file at path (see
// Follow). It is a no-op if the container is already followed, even with
// other arguments, as a second follower would write every line twice.
//
// ctx bounds only the setup. The follower outlives the call: it runs until
// Docker ends the stream, or Stop or StopAll.
func (m *Manager) Start(ctx context.Context, id, path string, tty bool) error {
	m.mu.Lock()
	if _, ok := m.followers[id]; ok {
		m.mu.Unlock()
		return nil
	}
	// Registered before the setup so that a Reopen arriving meanwhile
	// reaches it (see Follower.start) and a concurrent Start is a no-op.
	fctx, cancel := context.WithCancel(context.Background())
	e := &managed{f: newFollower(m.src, id, path, tty), cancel: cancel}
	m.followers[id] = e
	m.mu.Unlock()

	stopSetupBound := context.AfterFunc(ctx, cancel)
	err := e.f.start(fctx)
	if !stopSetupBound() && err == nil {
		// ctx ended during the setup and cancelled the new follower.
		<-e.f.Done()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		m.remove(id, e)
		return err
	}

	go func() {
		<-e.f.Done()
		cancel()
		m.remove(id, e)
		if err := e.f.Err(); err != nil && !errors.Is(err, context.Canceled) {
			klog.ErrorS(err, "Container log follower failed", "containerID", id, "path", path)
		} else {
			klog.V(4).InfoS("Container log follower ended", "containerID", id, "path", path)
		}
	}()
	return nil
}

// remove forgets e, unless id has since been given to another follower.
func (m *Manager) remove(id string, e *managed) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.followers[id] == e {
		delete(m.followers, id)
	}
}

func (m *Manager) get(id string) *managed {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.followers[id]
}

// Reopen makes the follower of container id write to a fresh file at its
// path (kubelet's ReopenContainerLog). It fails with ErrNotFollowing if the
// container's log is not being followed.
func (m *Manager) Reopen(id string) error {
	e := m.get(id)
	if e == nil {
		return fmt.Errorf("%w: %s", ErrNotFollowing, id)
	}
	return e.f.Reopen()
}

// Stop stops following container id and waits until its file is closed. It
// does nothing for a container not followed.
func (m *Manager) Stop(id string) {
	if e := m.get(id); e != nil {
		e.cancel()
		<-e.f.Done()
		m.remove(id, e)
	}
}

// StopAll stops every follower and waits until their files are closed.
func (m *Manager) StopAll() {
	m.mu.Lock()
	all := make(map[string]*managed, len(m.followers))
	for id, e := range m.followers {
		all[id] = e
		e.cancel()
	}
	m.mu.Unlock()
	for id, e := range all {
		<-e.f.Done()
		m.remove(id, e)
	}
}
