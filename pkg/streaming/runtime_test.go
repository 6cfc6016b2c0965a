package streaming

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/netshim/netshim/internal/fakedocker"
)

// buf is a goroutine-safe io.WriteCloser.
type buf struct {
	mu     sync.Mutex
	b      bytes.Buffer
	closed bool
}

func (b *buf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buf) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

func (b *buf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func noNetNS(context.Context, string) (string, error) { return "", errors.New("no pods here") }

func newTestRuntime(t *testing.T) (*Runtime, *fakedocker.Engine) {
	docker := newFakeDocker(t)
	r := NewRuntime(docker, noNetNS)
	t.Cleanup(r.stopAll)
	return r, docker
}

// runWithin runs f and fails the test if it takes longer than d.
func runWithin(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
		return nil
	}
}

func TestExecExitCodeReachesTheLibraryAsExitError(t *testing.T) {
	for _, code := range []int{0, 1, 3, 127} {
		r, docker := newTestRuntime(t)
		docker.SetExecScript(func(p *fakedocker.Proc) int {
			p.Stdout("out\n")
			p.Stderr("err\n")
			return code
		})
		var out, errOut buf
		err := runWithin(t, 5*time.Second, "Exec", func() error {
			return r.Exec(context.Background(), "c1", []string{"sh", "-c", "exit"}, nil, &out, &errOut, false, nil)
		})
		if out.String() != "out\n" || errOut.String() != "err\n" {
			t.Errorf("exit %d: stdout %q stderr %q, want the demultiplexed streams %q and %q", code, out.String(), errOut.String(), "out\n", "err\n")
		}
		if code == 0 {
			if err != nil {
				t.Errorf("exit 0: Exec returned %v, want nil", err)
			}
			continue
		}
		// cri-streaming tests the error with a type assertion (not
		// errors.As): it must be the ExitError itself, unwrapped.
		exitErr, ok := err.(utilexec.ExitError)
		if !ok {
			t.Fatalf("exit %d: Exec returned %T %v, want a k8s.io/utils/exec.ExitError", code, err, err)
		}
		if !exitErr.Exited() || exitErr.ExitStatus() != code {
			t.Errorf("exit %d: ExitError exited=%v status=%d", code, exitErr.Exited(), exitErr.ExitStatus())
		}
		e := docker.Exec("exec-1")
		want := container.ExecOptions{Cmd: []string{"sh", "-c", "exit"}, AttachStdout: true, AttachStderr: true}
		if !slices.Equal(e.Options.Cmd, want.Cmd) || e.Options.Tty || e.Options.AttachStdin || !e.Options.AttachStdout || !e.Options.AttachStderr || e.ContainerID != "c1" {
			t.Errorf("exec created in %q with %+v, want in c1 with %+v", e.ContainerID, e.Options, want)
		}
	}
}

func TestExecWaitsForDockerToRecordTheExit(t *testing.T) {
	r, docker := newTestRuntime(t)
	// Docker closes the streams first and records the exit a little
	// later: Exec must not report a still-"running" exec as exit 0.
	docker.Do(func(s *fakedocker.State) { s.ExecExitDelay = 150 * time.Millisecond })
	docker.SetExecScript(func(*fakedocker.Proc) int { return 42 })
	var out buf
	err := runWithin(t, 5*time.Second, "Exec", func() error {
		return r.Exec(context.Background(), "c1", []string{"false"}, nil, &out, nil, false, nil)
	})
	if exitErr, ok := err.(utilexec.ExitError); !ok || exitErr.ExitStatus() != 42 {
		t.Fatalf("Exec returned %v, want exit code 42", err)
	}
}

func TestExecStreamsRequestedOnly(t *testing.T) {
	r, docker := newTestRuntime(t)
	docker.SetExecScript(func(p *fakedocker.Proc) int {
		line, _ := p.ReadLine()
		p.Stdout("got " + line)
		return 0
	})
	in := strings.NewReader("hello\n")
	var out buf
	if err := r.Exec(context.Background(), "c1", []string{"cat"}, in, &out, nil, false, nil); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if got := out.String(); got != "got hello\n" {
		t.Errorf("stdout %q, want %q", got, "got hello\n")
	}
	e := docker.Exec("exec-1")
	if !e.Options.AttachStdin || !e.Options.AttachStdout || e.Options.AttachStderr {
		t.Errorf("exec created with stdin=%v stdout=%v stderr=%v, want true true false", e.Options.AttachStdin, e.Options.AttachStdout, e.Options.AttachStderr)
	}
}

