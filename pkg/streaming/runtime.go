package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	criserver "k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"

	"github.com/netshim/netshim/pkg/procutil"
)

// NetNSFunc returns the path of a running pod sandbox's network namespace
// (e.g. /proc/<pid>/ns/net of its infra container), or an error when the
// sandbox is unknown or not running.
type NetNSFunc func(ctx context.Context, sandboxID string) (string, error)

const (
	// defaultExitWait bounds how long Exec waits, once the command's
	// streams have closed, for Docker to report the exec as finished.
	// Docker closes the streams when the process's stdio closes and
	// records the exit a moment later, asynchronously.
	defaultExitWait = 5 * time.Second
	// resizeAttempts / resizeFirstDelay / resizeMaxDelay: a resize sent
	// right after the exec was started can reach Docker before the process
	// runs, and Docker refuses it; the attempt is repeated with a delay
	// that starts short (the process usually runs within milliseconds)
	// and grows (about 1 s in all).
	resizeAttempts   = 12
	resizeFirstDelay = 2 * time.Millisecond
	resizeMaxDelay   = 200 * time.Millisecond
	// firstSizeWait bounds how long a tty exec waits for the client's
	// terminal size before creating the process. Clients send it as soon
	// as the session is up; one that sends none costs this much once.
	firstSizeWait = 50 * time.Millisecond
	// abandonedExecWait bounds the kill of an exec whose client went away
	// and the wait for Docker to record its end.
	abandonedExecWait = 10 * time.Second
)

// Runtime runs cri-streaming's exec, attach and port-forward sessions on a
// Docker engine. It implements k8s.io/cri-streaming/pkg/streaming.Runtime.
type Runtime struct {
	docker  DockerAPI
	netnsOf NetNSFunc

	// stop is cancelled by Server.Stop: it ends every open session.
	stop     context.Context
	stopAll  context.CancelFunc
	exitWait time.Duration

	// procRoot is where host processes are looked up ("/proc"; tests
	// point it at a fake).
	procRoot string
}

var _ criserver.Runtime = (*Runtime)(nil)

// NewRuntime returns a Runtime over docker; netnsOf locates pod sandboxes'
// network namespaces for PortForward.
func NewRuntime(docker DockerAPI, netnsOf NetNSFunc) *Runtime {
	stop, stopAll := context.WithCancel(context.Background())
	return &Runtime{
		docker: docker, netnsOf: netnsOf, stop: stop, stopAll: stopAll, exitWait: defaultExitWait,
		procRoot: "/proc",
	}
}

// session derives a session's context: it ends with the request or when
// the server stops.
func (r *Runtime) session(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(r.stop, cancel)
	return ctx, func() {
		unhook()
		cancel()
	}
}

// Exec runs cmd in a running container with the streams the client asked
// for (a nil in/out/errOut means that stream was not requested) and returns
// when the command has exited: nil for exit code 0, a
// k8s.io/utils/exec.CodeExitError carrying the code otherwise. The library
// recognises that type (by type assertion, so it is never wrapped) and
// sends the client a NonZeroExitCode status with the code, which kubectl
// and crictl turn into "command terminated with exit code N".
//
// Exec does not wait for the client to close stdin: an interactive client
// keeps it open, and the session ends when the command does.
//
// When the session ends first, because the client went away (kubectl
// killed, connection dropped: the request's context ends, or its output
// can no longer be delivered), the command is killed with its process
// tree: nobody can reattach to a Docker exec, so it would otherwise run
// on unseen, holding whatever it holds (a shell, a `tail -f`). Not so
// when netshim's streaming server stops: restarting the runtime must not
// touch what runs in pods, so those execs are only detached.
func (r *Runtime) Exec(ctx context.Context, containerID string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	if len(cmd) == 0 {
		return errors.New("no command to execute")
	}
	ctx, cancel := r.session(ctx)
	defer cancel()
	opts := container.ExecOptions{
		Cmd:          cmd,
		Tty:          tty,
		AttachStdin:  in != nil,
		AttachStdout: out != nil,
		AttachStderr: errOut != nil,
	}
	// A terminal should have the client's size from the start: engines
	// from API 1.42 on take it at creation (the client drops it for older
	// ones, where it is applied right after the start instead, racing
	// with the command's first look at it).
	var initial *remotecommand.TerminalSize
	if tty && resize != nil {
		initial = firstSize(ctx, resize)
		if initial != nil {
			opts.ConsoleSize = &[2]uint{uint(initial.Height), uint(initial.Width)}
		}
	}
	created, err := r.docker.ContainerExecCreate(ctx, containerID, opts)
	if err != nil {
		return fmt.Errorf("creating exec in container %s: %w", containerID, err)
	}
	hijacked, err := r.docker.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{Tty: tty, ConsoleSize: opts.ConsoleSize})
	if err != nil {
		return fmt.Errorf("starting exec %s in container %s: %w", created.ID, containerID, err)
	}
	resizeExec := func(ctx context.Context, size remotecommand.TerminalSize) error {
		return r.docker.ContainerExecResize(ctx, created.ID, container.ResizeOptions{Height: uint(size.Height), Width: uint(size.Width)})
	}
	if err := copyStreams(ctx, hijacked, rawStream(hijacked, tty), in, out, errOut, resize, initial, resizeExec); err != nil {
		if r.stop.Err() == nil {
			why := err
			if ctx.Err() != nil {
				why = context.Cause(ctx)
			}
			r.killAbandonedExec(ctx, containerID, created.ID, why)
		}
		return fmt.Errorf("exec %s in container %s: %w", created.ID, containerID, err)
	}
	return r.execResult(ctx, containerID, created.ID)
}

