package fakedocker

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"
)

const img = "busybox:1"

func newEngine(t *testing.T) (*Engine, <-chan events.Message) {
	t.Helper()
	f := New()
	f.AddImage(Image{ID: "sha256:b1"}, img)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, _ := f.Events(ctx, events.ListOptions{})
	return f, msgs
}

// nextEvent returns the next event's action and container ID.
func nextEvent(t *testing.T, msgs <-chan events.Message) (events.Action, string) {
	t.Helper()
	select {
	case m := <-msgs:
		return m.Action, m.Actor.ID
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
		return "", ""
	}
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	f, msgs := newEngine(t)
	created, err := f.ContainerCreate(ctx, &container.Config{Image: img, Labels: map[string]string{"k": "v"}}, nil, nil, nil, "c1")
	if err != nil {
		t.Fatal(err)
	}
	id := created.ID
	steps := []struct {
		name       string
		do         func() error
		wantEvent  events.Action
		wantStatus container.ContainerState
		wantGone   bool
	}{
		{"start", func() error { return f.ContainerStart(ctx, id, container.StartOptions{}) }, events.ActionStart, "running", false},
		{"remove refused while running", func() error {
			if err := f.ContainerRemove(ctx, id, container.RemoveOptions{}); !errdefs.IsConflict(err) {
				return errors.New("removing a running container did not conflict")
			}
			return nil
		}, "", "running", false},
		{"stop", func() error { return f.ContainerStop(ctx, id, container.StopOptions{}) }, events.ActionDie, "exited", false},
		{"remove", func() error { return f.ContainerRemove(ctx, id, container.RemoveOptions{}) }, events.ActionDestroy, "", true},
	}
	if a, got := nextEvent(t, msgs); a != events.ActionCreate || got != id {
		t.Fatalf("event %s %s, want create %s", a, got, id)
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if s.wantEvent != "" {
			if a, got := nextEvent(t, msgs); a != s.wantEvent || got != id {
				t.Errorf("%s: event %s %s, want %s", s.name, a, got, s.wantEvent)
			}
		}
		c, err := f.ContainerInspect(ctx, "c1")
		if s.wantGone {
			if !errdefs.IsNotFound(err) {
				t.Errorf("%s: inspect error %v, want not found", s.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: inspect: %v", s.name, err)
		}
		if c.State.Status != s.wantStatus || c.Config.Labels["k"] != "v" {
			t.Errorf("%s: status %q labels %v, want %q with k=v", s.name, c.State.Status, c.Config.Labels, s.wantStatus)
		}
	}
	if n := f.InspectCount("c1"); n != len(steps) {
		t.Errorf("InspectCount = %d, want %d", n, len(steps))
	}
}

func TestCreateFailures(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("client timed out")
	for _, tc := range []struct {
		name      string
		image     string
		set       func(*State)
		wantErr   func(error) bool
		wantMade  bool
		wantEvent bool
	}{
		{"no such image", "nothere:1", nil, errdefs.IsNotFound, false, false},
		{"any image", "nothere:1", func(s *State) { s.AnyImage = true }, func(err error) bool { return err == nil }, true, true},
		{"fails first", img, func(s *State) { s.CreateErr = boom }, func(err error) bool { return errors.Is(err, boom) }, false, false},
		{"fails after making it", img, func(s *State) { s.CreateErr, s.CreateMakes = boom, true }, func(err error) bool { return errors.Is(err, boom) }, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, msgs := newEngine(t)
			if tc.set != nil {
				f.Do(tc.set)
			}
			_, err := f.ContainerCreate(ctx, &container.Config{Image: tc.image}, nil, nil, nil, "c")
			if !tc.wantErr(err) {
				t.Errorf("error %v", err)
			}
			if got := f.HasContainer("c"); got != tc.wantMade {
				t.Errorf("container made: %v, want %v", got, tc.wantMade)
			}
			if got := len(msgs) > 0; got != tc.wantEvent {
				t.Errorf("event sent: %v, want %v", got, tc.wantEvent)
			}
		})
	}
}

func TestNameConflictAndIDs(t *testing.T) {
	ctx := context.Background()
	f, _ := newEngine(t)
	f.Do(func(s *State) { s.NewID = func(name string) string { return "id-" + name } })
	r, err := f.ContainerCreate(ctx, &container.Config{Image: img}, nil, nil, nil, "x")
	if err != nil || r.ID != "id-x" {
		t.Fatalf("create: %v, %q; want id-x", err, r.ID)
	}
	if _, err := f.ContainerCreate(ctx, &container.Config{Image: img}, nil, nil, nil, "x"); !errdefs.IsConflict(err) {
		t.Errorf("second create of the name: %v, want a conflict", err)
	}
}

func TestList(t *testing.T) {
	f, _ := newEngine(t)
	f.AddContainer(Container{ID: "a1", Status: "running", Labels: map[string]string{"kind": "sandbox"}})
	f.AddContainer(Container{ID: "a2", Status: "exited", Labels: map[string]string{"kind": "container"}})
	f.AddContainer(Container{ID: "b1", Status: "created"})
	for _, tc := range []struct {
		name string
		opts container.ListOptions
		want []string
	}{
		{"running only", container.ListOptions{}, []string{"a1"}},
		{"all", container.ListOptions{All: true}, []string{"a1", "a2", "b1"}},
		{"label", container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "kind"))}, []string{"a1", "a2"}},
		{"label value", container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "kind=container"))}, []string{"a2"}},
		{"id prefix", container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("id", "a"))}, []string{"a1", "a2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := f.ContainerList(context.Background(), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range list {
				got = append(got, c.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("listed %v, want %v", got, tc.want)
			}
		})
	}
}