func TestExecForwardsStdinEOF(t *testing.T) {
	r, docker := newTestRuntime(t)
	docker.SetExecScript(func(p *fakedocker.Proc) int {
		all, err := p.ReadAll() // returns only at the client's EOF
		if err != nil {
			return 99
		}
		p.Stdout(strings.ToUpper(all))
		return 0
	})
	var out buf
	err := runWithin(t, 5*time.Second, "Exec", func() error {
		return r.Exec(context.Background(), "c1", []string{"tr"}, strings.NewReader("a\nb\n"), &out, nil, false, nil)
	})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if out.String() != "A\nB\n" {
		t.Errorf("stdout %q, want %q", out.String(), "A\nB\n")
	}
}

func TestExecTTYIsRawResizesAndDoesNotWaitForStdin(t *testing.T) {
	r, docker := newTestRuntime(t)
	// The first resize reaches Docker before the exec runs and is
	// refused: it must be retried, not lost.
	docker.Do(func(s *fakedocker.State) { s.ResizeFailures = 2 })
	resized := make(chan struct{})
	docker.SetExecScript(func(p *fakedocker.Proc) int {
		line, _ := p.ReadLine()
		p.Stdout("tty: " + line)
		// Exit only once both sizes have been applied.
		select {
		case <-resized:
		case <-time.After(5 * time.Second):
		}
		return 0
	})
	// The client keeps stdin open after the command is done, as an
	// interactive kubectl/crictl does.
	inR, inW := io.Pipe()
	defer inW.Close()
	go func() { _, _ = io.WriteString(inW, "ls\n") }()

	sizes := make(chan remotecommand.TerminalSize)
	go func() {
		waitResizes := func(n int) {
			for range 500 {
				if len(docker.Resizes()) == n {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		sizes <- remotecommand.TerminalSize{Width: 80, Height: 24}
		waitResizes(1)
		sizes <- remotecommand.TerminalSize{Width: 120, Height: 40}
		waitResizes(2)
		close(resized)
	}()
	var out buf
	err := runWithin(t, 10*time.Second, "Exec with an open stdin", func() error {
		return r.Exec(context.Background(), "c1", []string{"sh"}, inR, &out, nil, true, sizes)
	})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if got := out.String(); got != "tty: ls\n" {
		t.Errorf("stdout %q, want the raw tty bytes %q", got, "tty: ls\n")
	}
	want := []fakedocker.Resize{{Target: "exec-1", Height: 24, Width: 80}, {Target: "exec-1", Height: 40, Width: 120}}
	if got := docker.Resizes(); !slices.Equal(got, want) {
		t.Errorf("resizes %+v, want %+v", got, want)
	}
	e := docker.Exec("exec-1")
	if !e.Options.Tty || !e.Options.AttachStdin || !e.Options.AttachStdout || e.Options.AttachStderr {
		t.Errorf("exec created with %+v, want Tty, stdin and stdout", e.Options)
	}
	// The size known before the start is given at creation too (used by
	// engines from API 1.42 on).
	if e.Options.ConsoleSize == nil || *e.Options.ConsoleSize != [2]uint{24, 80} || e.StartOptions.ConsoleSize == nil || *e.StartOptions.ConsoleSize != [2]uint{24, 80} {
		t.Errorf("console size at creation %v, at start %v; want [24 80] (height, width)", e.Options.ConsoleSize, e.StartOptions.ConsoleSize)
	}
}

func TestExecTTYWithoutASizeStartsAnyway(t *testing.T) {
	r, docker := newTestRuntime(t)
	docker.SetExecScript(func(p *fakedocker.Proc) int { p.Stdout("hello\r\n"); return 0 })
	sizes := make(chan remotecommand.TerminalSize) // the client never sends one
	var out buf
	err := runWithin(t, 5*time.Second, "Exec", func() error {
		return r.Exec(context.Background(), "c1", []string{"echo", "hello"}, nil, &out, nil, true, sizes)
	})
	if err != nil || out.String() != "hello\r\n" {
		t.Fatalf("Exec: %v, stdout %q", err, out.String())
	}
	if e := docker.Exec("exec-1"); e.Options.ConsoleSize != nil {
		t.Errorf("console size %v with no size from the client", *e.Options.ConsoleSize)
	}
}

func TestExecEndsWhenTheServerStops(t *testing.T) {
	r, docker := newTestRuntime(t)
	started := make(chan struct{})
	docker.SetExecScript(func(p *fakedocker.Proc) int {
		close(started)
		_, _ = p.ReadAll() // until the connection is closed
		return 0
	})
	inR, inW := io.Pipe()
	defer inW.Close()
	errc := make(chan error, 1)
	go func() { errc <- r.Exec(context.Background(), "c1", []string{"sleep"}, inR, &buf{}, nil, false, nil) }()
	<-started
	r.stopAll()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Exec after stop returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Exec did not end when the server stopped")
	}
}

func TestExecWithoutCommandFails(t *testing.T) {
	r, _ := newTestRuntime(t)
	err := r.Exec(context.Background(), "c1", nil, nil, &buf{}, nil, false, nil)
	if err == nil {
		t.Fatal("Exec with no command succeeded")
	}
	if _, ok := err.(utilexec.ExitError); ok {
		t.Errorf("a failure to run is reported as an exit code: %v", err)
	}
}

func TestAttachDemultiplexesByTheContainersTTY(t *testing.T) {
	r, docker := newTestRuntime(t)
	docker.AddContainer(fakedocker.Container{ID: "plain", Status: "running", Attach: func(p *fakedocker.Proc) {
		line, _ := p.ReadLine()
		p.Stdout("echo: " + line)
		p.Stderr("warn\n")
		_, _ = p.ReadAll() // stdin_once: exits at the client's EOF
	}})
	var out, errOut buf
	err := runWithin(t, 5*time.Second, "Attach", func() error {
		return r.Attach(context.Background(), "plain", strings.NewReader("hi\n"), &out, &errOut, false, nil)
	})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if out.String() != "echo: hi\n" || errOut.String() != "warn\n" {
		t.Errorf("stdout %q stderr %q, want %q and %q", out.String(), errOut.String(), "echo: hi\n", "warn\n")
	}
	var opts container.AttachOptions
	docker.Do(func(s *fakedocker.State) { opts = s.AttachOpts[0] })
	if opts != (container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true}) {
		t.Errorf("attached with %+v", opts)
	}
}

func TestAttachTTYIsRawAndResizesTheContainer(t *testing.T) {
	r, docker := newTestRuntime(t)
	resized := make(chan struct{})
	docker.AddContainer(fakedocker.Container{ID: "term", Status: "running", Tty: true, Attach: func(p *fakedocker.Proc) {
		p.Stdout("$ ")
		select {
		case <-resized:
		case <-time.After(5 * time.Second):
		}
	}})
	sizes := make(chan remotecommand.TerminalSize, 1)
	sizes <- remotecommand.TerminalSize{Width: 100, Height: 50}
	go func() {
		for range 200 {
			if len(docker.Resizes()) == 1 {
				close(resized)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var out buf
	if err := r.Attach(context.Background(), "term", nil, &out, nil, true, sizes); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if out.String() != "$ " {
		t.Errorf("stdout %q, want %q", out.String(), "$ ")
	}
	if got, want := docker.Resizes(), []fakedocker.Resize{{Target: "term", Height: 50, Width: 100}}; !slices.Equal(got, want) {
		t.Errorf("resizes %+v, want %+v", got, want)
	}
}

func TestAttachRefusesAStoppedContainer(t *testing.T) {
	r, docker := newTestRuntime(t)
	docker.AddContainer(fakedocker.Container{ID: "dead", Status: "exited", Attach: func(*fakedocker.Proc) {}})
	err := r.Attach(context.Background(), "dead", nil, &buf{}, nil, false, nil)
	if err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("Attach to a stopped container returned %v, want a not-running error", err)
	}
	if err := r.Attach(context.Background(), "missing", nil, &buf{}, nil, false, nil); err == nil {
		t.Fatal("Attach to a missing container succeeded")
	}
}

func TestResizeRetryGivesWayToANewerSize(t *testing.T) {
	sizes := make(chan remotecommand.TerminalSize)
	var mu sync.Mutex
	var applied []remotecommand.TerminalSize
	doResize := func(_ context.Context, s remotecommand.TerminalSize) error {
		if s.Width == 1 {
			return errors.New("not running yet") // never succeeds
		}
		mu.Lock()
		applied = append(applied, s)
		mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	go func() {
		forwardResizes(context.Background(), sizes, nil, doResize)
		close(done)
	}()
	sizes <- remotecommand.TerminalSize{Width: 1, Height: 1}
	sizes <- remotecommand.TerminalSize{Width: 2, Height: 2} // taken while the first is retried
	sizes <- remotecommand.TerminalSize{}                    // 0x0 is ignored
	close(sizes)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("forwardResizes did not return when the channel closed")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []remotecommand.TerminalSize{{Width: 2, Height: 2}}; !slices.Equal(applied, want) {
		t.Errorf("applied %v, want %v", applied, want)
	}
}

// execProcess is a real host process standing in for an exec's: the fake
// exec reports its pid and, like Docker's, runs until that process dies,
// whatever happens to the attach connection.
type execProcess struct {
	cmd *exec.Cmd
	// ended receives how the process ended.
	ended   chan *os.ProcessState
	started chan struct{}
	dead    chan struct{}
}

// realExec makes the next exec of docker run as a real process that the
// fake procRoot of r places in the cgroup given.
func realExec(t *testing.T, r *Runtime, docker *fakedocker.Engine, cgroup string) *execProcess {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting sleep: %v", err)
	}
	dead := make(chan struct{})
	p := &execProcess{cmd: cmd, ended: make(chan *os.ProcessState, 1), started: make(chan struct{}), dead: dead}
	go func() {
		st, _ := cmd.Process.Wait()
		close(dead)
		p.ended <- st
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-dead
	})
	pid := cmd.Process.Pid
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, strconv.Itoa(pid)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, strconv.Itoa(pid), "cgroup"), []byte(cgroup), 0o644); err != nil {
		t.Fatal(err)
	}
	r.procRoot = root
	docker.Do(func(s *fakedocker.State) { s.ExecPid = func() int { return pid } })
	docker.SetExecScript(func(*fakedocker.Proc) int {
		close(p.started)
		<-dead
		return 137
	})
	return p
}

