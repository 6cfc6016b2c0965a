package fakedocker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// Proc is the engine's end of a hijacked exec or attach connection: a
// test's Script plays the process on it. Without a TTY its output is
// multiplexed as Docker's is.
type Proc struct {
	conn   *net.UnixConn
	tty    bool
	in     *bufio.Reader
	killed chan struct{}
}

// Stdout writes s to the process's stdout.
func (p *Proc) Stdout(s string) {
	if p.tty {
		_, _ = io.WriteString(p.conn, s)
		return
	}
	_, _ = stdcopy.NewStdWriter(p.conn, stdcopy.Stdout).Write([]byte(s))
}

// Stderr writes s to the process's stderr.
func (p *Proc) Stderr(s string) {
	_, _ = stdcopy.NewStdWriter(p.conn, stdcopy.Stderr).Write([]byte(s))
}

// ReadLine reads one line of the process's stdin.
func (p *Proc) ReadLine() (string, error) { return p.in.ReadString('\n') }

// ReadAll reads the process's stdin to EOF (the client's CloseWrite).
func (p *Proc) ReadAll() (string, error) {
	b, err := io.ReadAll(p.in)
	return string(b), err
}

// Killed is closed when the exec is killed (Engine.KillPid): a script
// that waits on it is a process that runs until killed, whatever its
// client does.
func (p *Proc) Killed() <-chan struct{} { return p.killed }

// Script plays an exec's process and returns its exit code.
type Script func(p *Proc) int

// SetExecScript makes every exec created from now on run s.
func (f *Engine) SetExecScript(s Script) {
	f.Do(func(st *State) { st.OnExec = func([]string) Script { return s } })
}

type execProc struct {
	id, containerID string
	opts            container.ExecOptions
	startOpts       container.ExecAttachOptions
	script          Script
	running         bool
	exitCode        int
	pid             int
	// server is the engine's end of the attach connection, and killed
	// the Proc's; both are closed by a kill.
	server     *net.UnixConn
	killed     chan struct{}
	killedOnce sync.Once
}

// ExecInfo is what the engine knows of an exec, for a test to check how
// it was created and started.
type ExecInfo struct {
	ID, ContainerID string
	Options         container.ExecOptions
	StartOptions    container.ExecAttachOptions
	Running         bool
	ExitCode, Pid   int
}

// Exec returns what the engine knows of an exec; the zero ExecInfo if
// there is none.
func (f *Engine) Exec(id string) ExecInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.execs[id]
	if !ok {
		return ExecInfo{}
	}
	return ExecInfo{ID: e.id, ContainerID: e.containerID, Options: e.opts, StartOptions: e.startOpts, Running: e.running, ExitCode: e.exitCode, Pid: e.pid}
}

func noSuchExec(id string) error {
	return errdefs.ErrNotFound.WithMessage("No such exec instance: " + id)
}

// ContainerExecCreate makes an exec whose process State.OnExec chooses.
func (f *Engine) ContainerExecCreate(_ context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	f.Record("ContainerExecCreate " + id)
	f.mu.Lock()
	defer f.mu.Unlock()
	cid := id
	if !f.s.AnyExecContainer {
		c := f.findLocked(id)
		if c == nil {
			return container.ExecCreateResponse{}, notFound(id)
		}
		if !c.State.Running {
			return container.ExecCreateResponse{}, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is not running", c.ID))
		}
		cid = c.ID
	}
	f.nextExec++
	e := &execProc{id: fmt.Sprintf("exec-%d", f.nextExec), containerID: cid, opts: opts, killed: make(chan struct{})}
	if f.s.OnExec != nil {
		e.script = f.s.OnExec(opts.Cmd)
	}
	f.execs[e.id] = e
	return container.ExecCreateResponse{ID: e.id}, nil
}

