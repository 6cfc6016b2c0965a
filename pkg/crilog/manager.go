package crilog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ContainerState is what a Manager needs to know of a container when its
// log stream ends: whether more output may come.
type ContainerState int

const (
	// StateUnknown: the state could not be read (Docker unreachable, say);
	// the container is taken as running.
	StateUnknown ContainerState = iota
	// StateRunning: the container runs and may write more.
	StateRunning
	// StateExited: the container has exited; its output is final.
	StateExited
	// StateGone: the container has been removed; its log is of no use.
	StateGone
)

// StateFunc reads a container's state. It is called each time a
// container's log stream ends, with a context that ends when the follower
// is stopped.
type StateFunc func(ctx context.Context, id string) ContainerState

// Back-off between restarts of a container's follower: it doubles from
// restartMinDelay up to restartMaxDelay, and starts over after an attempt
// that wrote something.
const (
	restartMinDelay = 100 * time.Millisecond
	restartMaxDelay = 10 * time.Second
)

// exitedRetries bounds the restarts after the container has exited, when
// its follower still fails (a disk that stays full): the container writes
// nothing more, and kubelet removes it sooner or later anyway.
const exitedRetries = 5

// Manager keeps one follower per container ID, and restarts it while the
// container may still write: a Docker log stream ends when the container
// exits, but also when dockerd restarts or its log reader fails, and a
// write fails when the disk is full; none of these must end the copy for
// good. Each restart resumes after the last line in the file (see
// Follower), so nothing is lost or written twice. A container leaves the
// map once its log is copied to the end, or Stop or StopAll.
type Manager struct {
	src   LogSource
	state StateFunc
	clock clock.Clock
	// writeErr is handed to every follower (see followSpec); tests only.
	writeErr func() error
	// onRestart is called at each restart of a follower (WithOnRestart).
	onRestart func()

	mu        sync.Mutex
	followers map[string]*managed
}

// managed is one followed container: its current follower and the
// goroutine that restarts it.
type managed struct {
	spec   followSpec
	cancel context.CancelFunc
	since  time.Time     // when following began
	done   chan struct{} // closed once the last follower has closed its file

	mu  sync.Mutex
	cur *Follower
}

func (e *managed) current() *Follower {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur
}

func (e *managed) setCurrent(f *Follower) {
	e.mu.Lock()
	e.cur = f
	e.mu.Unlock()
}

// ManagerOption configures a Manager.
type ManagerOption func(*Manager)

// WithStateFunc sets how the manager learns whether a container still
// runs. Without one, a stream that ends cleanly is taken to mean the
// container exited (Docker ends a followed stream then), and nothing is
// restarted after it.
func WithStateFunc(f StateFunc) ManagerOption { return func(m *Manager) { m.state = f } }

// WithOnRestart sets a function called each time a follower is restarted
// after its stream ended or failed (the daemon counts them in a metric).
func WithOnRestart(f func()) ManagerOption { return func(m *Manager) { m.onRestart = f } }

// WithClock sets the clock that times restarts; tests pass a fake one.
func WithClock(c clock.Clock) ManagerOption { return func(m *Manager) { m.clock = c } }

