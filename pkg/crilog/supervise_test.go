package crilog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/netshim/netshim/internal/testutil"
)

// liveSource is Docker's log of one container that runs until the test
// says otherwise. Like Docker, each request gets every message stamped at
// or after its since, then (when following) the new ones as they come;
// the stream ends when the container exits, or when the test breaks it.
type liveSource struct {
	t *testing.T

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	msgs    []dockerMsg
	state   ContainerState
	broken  map[int]bool // streams (by request number) the test ended
	// unfollowed are messages (by index in msgs) that a followed stream
	// never sends, as dockerd 20.10's json-file follower can miss the
	// last line its copier writes after the container stopped.
	unfollowed map[int]bool
	calls      []logsCall
}

func newLiveSource(t *testing.T) *liveSource {
	return &liveSource{t: t, changed: make(chan struct{}), state: StateRunning, broken: map[int]bool{}, unfollowed: map[int]bool{}}
}

func (s *liveSource) change(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *liveSource) add(m dockerMsg) { s.change(func() { s.msgs = append(s.msgs, m) }) }

// addUnfollowed adds a message only a read without follow returns.
func (s *liveSource) addUnfollowed(m dockerMsg) {
	s.change(func() {
		s.unfollowed[len(s.msgs)] = true
		s.msgs = append(s.msgs, m)
	})
}
func (s *liveSource) setState(st ContainerState) { s.change(func() { s.state = st }) }

// breakStream ends request n's stream (1-based) although the container runs.
func (s *liveSource) breakStream(n int) { s.change(func() { s.broken[n] = true }) }

func (s *liveSource) stateOf(context.Context, string) ContainerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *liveSource) callList() []logsCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]logsCall(nil), s.calls...)
}

func (s *liveSource) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error) {
	since := parseSince(s.t, opts.Since)
	s.mu.Lock()
	s.calls = append(s.calls, logsCall{id, opts})
	n := len(s.calls)
	s.mu.Unlock()
	pr, pw := io.Pipe()
	go func() {
		sent := 0
		for {
			s.mu.Lock()
			first, msgs := sent, s.msgs[sent:]
			sent = len(s.msgs)
			// Copied under the lock: the test adds to the map meanwhile.
			unfollowed := map[int]bool{}
			for i := range msgs {
				unfollowed[first+i] = s.unfollowed[first+i]
			}
			end := s.state != StateRunning || !opts.Follow
			broken := s.broken[n]
			changed := s.changed
			s.mu.Unlock()
			if broken {
				pw.Close()
				return
			}
			for i, m := range msgs {
				if m.ts.Before(since) || (opts.Follow && unfollowed[first+i]) {
					continue
				}
				if _, err := pw.Write(m.frame()); err != nil {
					return
				}
			}
			if end {
				pw.Close()
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				pw.CloseWithError(ctx.Err())
				return
			}
		}
	}()
	return pr, nil
}

// waitLines waits until the file at path holds exactly want.
func waitLines(t *testing.T, path string, want ...string) {
	t.Helper()
	var all string
	for _, w := range want {
		all += w
	}
	testutil.Eventually(t, fmt.Sprintf("%s to hold %q", path, all), func() bool {
		b, _ := os.ReadFile(path)
		return string(b) == all
	})
}

// stepRestart waits until the manager waits to restart, and lets it,
// checking that the wait is delay long.
func stepRestart(t *testing.T, clk *testingclock.FakeClock, delay time.Duration) {
	t.Helper()
	testutil.Eventually(t, "a restart to be scheduled", clk.HasWaiters)
	clk.Step(delay - time.Millisecond)
	if !clk.HasWaiters() {
		t.Fatalf("restart due before %v", delay)
	}
	clk.Step(time.Millisecond)
}

// waitFollowerDone waits, boundedly, until m no longer copies id's log
// after the container exited.
func waitFollowerDone(t *testing.T, m *Manager, id string) {
	t.Helper()
	select {
	case <-m.Done(id):
	case <-time.After(10 * time.Second):
		t.Fatalf("follower of %s did not end after the exit", id)
	}
}

func newSupervised(t *testing.T, src *liveSource) (*Manager, *testingclock.FakeClock) {
	clk := testingclock.NewFakeClock(time.Now())
	m := NewManager(src, WithStateFunc(src.stateOf), WithClock(clk))
	t.Cleanup(m.StopAll)
	return m, clk
}

