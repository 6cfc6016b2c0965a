package dockerservice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/procutil"
)

const (
	// maxExecSyncOutput bounds what ExecSync keeps of stdout and stderr
	// together: kubelet refuses CRI messages over 16 MiB, so more would
	// only turn a probe's answer into a transport error. Some room is
	// left for the rest of the message.
	maxExecSyncOutput = 16<<20 - 16<<10

	// execKillTimeout bounds the kill of a timed-out exec and the wait for
	// Docker to see it gone; it runs after the caller's deadline.
	execKillTimeout = 10 * time.Second
	// execExitPollMax is the longest pause between two looks at an exec
	// whose output has ended but whose exit Docker has not recorded yet.
	execExitPollMax = 100 * time.Millisecond
)

// ExecSync runs a command in a running container and returns its output
// and exit code (kubelet's exec probes, `crictl exec -s`). Past the
// timeout the command is killed, with every process it started, and the
// call fails with DeadlineExceeded, which kubelet reads as a probe
// timeout. Docker has no API to kill an exec, so netshim kills it by its
// host pid (it runs as root on the host, in Docker's pid namespace),
// checked first to still be a process of the container (see killExec).
func (ds *DockerService) ExecSync(ctx context.Context, r *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	rec, err := ds.mustFindContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if len(r.GetCmd()) == 0 {
		return nil, crirpc.InvalidArgf("exec in container %s: the command is empty", rec.ID)
	}
	if !rec.Running() {
		return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("exec in container %s: the container is not running", rec.ID))
	}
	timeout := time.Duration(r.GetTimeout()) * time.Second
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	res, err := ds.execSync(ctx, rec.ID, r.GetCmd())
	if err != nil {
		if timeout > 0 && errors.Is(err, context.DeadlineExceeded) {
			return nil, crirpc.WithCode(codes.DeadlineExceeded, fmt.Errorf("command %q in container %s timed out after %s; it was killed", strings.Join(r.GetCmd(), " "), rec.ID, timeout))
		}
		return nil, fmt.Errorf("exec %q in container %s: %w", strings.Join(r.GetCmd(), " "), rec.ID, err)
	}
	return res, nil
}

// execSync runs cmd until it exits or ctx ends; in the latter case the
// process tree is killed before it returns ctx's error.
func (ds *DockerService) execSync(ctx context.Context, id string, cmd []string) (*runtimeapi.ExecSyncResponse, error) {
	created, err := ds.engine.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return nil, fmt.Errorf("creating exec: %w", err)
	}
	execID := created.ID
	// Attaching starts the exec.
	hj, err := ds.engine.ContainerExecAttach(ctx, execID, container.ExecAttachOptions{})
	if err != nil {
		// It may have started before the attach failed (a deadline hit
		// mid-request).
		ds.killExec(ctx, id, execID)
		return nil, fmt.Errorf("starting exec: %w", err)
	}
	out := newExecOutput(maxExecSyncOutput)
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out.stdout(), out.stderr(), hj.Reader)
		copied <- err
	}()
	select {
	case err = <-copied:
		hj.Close()
	case <-ctx.Done():
		// The hijacked connection ignores ctx: closing it ends the copy.
		hj.Close()
		<-copied
		ds.killExec(ctx, id, execID)
		return nil, ctx.Err()
	}
	if err != nil {
		ds.killExec(ctx, id, execID)
		return nil, fmt.Errorf("reading exec output: %w", err)
	}

	// The output ends when the process closes it; Docker records the exit
	// a moment later.
	exit, err := ds.waitExec(ctx, execID)
	if err != nil {
		if ctx.Err() != nil {
			ds.killExec(ctx, id, execID)
			return nil, ctx.Err()
		}
		return nil, err
	}
	if out.truncated() {
		klog.FromContext(ctx).V(2).Info("ExecSync output truncated", "containerID", id, "cmd", cmd, "limit", maxExecSyncOutput)
	}
	stdout, stderr := out.bytes()
	return &runtimeapi.ExecSyncResponse{Stdout: stdout, Stderr: stderr, ExitCode: int32(exit)}, nil
}

// waitExec polls the exec until Docker has its exit code.
func (ds *DockerService) waitExec(ctx context.Context, execID string) (int, error) {
	delay := time.Millisecond
	for {
		ins, err := ds.engine.ContainerExecInspect(ctx, execID)
		if err != nil {
			return 0, fmt.Errorf("inspecting exec: %w", err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, execExitPollMax)
	}
}

// killExec kills an exec's process tree and waits (briefly) until Docker
// sees it gone, so that a caller looking right after finds nothing left.
// It runs detached from ctx, which has usually ended.
//
// The pid comes from Docker, which records an exec's exit a moment after
// the fact: the process may be gone and its pid given to another process
// by the time it is signalled. The kill goes through a pidfd, and only
// after the pinned process was seen inside the container's cgroup
// (procutil.KillInContainer); a pid that left the container is left
// alone.
func (ds *DockerService) killExec(ctx context.Context, containerID, execID string) {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(backgroundCtx(ctx), execKillTimeout)
	defer cancel()
	ins, err := ds.engine.ContainerExecInspect(ctx, execID)
	if err != nil {
		logger.Error(err, "Cannot find the process of a timed-out exec to kill it", "execID", execID)
		return
	}
	if !ins.Running || ins.Pid <= 0 {
		return
	}
	if err := ds.containers.killExecTree(containerID, ins.Pid); err != nil {
		if errors.Is(err, procutil.ErrNotInContainer) {
			logger.Info("Not killing a timed-out exec: its process has exited and its pid now names another process", "execID", execID, "containerID", containerID, "pid", ins.Pid)
			return
		}
		logger.Error(err, "Failed to kill a timed-out exec", "execID", execID, "containerID", containerID, "pid", ins.Pid)
		return
	}
	logger.V(2).Info("Killed timed-out exec", "execID", execID, "containerID", containerID, "pid", ins.Pid)
	if _, err := ds.waitExec(ctx, execID); err != nil {
		logger.Error(err, "Killed exec still shows running", "execID", execID, "pid", ins.Pid)
	}
}

// execOutput collects an exec's two streams under one byte budget; what
// is over it is read and dropped, so the process is never blocked on a
// full pipe.
type execOutput struct {
	mu       sync.Mutex
	left     int
	dropped  bool
	out, err bytes.Buffer
}

func newExecOutput(limit int) *execOutput { return &execOutput{left: limit} }

type execStream struct {
	o   *execOutput
	buf *bytes.Buffer
}

func (s execStream) Write(p []byte) (int, error) {
	s.o.mu.Lock()
	defer s.o.mu.Unlock()
	n := min(len(p), s.o.left)
	s.buf.Write(p[:n])
	s.o.left -= n
	if n < len(p) {
		s.o.dropped = true
	}
	return len(p), nil
}

func (o *execOutput) stdout() execStream { return execStream{o, &o.out} }
func (o *execOutput) stderr() execStream { return execStream{o, &o.err} }

func (o *execOutput) truncated() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped
}

func (o *execOutput) bytes() (stdout, stderr []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out.Bytes(), o.err.Bytes()
}
