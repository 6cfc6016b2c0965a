package dockerservice

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/netshim/netshim/internal/testutil"
)

// The container half of fakeDocker: execs, logs, resource updates and the
// API version. Its state lives in fakeDocker.cx, guarded by fakeDocker.mu.

// fakeExecBehavior is what a fake exec does: print, then exit with a code,
// or hang until killed.
type fakeExecBehavior struct {
	stdout, stderr string
	exitCode       int
	hang           bool
}

type fakeExec struct {
	id, containerID string
	cmd             []string
	pid             int
	started         bool
	running         bool
	exitCode        int
	behavior        fakeExecBehavior
	// server is the fake engine's end of the attach connection.
	server net.Conn
}

// fakeLogEntry is one message of a container's Docker log.
type fakeLogEntry struct {
	stderr bool
	ts     time.Time
	text   string
}

type fakeContainerExtras struct {
	// apiVersion is the engine's API version, which Ping reports;
	// clientVersion is the client's once negotiated ("" before).
	apiVersion, clientVersion string
	// onExec decides what an exec does; nil prints nothing and exits 0.
	onExec    func(cmd []string) fakeExecBehavior
	execs     map[string]*fakeExec
	nextExec  int
	logs      map[string][]fakeLogEntry
	updateErr error

	// execPid, if set, gives the host pid an exec reports (a real
	// process's, for tests that kill for real); else pids are made up.
	execPid func() int

	// barriers counts quiesce's barrier events; barriersSeen are those
	// whose inspect the events loop asked for.
	barriers     int
	barriersSeen map[string]bool
}

// extras returns the container half, creating it. Called with f.mu held.
func (f *fakeDocker) extras() *fakeContainerExtras {
	if f.cx == nil {
		f.cx = &fakeContainerExtras{apiVersion: "1.41", execs: map[string]*fakeExec{}, logs: map[string][]fakeLogEntry{}}
	}
	return f.cx
}

// fakeClientMaxAPI is the client's newest API version, which it says
// until negotiated, as the real client does.
const fakeClientMaxAPI = "1.51"

func (f *fakeDocker) ClientVersion() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v := f.extras().clientVersion; v != "" {
		return v
	}
	return fakeClientMaxAPI
}

// NegotiateAPIVersionPing lowers the client's version to the engine's.
func (f *fakeDocker) NegotiateAPIVersionPing(p types.Ping) {
	f.record("NegotiateAPIVersionPing " + p.APIVersion)
	f.mu.Lock()
	defer f.mu.Unlock()
	// Like the real client: only ever lowered.
	v := f.extras().clientVersion
	if v == "" {
		v = fakeClientMaxAPI
	}
	if p.APIVersion != "" && versions.LessThan(p.APIVersion, v) {
		v = p.APIVersion
	}
	f.extras().clientVersion = v
}

func (f *fakeDocker) ContainerUpdate(_ context.Context, id string, u container.UpdateConfig) (container.UpdateResponse, error) {
	f.record("ContainerUpdate " + id)
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.find(id)
	if c == nil {
		return container.UpdateResponse{}, notFound(id)
	}
	if err := f.extras().updateErr; err != nil {
		return container.UpdateResponse{}, err
	}
	// Docker leaves a zero field unchanged.
	r := &c.HostConfig.Resources
	set := func(dst *int64, v int64) {
		if v != 0 {
			*dst = v
		}
	}
	set(&r.CPUPeriod, u.CPUPeriod)
	set(&r.CPUQuota, u.CPUQuota)
	set(&r.CPUShares, u.CPUShares)
	set(&r.Memory, u.Memory)
	set(&r.MemorySwap, u.MemorySwap)
	if u.CpusetCpus != "" {
		r.CpusetCpus = u.CpusetCpus
	}
	if u.CpusetMems != "" {
		r.CpusetMems = u.CpusetMems
	}
	return container.UpdateResponse{}, nil
}

func (f *fakeDocker) ContainerExecCreate(_ context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	f.record("ContainerExecCreate " + id)
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.find(id)
	if c == nil {
		return container.ExecCreateResponse{}, notFound(id)
	}
	if !c.State.Running {
		return container.ExecCreateResponse{}, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is not running", c.ID))
	}
	x := f.extras()
	x.nextExec++
	e := &fakeExec{id: fmt.Sprintf("exec-%d", x.nextExec), containerID: c.ID, cmd: opts.Cmd}
	if x.onExec != nil {
		e.behavior = x.onExec(opts.Cmd)
	}
	x.execs[e.id] = e
	return container.ExecCreateResponse{ID: e.id}, nil
}