// killAbandonedExec kills the process tree of an exec whose session ended
// before it (why says how), then waits, briefly, for Docker to record its
// end, which releases the exec. Docker has no call to kill an exec: its
// host pid (from ExecInspect) is signalled, through a pidfd and only if
// it is still a process of the container, since Docker records an exit
// late and the pid may have been reused meanwhile. It runs detached from
// ctx, which has usually ended.
func (r *Runtime) killAbandonedExec(ctx context.Context, containerID, execID string, why error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonedExecWait)
	defer cancel()
	insp, err := r.docker.ContainerExecInspect(ctx, execID)
	if err != nil {
		klog.ErrorS(err, "Cannot find the process of an abandoned exec to kill it", "containerID", containerID, "execID", execID)
		return
	}
	if !insp.Running || insp.Pid <= 0 {
		return
	}
	if err := procutil.KillInContainer(r.procRoot, insp.Pid, containerID); err != nil {
		if errors.Is(err, procutil.ErrNotInContainer) {
			klog.InfoS("Not killing an abandoned exec: its process has exited and its pid now names another process", "containerID", containerID, "execID", execID, "pid", insp.Pid)
			return
		}
		klog.ErrorS(err, "Failed to kill an exec whose client went away", "containerID", containerID, "execID", execID, "pid", insp.Pid)
		return
	}
	klog.V(2).InfoS("Killed an exec whose session ended before it", "containerID", containerID, "execID", execID, "pid", insp.Pid, "reason", why)
	delay := 5 * time.Millisecond
	for {
		insp, err := r.docker.ContainerExecInspect(ctx, execID)
		if err == nil && !insp.Running {
			return
		}
		select {
		case <-ctx.Done():
			klog.ErrorS(err, "Killed exec still shows running", "containerID", containerID, "execID", execID, "pid", insp.Pid)
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// execResult waits until Docker reports the exec finished and turns its
// exit code into what the library expects.
func (r *Runtime) execResult(ctx context.Context, containerID, execID string) error {
	deadline := time.Now().Add(r.exitWait)
	delay := 5 * time.Millisecond
	for {
		insp, err := r.docker.ContainerExecInspect(ctx, execID)
		if err != nil {
			return fmt.Errorf("reading the exit code of exec %s in container %s: %w", execID, containerID, err)
		}
		if !insp.Running {
			if insp.ExitCode != 0 {
				return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", insp.ExitCode), Code: insp.ExitCode}
			}
			return nil
		}
		if time.Now().After(deadline) {
			// The command closed its stdio but lives on (it detached):
			// the session is over for the client all the same.
			klog.InfoS("Exec session ended but its process is still running", "containerID", containerID, "execID", execID, "pid", insp.Pid)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// Attach connects the client's streams to a running container's main
// process. Whether Docker multiplexes the output depends on the
// container's own tty setting, which is read first.
func (r *Runtime) Attach(ctx context.Context, containerID string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	ctx, cancel := r.session(ctx)
	defer cancel()
	c, err := r.docker.ContainerInspect(ctx, containerID)
	if err != nil {
		return fmt.Errorf("inspecting container %s: %w", containerID, err)
	}
	if c.State == nil || !c.State.Running {
		return fmt.Errorf("container %s is not running", containerID)
	}
	containerTTY := c.Config != nil && c.Config.Tty
	hijacked, err := r.docker.ContainerAttach(ctx, containerID, container.AttachOptions{
		Stream: true,
		Stdin:  in != nil,
		Stdout: out != nil,
		Stderr: errOut != nil,
	})
	if err != nil {
		return fmt.Errorf("attaching to container %s: %w", containerID, err)
	}
	resizeContainer := func(ctx context.Context, size remotecommand.TerminalSize) error {
		return r.docker.ContainerResize(ctx, containerID, container.ResizeOptions{Height: uint(size.Height), Width: uint(size.Width)})
	}
	if err := copyStreams(ctx, hijacked, rawStream(hijacked, containerTTY), in, out, errOut, resize, nil, resizeContainer); err != nil {
		return fmt.Errorf("attach to container %s: %w", containerID, err)
	}
	return nil
}

// rawStream says whether a hijacked stream carries raw tty bytes rather
// than Docker's multiplexed frames. Engines from API 1.42 on say so in the
// response's media type; older ones (API 1.41) do not, and then the tty
// setting decides.
func rawStream(h types.HijackedResponse, tty bool) bool {
	if mt, ok := h.MediaType(); ok {
		return mt == types.MediaTypeRawStream
	}
	return tty
}

// copyStreams pumps a hijacked Docker connection until the process's
// output ends (Docker closes the connection when the process's stdio is
// closed) or ctx ends:
//   - stdin is copied into the connection, whose write side is closed at
//     the client's EOF so the process sees it; nobody waits for this copy,
//     since a client may hold stdin open after the process is gone;
//   - the output is copied raw (tty) or demultiplexed into stdout/stderr;
//   - terminal sizes (initial, if not nil, then those from resize) are
//     applied with doResize.
func copyStreams(ctx context.Context, h types.HijackedResponse, raw bool, in io.Reader, out, errOut io.Writer, resize <-chan remotecommand.TerminalSize, initial *remotecommand.TerminalSize, doResize func(context.Context, remotecommand.TerminalSize) error) error {
	defer h.Close()
	// Closing the connection is the only way to interrupt its reads.
	unhook := context.AfterFunc(ctx, h.Close)
	defer unhook()

	if in != nil {
		go func() {
			if _, err := io.Copy(h.Conn, in); err == nil {
				_ = h.CloseWrite()
			}
		}()
	}

	resizeCtx, stopResize := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if resize != nil || initial != nil {
		wg.Go(func() { forwardResizes(resizeCtx, resize, initial, doResize) })
	}
	defer func() {
		stopResize()
		wg.Wait()
	}()

	var err error
	if raw {
		_, err = io.Copy(orDiscard(out), h.Reader)
	} else {
		_, err = stdcopy.StdCopy(orDiscard(out), orDiscard(errOut), h.Reader)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("copying output: %w", err)
	}
	return nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// firstSize waits briefly for the client's first terminal size.
func firstSize(ctx context.Context, resize <-chan remotecommand.TerminalSize) *remotecommand.TerminalSize {
	timer := time.NewTimer(firstSizeWait)
	defer timer.Stop()
	select {
	case size, ok := <-resize:
		if ok && (size.Width != 0 || size.Height != 0) {
			return &size
		}
	case <-timer.C:
	case <-ctx.Done():
	}
	return nil
}

// forwardResizes applies initial (if not nil), then each terminal size
// the client sends, until the channel closes (or is nil) and ctx ends. A
// failed resize is retried with a growing delay (see resizeAttempts); a
// newer size replaces one being retried.
func forwardResizes(ctx context.Context, resize <-chan remotecommand.TerminalSize, initial *remotecommand.TerminalSize, doResize func(context.Context, remotecommand.TerminalSize) error) {
	for {
		var size remotecommand.TerminalSize
		if initial != nil {
			size, initial = *initial, nil
		} else {
			var ok bool
			select {
			case <-ctx.Done():
				return
			case size, ok = <-resize:
				if !ok {
					return
				}
			}
		}
		delay := resizeFirstDelay
	retry:
		for attempt := 1; ; attempt++ {
			if size.Width == 0 && size.Height == 0 {
				break
			}
			err := doResize(ctx, size)
			if err == nil || ctx.Err() != nil {
				break
			}
			if attempt == resizeAttempts {
				klog.V(4).InfoS("Failed to resize terminal", "width", size.Width, "height", size.Height, "err", err)
				break
			}
			select {
			case <-ctx.Done():
				return
			case newer, ok := <-resize:
				if !ok {
					return
				}
				size, attempt, delay = newer, 0, resizeFirstDelay
				continue retry
			case <-time.After(delay):
			}
			delay = min(2*delay, resizeMaxDelay)
		}
	}
}
