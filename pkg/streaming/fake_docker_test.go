package streaming

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// proc is the Docker side of a hijacked exec/attach connection: a test
// script plays the process on it.
type proc struct {
	conn *net.UnixConn
	tty  bool
	in   *bufio.Reader
}

func (p *proc) stdout(s string) {
	if p.tty {
		_, _ = io.WriteString(p.conn, s)
		return
	}
	_, _ = stdcopy.NewStdWriter(p.conn, stdcopy.Stdout).Write([]byte(s))
}

func (p *proc) stderr(s string) {
	_, _ = stdcopy.NewStdWriter(p.conn, stdcopy.Stderr).Write([]byte(s))
}

// readLine reads one line of the process's stdin.
func (p *proc) readLine() (string, error) { return p.in.ReadString('\n') }

// readAll reads the process's stdin to EOF (the client's CloseWrite).
func (p *proc) readAll() (string, error) {
	b, err := io.ReadAll(p.in)
	return string(b), err
}

// script plays a process and returns its exit code.
type script func(p *proc) int

type fakeExec struct {
	id        string
	container string
	opts      container.ExecOptions
	startOpts container.ExecAttachOptions
	script    script
	running   bool
	exitCode  int
	pid       int
}

type resizeCall struct {
	target        string // exec or container ID
	height, width uint
}

// fakeDocker implements DockerAPI: execs and attaches run a script on
// the far end of a unix socket pair, like Docker's hijacked connections.
type fakeDocker struct {
	t *testing.T

	mu         sync.Mutex
	execs      map[string]*fakeExec
	containers map[string]container.InspectResponse
	attachRun  map[string]func(*proc) // container ID → what attaching shows
	attachOpts []container.AttachOptions
	resizes    []resizeCall
	// resizeFailures makes that many resize calls fail first, as Docker
	// does for an exec that is not running yet.
	resizeFailures int
	// exitDelay is how long after its connection closes an exec is
	// reported as finished.
	exitDelay time.Duration
	// nextScript is what the next exec created runs.
	nextScript script
	nextID     int
	// nextPid is the host pid the next exec created reports.
	nextPid int
}

var _ DockerAPI = (*fakeDocker)(nil)

func newFakeDocker(t *testing.T) *fakeDocker {
	return &fakeDocker{t: t, execs: map[string]*fakeExec{}, containers: map[string]container.InspectResponse{}, attachRun: map[string]func(*proc){}}
}

func (f *fakeDocker) addContainer(id string, running, tty bool, attach func(*proc)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers[id] = container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: id, State: &container.State{Running: running}},
		Config:            &container.Config{Tty: tty},
	}
	f.attachRun[id] = attach
}

func (f *fakeDocker) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return container.InspectResponse{}, errdefs.ErrNotFound.WithMessage("no such container: " + id)
	}
	return c, nil
}

func (f *fakeDocker) ContainerExecCreate(_ context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	e := &fakeExec{id: fmt.Sprintf("exec-%d", f.nextID), container: id, opts: opts, script: f.nextScript, pid: f.nextPid}
	f.execs[e.id] = e
	return container.ExecCreateResponse{ID: e.id}, nil
}

func (f *fakeDocker) ContainerExecAttach(_ context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error) {
	f.mu.Lock()
	e, ok := f.execs[execID]
	if ok {
		e.running, e.startOpts = true, opts
	}
	delay := f.exitDelay
	f.mu.Unlock()
	if !ok {
		return types.HijackedResponse{}, errdefs.ErrNotFound.WithMessage("no such exec")
	}
	if opts.Tty != e.opts.Tty {
		f.t.Errorf("exec %s created with Tty=%v but started with Tty=%v", execID, e.opts.Tty, opts.Tty)
	}
	client, server, err := socketPair()
	if err != nil {
		return types.HijackedResponse{}, err
	}
	go func() {
		code := e.script(&proc{conn: server, tty: opts.Tty, in: bufio.NewReader(server)})
		server.Close()
		time.Sleep(delay)
		f.mu.Lock()
		e.running, e.exitCode = false, code
		f.mu.Unlock()
	}()
	return types.NewHijackedResponse(client, ""), nil
}

func (f *fakeDocker) ContainerExecInspect(_ context.Context, execID string) (container.ExecInspect, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.execs[execID]
	if !ok {
		return container.ExecInspect{}, errdefs.ErrNotFound.WithMessage("no such exec")
	}
	insp := container.ExecInspect{ExecID: e.id, ContainerID: e.container, Running: e.running, ExitCode: e.exitCode}
	if e.running {
		insp.Pid = e.pid
	}
	return insp, nil
}

func (f *fakeDocker) resize(target string, o container.ResizeOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resizeFailures > 0 {
		f.resizeFailures--
		return errdefs.ErrConflict.WithMessage("exec " + target + " is not running")
	}
	f.resizes = append(f.resizes, resizeCall{target, o.Height, o.Width})
	return nil
}

func (f *fakeDocker) ContainerExecResize(_ context.Context, execID string, o container.ResizeOptions) error {
	return f.resize(execID, o)
}

func (f *fakeDocker) ContainerResize(_ context.Context, id string, o container.ResizeOptions) error {
	return f.resize(id, o)
}

func (f *fakeDocker) ContainerAttach(_ context.Context, id string, opts container.AttachOptions) (types.HijackedResponse, error) {
	f.mu.Lock()
	run, ok := f.attachRun[id]
	c := f.containers[id]
	f.attachOpts = append(f.attachOpts, opts)
	f.mu.Unlock()
	if !ok {
		return types.HijackedResponse{}, errdefs.ErrNotFound.WithMessage("no such container: " + id)
	}
	client, server, err := socketPair()
	if err != nil {
		return types.HijackedResponse{}, err
	}
	go func() {
		run(&proc{conn: server, tty: c.Config.Tty, in: bufio.NewReader(server)})
		server.Close()
	}()
	return types.NewHijackedResponse(client, ""), nil
}

func (f *fakeDocker) resizeCalls() []resizeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]resizeCall(nil), f.resizes...)
}

func (f *fakeDocker) exec(id string) *fakeExec {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := *f.execs[id]
	return &e
}

// socketPair returns both ends of a connected unix stream socket: unlike
// net.Pipe, its ends can be half-closed, as Docker's TCP/unix hijacked
// connections can.
func socketPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("FileConn: %w", err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	return conns[0], conns[1], nil
}