func TestInspectKnobs(t *testing.T) {
	ctx := context.Background()
	f, _ := newEngine(t)
	f.AddContainer(Container{ID: "c", Status: "running"})
	f.Do(func(s *State) { s.FailInspect["c"] = 1 })
	if _, err := f.ContainerInspect(ctx, "c"); err == nil || errdefs.IsNotFound(err) {
		t.Errorf("failed inspect: %v, want a failure other than not found", err)
	}
	if _, err := f.ContainerInspect(ctx, "c"); err != nil {
		t.Errorf("inspect after the failure: %v", err)
	}
	gate := f.GateInspect("c")
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := f.ContainerInspect(tctx, "c"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("gated inspect: %v, want the deadline", err)
	}
	close(gate)
	if _, err := f.ContainerInspect(ctx, "c"); err != nil {
		t.Errorf("inspect through an open gate: %v", err)
	}
}

func TestEventsEndWhenDown(t *testing.T) {
	f, _ := newEngine(t)
	_, errs := f.Events(context.Background(), events.ListOptions{})
	f.SetDown(true)
	select {
	case err := <-errs:
		if err == nil {
			t.Error("nil error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end")
	}
	if _, err := f.ContainerList(context.Background(), container.ListOptions{}); !errors.Is(err, ErrUnreachable) {
		t.Errorf("list while down: %v", err)
	}
}

func TestLossyEvents(t *testing.T) {
	f, msgs := newEngine(t)
	f.Do(func(s *State) { s.LossyEvents = true })
	for range cap(msgs) + 5 {
		f.Emit(events.ActionStart, "x", nil) // must not block
	}
	if len(msgs) != cap(msgs) {
		t.Errorf("%d events buffered, want %d", len(msgs), cap(msgs))
	}
}

func TestExec(t *testing.T) {
	ctx := context.Background()
	f, _ := newEngine(t)
	f.AddContainer(Container{ID: "c", Status: "running"})
	f.Do(func(s *State) {
		s.OnExec = func(cmd []string) Script {
			if cmd[0] == "sleep" {
				return func(p *Proc) int { <-p.Killed(); return 0 }
			}
			return func(p *Proc) int { p.Stdout("hi\n"); return 3 }
		}
	})
	for _, tc := range []struct {
		cmd      string
		kill     bool
		wantOut  string
		wantCode int
	}{
		{"echo", false, "hi\n", 3},
		{"sleep", true, "", 137},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			x, err := f.ContainerExecCreate(ctx, "c", container.ExecOptions{Cmd: []string{tc.cmd}, AttachStdout: true})
			if err != nil {
				t.Fatal(err)
			}
			hr, err := f.ContainerExecAttach(ctx, x.ID, container.ExecAttachOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer hr.Close()
			if tc.kill {
				if !f.KillPid(f.Exec(x.ID).Pid) {
					t.Fatal("KillPid found no running exec")
				}
			}
			var out, errOut bytes.Buffer
			if _, err := stdcopy.StdCopy(&out, &errOut, hr.Reader); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for f.Exec(x.ID).Running && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			ins, err := f.ContainerExecInspect(ctx, x.ID)
			if err != nil || ins.Running || ins.ExitCode != tc.wantCode || out.String() != tc.wantOut {
				t.Errorf("exec: %+v, %v, output %q; want exit %d, output %q", ins, err, out.String(), tc.wantCode, tc.wantOut)
			}
		})
	}
	if n := f.RunningExecs(); n != 0 {
		t.Errorf("%d execs still running", n)
	}
	if _, err := f.ContainerExecCreate(ctx, "nothere", container.ExecOptions{}); !errdefs.IsNotFound(err) {
		t.Errorf("exec in a missing container: %v, want not found", err)
	}
}
