package crilog

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
)

// waitGone waits, boundedly, until m no longer follows id.
func waitGone(t *testing.T, m *Manager, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.get(id) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s still followed", id)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestManagerStartIsIdempotentAndCleansUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	src := newPipeSource()
	m := NewManager(src)
	defer m.StopAll()

	if err := m.Start(context.Background(), "c1", path, false); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background(), "c1", path, false); err != nil {
		t.Fatal(err)
	}
	if n := len(src.callList()); n != 1 {
		t.Fatalf("%d log streams requested, want 1", n)
	}

	src.send(t, dockerMsg{frameStdout, at(1), "hello\n"}.frame())
	if err := m.Reopen("c1"); err != nil {
		t.Errorf("Reopen: %v", err)
	}
	if err := m.Reopen("unknown"); !errors.Is(err, ErrNotFollowing) {
		t.Errorf("Reopen(unknown) = %v, want ErrNotFollowing", err)
	}

	// The container exits: Docker ends the stream and the follower goes.
	f := m.get("c1").current()
	src.w.Close()
	if err := wait(t, f); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "c1")
	if err := m.Reopen("c1"); !errors.Is(err, ErrNotFollowing) {
		t.Errorf("Reopen after the end = %v, want ErrNotFollowing", err)
	}
	checkLines(t, path, entry(at(1), Stdout, "F", "hello"))
	checkFollowThenDrain(t, src.callList(), "")

	// Following again (netshim restarted, say) resumes from the file.
	again := streamSource(nil)
	m.src = again
	if err := m.Start(context.Background(), "c1", path, false); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "c1")
	checkFollowThenDrain(t, again.callList(), dockerSince(at(1)))
}

// checkFollowThenDrain checks the log reads of a container that exited
// while followed: one followed stream from since, then, once Docker ended
// it, one read without following (see Manager.restartReason).
func checkFollowThenDrain(t *testing.T, calls []logsCall, since string) {
	t.Helper()
	if len(calls) != 2 || !calls[0].opts.Follow || calls[0].opts.Since != since || calls[1].opts.Follow {
		t.Errorf("calls = %+v, want a followed stream since %q, then one read without following", calls, since)
	}
}

func TestManagerStop(t *testing.T) {
	dir := t.TempDir()
	m := NewManager(&fakeSource{open: func(context.Context, container.LogsOptions) (io.ReadCloser, error) {
		r, _ := io.Pipe() // a stream that never ends by itself
		return r, nil
	}})
	for _, id := range []string{"a", "b", "c"} {
		if err := m.Start(context.Background(), id, filepath.Join(dir, id, "0.log"), false); err != nil {
			t.Fatal(err)
		}
	}

	a := m.get("a").current()
	m.Stop("a")
	if m.get("a") != nil {
		t.Error("a still followed after Stop")
	}
	if !errors.Is(a.Err(), context.Canceled) {
		t.Errorf("a.Err() = %v, want context.Canceled", a.Err())
	}
	m.Stop("a") // not followed: nothing to do

	b, c := m.get("b").current(), m.get("c").current()
	m.StopAll()
	for _, f := range []*Follower{b, c} {
		select {
		case <-f.Done():
		default:
			t.Error("follower still running after StopAll")
		}
	}
	if m.get("b") != nil || m.get("c") != nil {
		t.Error("followers left after StopAll")
	}
}

func TestManagerStartErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	failing := &fakeSource{open: func(context.Context, container.LogsOptions) (io.ReadCloser, error) {
		return nil, errors.New("no such container")
	}}
	m := NewManager(failing)
	if err := m.Start(context.Background(), "c1", path, false); err == nil {
		t.Error("Start succeeded with a failing source")
	}
	if m.get("c1") != nil {
		t.Error("failed follower kept")
	}

	// ctx bounds the setup: a Docker that does not answer is given up on.
	m.src = &fakeSource{open: func(ctx context.Context, _ container.LogsOptions) (io.ReadCloser, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := m.Start(ctx, "c1", path, false); !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Start = %v, want a context error", err)
	}
	if m.get("c1") != nil {
		t.Error("failed follower kept")
	}
}

// The follower outlives the ctx of the Start call (a CRI request's).
func TestManagerFollowerOutlivesStartContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	src := newPipeSource()
	m := NewManager(src)
	defer m.StopAll()

	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx, "c1", path, false); err != nil {
		t.Fatal(err)
	}
	f := m.get("c1").current()
	cancel()
	src.send(t, dockerMsg{frameStdout, at(1), "still here\n"}.frame())
	src.w.Close()
	if err := wait(t, f); err != nil {
		t.Fatalf("Err = %v", err)
	}
	checkLines(t, path, entry(at(1), Stdout, "F", "still here"))
}