// ContainerExecAttach starts an exec: its script runs on the far end of a
// unix socket pair, which, unlike net.Pipe, can be half-closed as Docker's
// hijacked connections can. The exec is reported finished
// State.ExecExitDelay after the script returns.
func (f *Engine) ContainerExecAttach(_ context.Context, execID string, opts container.ExecAttachOptions) (types.HijackedResponse, error) {
	f.Record("ContainerExecAttach " + execID)
	client, server, err := socketPair()
	if err != nil {
		return types.HijackedResponse{}, err
	}
	f.mu.Lock()
	e, ok := f.execs[execID]
	if !ok {
		f.mu.Unlock()
		client.Close()
		server.Close()
		return types.HijackedResponse{}, noSuchExec(execID)
	}
	if f.s.ExecPid != nil {
		e.pid = f.s.ExecPid()
	} else {
		f.nextPid++
		e.pid = f.nextPid
	}
	e.running, e.startOpts, e.server = true, opts, server
	delay, tb, script := f.s.ExecExitDelay, f.s.TB, e.script
	f.mu.Unlock()
	if tb != nil && opts.Tty != e.opts.Tty {
		tb.Errorf("exec %s created with Tty=%v but started with Tty=%v", execID, e.opts.Tty, opts.Tty)
	}
	go func() {
		code := 0
		if script != nil {
			code = script(&Proc{conn: server, tty: opts.Tty, in: bufio.NewReader(server), killed: e.killed})
		}
		server.Close()
		time.Sleep(delay)
		f.mu.Lock()
		if e.running { // not killed meanwhile
			e.running, e.exitCode = false, code
		}
		f.mu.Unlock()
	}()
	return types.NewHijackedResponse(client, ""), nil
}

// ContainerExecInspect reports an exec's state. Like Docker's, the pid
// stays after the exit: a caller must check Running before using it.
func (f *Engine) ContainerExecInspect(_ context.Context, execID string) (container.ExecInspect, error) {
	f.Record("ContainerExecInspect " + execID)
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.execs[execID]
	if !ok {
		return container.ExecInspect{}, noSuchExec(execID)
	}
	return container.ExecInspect{ExecID: e.id, ContainerID: e.containerID, Running: e.running, ExitCode: e.exitCode, Pid: e.pid}, nil
}

// KillPid kills the running exec with that pid, as SIGKILL would (exit
// code 137, its connection closed); it reports whether there was one.
func (f *Engine) KillPid(pid int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.execs {
		if e.pid == pid && e.running {
			e.running, e.exitCode = false, 137
			e.server.Close()
			e.killedOnce.Do(func() { close(e.killed) })
			return true
		}
	}
	return false
}

// RunningExecs counts the execs whose process is alive, to check that
// none was left behind.
func (f *Engine) RunningExecs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.execs {
		if e.running {
			n++
		}
	}
	return n
}

// Resize is one resize the engine accepted.
type Resize struct {
	Target        string // exec or container ID
	Height, Width uint
}

// Resizes returns a copy of the resizes accepted so far.
func (f *Engine) Resizes() []Resize {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Resize(nil), f.s.Resizes...)
}

func (f *Engine) resize(target string, o container.ResizeOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.s.ResizeFailures > 0 {
		f.s.ResizeFailures--
		return errdefs.ErrConflict.WithMessage("exec " + target + " is not running")
	}
	f.s.Resizes = append(f.s.Resizes, Resize{target, o.Height, o.Width})
	return nil
}

// ContainerExecResize resizes an exec's terminal; see State.ResizeFailures.
func (f *Engine) ContainerExecResize(_ context.Context, execID string, o container.ResizeOptions) error {
	f.Record("ContainerExecResize " + execID)
	return f.resize(execID, o)
}

// ContainerResize resizes a container's terminal.
func (f *Engine) ContainerResize(_ context.Context, id string, o container.ResizeOptions) error {
	f.Record("ContainerResize " + id)
	return f.resize(id, o)
}

// ContainerAttach attaches to a container's process, which State.Attach
// plays; the options are recorded in State.AttachOpts.
func (f *Engine) ContainerAttach(_ context.Context, id string, opts container.AttachOptions) (types.HijackedResponse, error) {
	f.Record("ContainerAttach " + id)
	f.mu.Lock()
	run, ok := f.s.Attach[id]
	c := f.findLocked(id)
	tty := c != nil && c.Config != nil && c.Config.Tty
	f.s.AttachOpts = append(f.s.AttachOpts, opts)
	f.mu.Unlock()
	if !ok {
		return types.HijackedResponse{}, notFound(id)
	}
	client, server, err := socketPair()
	if err != nil {
		return types.HijackedResponse{}, err
	}
	go func() {
		run(&Proc{conn: server, tty: tty, in: bufio.NewReader(server), killed: make(chan struct{})})
		server.Close()
	}()
	return types.NewHijackedResponse(client, ""), nil
}

// socketPair returns both ends of a connected unix stream socket.
func socketPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		file := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(file)
		file.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, nil, fmt.Errorf("FileConn: %w", err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	return conns[0], conns[1], nil
}