// killed says whether the process died of SIGKILL within a bound; false
// if it is still running after a short look.
func (p *execProcess) killed(t *testing.T, within time.Duration) bool {
	t.Helper()
	select {
	case st := <-p.ended:
		ws, ok := st.Sys().(syscall.WaitStatus)
		if !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the exec's process ended with %v, want SIGKILL", st)
		}
		return true
	case <-time.After(within):
		return false
	}
}

// failingWriter is a client's output stream once the client is gone.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("stream reset by peer") }
func (failingWriter) Close() error              { return nil }

// An exec whose session ends before its command does is killed, with its
// process tree, unless the server is stopping, or unless its pid no longer
// names a process of the container.
func TestExecKilledWhenTheClientGoesAway(t *testing.T) {
	const c1Cgroup = "12:pids:/docker/c1\n0::/system.slice/docker-c1.scope\n"
	for _, tc := range []struct {
		name   string
		cgroup string
		// end ends the session: cancel is the request context's, out
		// what the command's output is written to.
		end        func(r *Runtime, cancel context.CancelCauseFunc)
		out        io.WriteCloser
		wantKilled bool
	}{
		{"the client's connection ends", c1Cgroup, func(_ *Runtime, cancel context.CancelCauseFunc) { cancel(errClientGone) }, &buf{}, true},
		{"the client's stream fails", c1Cgroup, nil, failingWriter{}, true},
		{"the server stops", c1Cgroup, func(r *Runtime, _ context.CancelCauseFunc) { r.stopAll() }, &buf{}, false},
		{"the pid was reused outside the container", "0::/system.slice/docker-c2.scope\n", func(_ *Runtime, cancel context.CancelCauseFunc) { cancel(errClientGone) }, &buf{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, docker := newTestRuntime(t)
			p := realExec(t, r, docker, tc.cgroup)
			if tc.end == nil {
				// The command writes; the write to the client fails.
				docker.SetExecScript(func(pr *fakedocker.Proc) int {
					close(p.started)
					pr.Stdout("hello\n")
					<-p.dead
					return 137
				})
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			errc := make(chan error, 1)
			go func() { errc <- r.Exec(ctx, "c1", []string{"sleep", "300"}, nil, tc.out, nil, false, nil) }()
			select {
			case <-p.started:
			case <-time.After(10 * time.Second):
				t.Fatal("the exec did not start")
			}
			if tc.end != nil {
				tc.end(r, cancel)
			}
			select {
			case err := <-errc:
				if err == nil {
					t.Error("Exec returned nil for a session cut short")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Exec did not return when its session ended")
			}
			// Exec kills before it returns: a short look suffices
			// for a process that must live.
			wait := 100 * time.Millisecond
			if tc.wantKilled {
				wait = 10 * time.Second
			}
			if got := p.killed(t, wait); got != tc.wantKilled {
				t.Errorf("exec's process killed: %v, want %v", got, tc.wantKilled)
			}
		})
	}
}