func (f *fakeDocker) ContainerExecAttach(_ context.Context, execID string, _ container.ExecAttachOptions) (types.HijackedResponse, error) {
	f.record("ContainerExecAttach " + execID)
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.extras().execs[execID]
	if !ok {
		return types.HijackedResponse{}, errdefs.ErrNotFound.WithMessage("No such exec instance: " + execID)
	}
	client, server := net.Pipe()
	f.nextPid++
	e.pid, e.started, e.running, e.server = f.nextPid, true, true, server
	if x := f.extras(); x.execPid != nil {
		e.pid = x.execPid()
	}
	b := e.behavior
	go func() {
		if b.stdout != "" {
			_, _ = stdcopy.NewStdWriter(server, stdcopy.Stdout).Write([]byte(b.stdout))
		}
		if b.stderr != "" {
			_, _ = stdcopy.NewStdWriter(server, stdcopy.Stderr).Write([]byte(b.stderr))
		}
		if b.hang {
			return // until killed (see killPid) or the client hangs up
		}
		server.Close()
		// Docker records the exit a moment after the output ends.
		time.Sleep(20 * time.Millisecond)
		f.mu.Lock()
		if e.running {
			e.running, e.exitCode = false, b.exitCode
		}
		f.mu.Unlock()
	}()
	return types.HijackedResponse{Conn: client, Reader: bufio.NewReader(client)}, nil
}

func (f *fakeDocker) ContainerExecInspect(_ context.Context, execID string) (container.ExecInspect, error) {
	f.record("ContainerExecInspect " + execID)
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.extras().execs[execID]
	if !ok {
		return container.ExecInspect{}, errdefs.ErrNotFound.WithMessage("No such exec instance: " + execID)
	}
	return container.ExecInspect{ExecID: e.id, ContainerID: e.containerID, Running: e.running, ExitCode: e.exitCode, Pid: e.pid}, nil
}

// killPid kills the exec with that pid, as SIGKILL would; it reports
// whether there was one running.
func (f *fakeDocker) killPid(pid int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.extras().execs {
		if e.pid == pid && e.running {
			e.running, e.exitCode = false, 137
			e.server.Close()
			return true
		}
	}
	return false
}

// runningExecs counts execs whose process is alive.
func (f *fakeDocker) runningExecs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.extras().execs {
		if e.running {
			n++
		}
	}
	return n
}

// addLog appends a message to a container's Docker log.
func (f *fakeDocker) addLog(id string, stderr bool, text string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.extras()
	x.logs[id] = append(x.logs[id], fakeLogEntry{stderr: stderr, ts: time.Now().UTC(), text: text})
}

// ContainerLogs streams the container's log with timestamps, multiplexed
// (the fake has no TTY streams). With Follow it keeps the stream open
// while the container runs, sending what is added meanwhile.
func (f *fakeDocker) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error) {
	f.record("ContainerLogs " + id)
	f.mu.Lock()
	c := f.find(id)
	f.mu.Unlock()
	if c == nil {
		return nil, notFound(id)
	}
	pr, pw := io.Pipe()
	go func() {
		sent := 0
		for {
			f.mu.Lock()
			entries := append([]fakeLogEntry(nil), f.extras().logs[c.ID][sent:]...)
			running := c.State.Running
			f.mu.Unlock()
			for _, e := range entries {
				stream := stdcopy.Stdout
				if e.stderr {
					stream = stdcopy.Stderr
				}
				line := e.ts.Format("2006-01-02T15:04:05.000000000Z07:00") + " " + e.text
				if _, err := stdcopy.NewStdWriter(pw, stream).Write([]byte(line)); err != nil {
					return
				}
			}
			sent += len(entries)
			if !opts.Follow || !running || ctx.Err() != nil {
				pw.Close()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return pr, nil
}

// exitBehindBack makes a running container exit as its process would:
// optionally an OOM kill first, then death with an exit code. The events
// carry what Docker's do.
func (f *fakeDocker) exitBehindBack(id string, code int, oom bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[id]
	if oom {
		c.State.OOMKilled = true
		f.emit(events.ActionOOM, id, nil)
	}
	c.State.Status, c.State.Running, c.State.Pid, c.State.ExitCode = "exited", false, 0, code
	c.State.FinishedAt = time.Now().UTC().Format(time.RFC3339Nano)
	f.emit(events.ActionDie, id, map[string]string{"exitCode": fmt.Sprint(code)})
}

// callLog returns a copy of the calls made so far.
func (f *fakeDocker) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// quiesceIDPrefix names the containers of quiesce's barrier events: none
// exists, and the fake does not log their inspects.
const quiesceIDPrefix = "quiesce-barrier-"

// quiesce waits until the service has made the Docker calls that the events
// the fake emitted so far ask for, so that a test can count the calls of
// one RPC alone. The events loop applies events in order and asks for an
// inspect of a container it does not know: once that inspect comes for a
// barrier event emitted last, every earlier event is applied; once the
// index has no inspect pending, the inspects they asked for are done.
func (e *testEnv) quiesce(t testing.TB) {
	t.Helper()
	f := e.docker
	f.mu.Lock()
	x := f.extras()
	x.barriers++
	id := fmt.Sprintf("%s%d", quiesceIDPrefix, x.barriers)
	f.emit(events.ActionStart, id, nil)
	f.mu.Unlock()
	testutil.Eventually(t, "the events loop to reach "+id, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.extras().barriersSeen[id]
	})
	testutil.Eventually(t, "the inspects the events asked for", func() bool { return e.ds.index.Inspecting() == 0 })
}

// sawBarrier notes the inspect of a barrier event's container; false for
// any other container.
func (f *fakeDocker) sawBarrier(id string) bool {
	if !strings.HasPrefix(id, quiesceIDPrefix) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.extras()
	if x.barriersSeen == nil {
		x.barriersSeen = map[string]bool{}
	}
	x.barriersSeen[id] = true
	return true
}