// TestFollowerRestartsWhenStreamEndsWhileRunning: Docker ended the stream
// (its log reader failed, dockerd restarted) while the container runs.
// The old manager dropped the follower and the container's later output
// never reached the file.
func TestFollowerRestartsWhenStreamEndsWhileRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	src := newLiveSource(t)
	m, clk := newSupervised(t, src)
	src.add(dockerMsg{frameStdout, at(1), "one\n"})
	src.add(dockerMsg{frameStdout, at(2), "two, first chunk|"})
	if err := m.Start(context.Background(), "c1", path, false); err != nil {
		t.Fatal(err)
	}
	waitLines(t, path, entry(at(1), Stdout, "F", "one"), entry(at(2), Stdout, "P", "two, first chunk|"))

	src.breakStream(1)
	// Written while no stream is open: the restart fetches them.
	src.add(dockerMsg{frameStdout, at(2), "second chunk\n"})
	src.add(dockerMsg{frameStderr, at(3), "three\n"})
	stepRestart(t, clk, restartMinDelay)

	want := []string{
		entry(at(1), Stdout, "F", "one"),
		entry(at(2), Stdout, "P", "two, first chunk|"),
		entry(at(2), Stdout, "F", "second chunk"),
		entry(at(3), Stderr, "F", "three"),
	}
	waitLines(t, path, want...)
	if _, ok := m.Following("c1"); !ok {
		t.Fatal("container no longer followed after the restart")
	}
	calls := src.callList()
	if len(calls) != 2 || calls[1].opts.Since != dockerSince(at(2)) || !calls[1].opts.Follow {
		t.Errorf("calls = %+v, want a second one following since %s", calls, dockerSince(at(2)))
	}

	// Still copying: new output arrives, then the container exits and
	// the follower ends once the stream has ended.
	src.add(dockerMsg{frameStdout, at(4), "four\n"})
	src.setState(StateExited)
	waitFollowerDone(t, m, "c1")
	waitLines(t, path, append(want, entry(at(4), Stdout, "F", "four"))...)
	if _, ok := m.Following("c1"); ok {
		t.Error("exited container still followed")
	}
}

// TestFollowerRestartsAfterFullDisk: a write fails with ENOSPC; once
// space is back the follower goes on after the last line it wrote.
func TestFollowerRestartsAfterFullDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	src := newLiveSource(t)
	m, clk := newSupervised(t, src)
	var mu sync.Mutex
	full := false
	m.writeErr = func() error {
		mu.Lock()
		defer mu.Unlock()
		if full {
			return syscall.ENOSPC
		}
		return nil
	}
	setFull := func(v bool) { mu.Lock(); full = v; mu.Unlock() }
	var restarts atomic.Int32
	m.onRestart = func() { restarts.Add(1) } // as WithOnRestart sets it

	src.add(dockerMsg{frameStdout, at(1), "one\n"})
	if err := m.Start(context.Background(), "c1", path, false); err != nil {
		t.Fatal(err)
	}
	waitLines(t, path, entry(at(1), Stdout, "F", "one"))

	setFull(true)
	src.add(dockerMsg{frameStdout, at(2), "two\n"})
	// The write fails and the follower ends; the restarts fail too while
	// the disk is full, each after twice the delay before.
	stepRestart(t, clk, restartMinDelay)
	testutil.Eventually(t, "the second stream", func() bool { return len(src.callList()) == 2 })
	stepRestart(t, clk, 2*restartMinDelay)
	testutil.Eventually(t, "the third stream", func() bool { return len(src.callList()) == 3 })

	setFull(false)
	src.add(dockerMsg{frameStdout, at(3), "three\n"})
	stepRestart(t, clk, 4*restartMinDelay)
	waitLines(t, path,
		entry(at(1), Stdout, "F", "one"),
		entry(at(2), Stdout, "F", "two"),
		entry(at(3), Stdout, "F", "three"))
	if n := len(src.callList()); n != 4 {
		t.Errorf("%d streams, want 4", n)
	}
	if n := restarts.Load(); n != 3 {
		t.Errorf("onRestart called %d times, want 3 (one per restart)", n)
	}
	if _, ok := m.Following("c1"); !ok {
		t.Error("follower gone although the container runs")
	}
}

// A removed container is not restarted, and neither is one whose file
// became something netshim must not write.
func TestFollowerNotRestarted(t *testing.T) {
	t.Run("container removed", func(t *testing.T) {
		src := newLiveSource(t)
		m, _ := newSupervised(t, src)
		if err := m.Start(context.Background(), "c1", filepath.Join(t.TempDir(), "0.log"), false); err != nil {
			t.Fatal(err)
		}
		src.setState(StateGone)
		<-m.Done("c1") // bounded by the test timeout; ends at once
		if n := len(src.callList()); n != 1 {
			t.Errorf("%d streams, want 1", n)
		}
	})
	t.Run("log file replaced by a symlink", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "0.log")
		src := newLiveSource(t)
		m, clk := newSupervised(t, src)
		m.writeErr = func() error { return syscall.EIO }
		src.add(dockerMsg{frameStdout, at(1), "one\n"})
		if err := m.Start(context.Background(), "c1", path, false); err != nil {
			t.Fatal(err)
		}
		// The write fails; meanwhile the file is swapped for a symlink.
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, "elsewhere")
		mustSymlink(t, target, path)
		stepRestart(t, clk, restartMinDelay)
		<-m.Done("c1")
		if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("symlink target created: %v", err)
		}
	})
}