// NewManager returns a manager whose followers read from src.
func NewManager(src LogSource, opts ...ManagerOption) *Manager {
	m := &Manager{src: src, clock: clock.RealClock{}, followers: map[string]*managed{}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Start follows the log of container id into the CRI log file at path (see
// Follow). It is a no-op if the container is already followed, even with
// other arguments, as a second follower would write every line twice.
//
// ctx bounds only the setup, whose errors are returned. The following
// outlives the call: it goes on, restarted as needed, until the container
// has exited and its log is copied to the end, or it is removed, or Stop
// or StopAll.
func (m *Manager) Start(ctx context.Context, id, path string, tty bool) error {
	return m.start(ctx, followSpec{id: id, path: path, tty: tty})
}

// Drain copies what Docker holds of the log of container id, which exited
// at finished, into the CRI log file at path, after the file's last line:
// the output of a container that exited while netshim was down. Unlike
// Start it does not create the file: a missing file (kubelet removed it)
// fails with an error satisfying errors.Is(err, fs.ErrNotExist), and
// nothing is written.
func (m *Manager) Drain(ctx context.Context, id, path string, tty bool, finished time.Time) error {
	return m.start(ctx, followSpec{id: id, path: path, tty: tty, drain: true, until: finished})
}

func (m *Manager) start(ctx context.Context, spec followSpec) error {
	spec.writeErr = m.writeErr
	m.mu.Lock()
	if _, ok := m.followers[spec.id]; ok {
		m.mu.Unlock()
		return nil
	}
	// Registered before the setup so that a Reopen arriving meanwhile
	// reaches it (see Follower.start) and a concurrent Start is a no-op.
	fctx, cancel := context.WithCancel(context.Background())
	f := newFollower(m.src, spec)
	e := &managed{spec: spec, cancel: cancel, since: m.clock.Now(), done: make(chan struct{}), cur: f}
	m.followers[spec.id] = e
	m.mu.Unlock()

	stopSetupBound := context.AfterFunc(ctx, cancel)
	err := f.start(fctx)
	if !stopSetupBound() && err == nil {
		// ctx ended during the setup and cancelled the new follower.
		<-f.Done()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		m.remove(spec.id, e)
		close(e.done)
		return err
	}
	go m.supervise(fctx, e)
	return nil
}

// supervise waits for each follower of e to end and starts the next one,
// after a back-off, until the container's log is complete.
func (m *Manager) supervise(ctx context.Context, e *managed) {
	id, path := e.spec.id, e.spec.path
	defer close(e.done)
	defer m.remove(id, e)
	defer e.cancel()

	spec := e.spec // becomes a drain once the container has exited
	delay := restartMinDelay
	failures, exitedTries := 0, 0
	for {
		f := e.current()
		<-f.Done()
		err := f.Err()
		if ctx.Err() != nil {
			klog.V(4).InfoS("Container log follower stopped", "containerID", id, "path", path)
			return
		}
		if f.written {
			delay, failures = restartMinDelay, 0
		}
		reason, act := m.restartReason(ctx, spec, err, &exitedTries)
		switch act {
		case stopCopying:
			if reason != "" {
				klog.ErrorS(err, "Container log follower failed; not restarting it", "containerID", id, "path", path, "why", reason)
			} else {
				klog.V(4).InfoS("Container log copied to the end", "containerID", id, "path", path)
			}
			return
		case drainOnce:
			// At once: the exit stays hidden from kubelet until this
			// ends (see the package doc), so it must not wait.
			spec.drain = true
			next := newFollower(m.src, spec)
			e.setCurrent(next)
			next.start(ctx)
			continue
		}

		// One line per restart: an error the first time in a row, at
		// verbosity 2 while the same trouble goes on.
		if err != nil {
			failures++
		}
		if err != nil && failures == 1 {
			klog.ErrorS(err, "Container log follower failed; restarting it", "containerID", id, "path", path, "delay", delay)
		} else {
			klog.V(2).InfoS("Restarting container log follower", "containerID", id, "path", path, "reason", reason, "err", err, "delay", delay)
		}
		t := m.clock.NewTimer(delay)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return
		}
		delay = min(2*delay, restartMaxDelay)

		if m.onRestart != nil {
			m.onRestart()
		}
		next := newFollower(m.src, spec)
		e.setCurrent(next) // before the start: a Reopen meanwhile reaches it
		next.start(ctx)    // an error ends next, and the loop sees it
	}
}

// action is what supervise does once a follower has ended.
type action int

const (
	stopCopying action = iota // the log is complete, or cannot be copied
	restart                   // start the follower again, after a back-off
	drainOnce                 // read what Docker holds once more, now
)

// restartReason decides what follows the end, with err, of the follower of
// spec, and says why (or, when it stops, why if that is a failure).
//
// A followed stream that ends cleanly after the container's exit is not the
// end of the log: Docker's log copier writes a last line without newline
// when it reads the end of the container's output, which can come after a
// follower has been told the container stopped (dockerd 20.10's json-file
// follower ends then, before reading that message: seen in 9 of 400 short
// containers here). By then the message is in Docker's log, so one read
// without following picks up whatever the stream missed, and the dedup of
// the resume point drops what the file holds already.
func (m *Manager) restartReason(ctx context.Context, spec followSpec, err error, exitedTries *int) (string, action) {
	switch {
	case spec.drain && err == nil:
		return "", stopCopying // copied to the end
	case spec.drain && errors.Is(err, fs.ErrNotExist):
		return "", stopCopying // kubelet removed the file: it stays removed
	case errors.Is(err, ErrUnsafeLogFile), errors.Is(err, ErrNotCRILog):
		return "the log path is unusable", stopCopying
	}

	state := StateExited
	if m.state != nil {
		state = m.state(ctx, spec.id)
	}
	switch state {
	case StateGone:
		return "", stopCopying
	case StateExited:
		if err == nil {
			return "", drainOnce // Docker ended the stream: the container exited
		}
		if *exitedTries++; *exitedTries > exitedRetries {
			return fmt.Sprintf("the container has exited and %d retries failed", exitedRetries), stopCopying
		}
		return "copying the end of the log of an exited container", restart
	}
	if err == nil {
		return "the Docker log stream ended while the container runs", restart
	}
	return "copying failed while the container runs", restart
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
// container's log is not being followed. Between two followers of a
// container there is nothing to reopen: the next one opens whatever is at
// the path then.
func (m *Manager) Reopen(id string) error {
	e := m.get(id)
	if e == nil {
		return fmt.Errorf("%w: %s", ErrNotFollowing, id)
	}
	err := e.current().Reopen()
	if errors.Is(err, ErrNotFollowing) {
		select {
		case <-e.done:
		default:
			return nil
		}
	}
	return err
}

// Following reports whether container id's log is being copied, and
// since when. A container is followed from Start until its log is copied
// to the end, including the pauses between restarts.
func (m *Manager) Following(id string) (since time.Time, ok bool) {
	e := m.get(id)
	if e == nil {
		return time.Time{}, false
	}
	return e.since, true
}

// Done returns a channel closed once container id's log is no longer
// copied (at once for a container not followed).
func (m *Manager) Done(id string) <-chan struct{} {
	if e := m.get(id); e != nil {
		return e.done
	}
	closed := make(chan struct{})
	close(closed)
	return closed
}

// Stop stops following container id and waits until its file is closed. It
// does nothing for a container not followed.
func (m *Manager) Stop(id string) {
	if e := m.get(id); e != nil {
		e.cancel()
		<-e.done
	}
}

// StopAll stops every follower and waits until their files are closed.
func (m *Manager) StopAll() {
	m.mu.Lock()
	all := make([]*managed, 0, len(m.followers))
	for _, e := range m.followers {
		all = append(all, e)
		e.cancel()
	}
	m.mu.Unlock()
	for _, e := range all {
		<-e.done
	}
}