// TestDrain: the output a container wrote before it exited while netshim
// was down is appended after the file's last line, and the drain ends.
func TestDrain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	writeFile(t, path, entry(at(1), Stdout, "F", "one"))
	src := newLiveSource(t)
	src.setState(StateExited)
	m, _ := newSupervised(t, src)
	src.add(dockerMsg{frameStdout, at(1), "one\n"})
	src.add(dockerMsg{frameStderr, at(2), "two\n"})
	src.add(dockerMsg{frameStdout, at(3), "no newline"})
	finished := at(4)
	if err := m.Drain(context.Background(), "c1", path, false, finished); err != nil {
		t.Fatal(err)
	}
	<-m.Done("c1")
	checkLines(t, path,
		entry(at(1), Stdout, "F", "one"),
		entry(at(2), Stderr, "F", "two"),
		entry(at(3), Stdout, "P", "no newline"))
	calls := src.callList()
	if len(calls) != 1 || calls[0].opts.Follow || calls[0].opts.Until != dockerSince(finished) || calls[0].opts.Since != dockerSince(at(1)) {
		t.Errorf("calls = %+v, want one without follow, since %s until %s", calls, dockerSince(at(1)), dockerSince(finished))
	}

	// kubelet removed the file: it is not made again.
	gone := filepath.Join(t.TempDir(), "c", "0.log")
	if err := m.Drain(context.Background(), "c2", gone, false, finished); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Drain of a removed file = %v, want ErrNotExist", err)
	}
	if _, err := os.Lstat(filepath.Dir(gone)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("log directory made again: %v", err)
	}
	if _, ok := m.Following("c2"); ok {
		t.Error("c2 followed")
	}
}

// TestFollowerDrainsAfterExit: the followed stream ended at the container's
// exit without the last line, which Docker's copier wrote after it (no
// newline: written when the copier read the end of the output). The
// follower reads Docker's log once more, without following, and only then
// is the copy done. Before, the line was lost now and then, and kubelet
// read an empty termination message from the log (FallbackToLogsOnError).
func TestFollowerDrainsAfterExit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	src := newLiveSource(t)
	m, _ := newSupervised(t, src)
	src.add(dockerMsg{frameStdout, at(1), "one\n"})
	if err := m.Start(context.Background(), "c1", path, false); err != nil {
		t.Fatal(err)
	}
	waitLines(t, path, entry(at(1), Stdout, "F", "one"))

	src.add(dockerMsg{frameStdout, at(2), "two "})
	src.addUnfollowed(dockerMsg{frameStdout, at(3), "DONE"})
	src.setState(StateExited)
	waitFollowerDone(t, m, "c1")
	checkLines(t, path,
		entry(at(1), Stdout, "F", "one"),
		entry(at(2), Stdout, "P", "two "),
		entry(at(3), Stdout, "P", "DONE"))
	calls := src.callList()
	if len(calls) != 2 || !calls[0].opts.Follow || calls[1].opts.Follow || calls[1].opts.Until != "" ||
		calls[1].opts.Since != dockerSince(at(2)) {
		t.Errorf("calls = %+v, want a followed one, then one without follow or until, since %s", calls, dockerSince(at(2)))
	}
}

// A drain that fails (full disk) is retried, a bounded number of times.
func TestDrainRetriesBoundedly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	writeFile(t, path, "")
	src := newLiveSource(t)
	src.setState(StateExited)
	m, clk := newSupervised(t, src)
	m.writeErr = func() error { return syscall.ENOSPC }
	src.add(dockerMsg{frameStdout, at(1), "one\n"})
	if err := m.Drain(context.Background(), "c1", path, false, at(2)); err != nil {
		t.Fatal(err)
	}
	delay := restartMinDelay
	for i := range exitedRetries {
		stepRestart(t, clk, delay)
		testutil.Eventually(t, fmt.Sprintf("retry %d", i+1), func() bool { return len(src.callList()) == i+2 })
		delay *= 2
	}
	<-m.Done("c1")
	if n := len(src.callList()); n != exitedRetries+1 {
		t.Errorf("%d attempts, want %d", n, exitedRetries+1)
	}
}
