package dockerservice

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
)

// execEnv is a pod with a running container whose execs behave as the
// command says, and whose kill function kills fake execs, recording pids.
type execEnv struct {
	*podEnv
	id string

	mu     sync.Mutex
	killed []int
}

func newExecEnv(t *testing.T) *execEnv {
	t.Helper()
	e := &execEnv{podEnv: newPodEnv(t)}
	e.docker.Do(func(s *fakedocker.State) {
		s.OnExec = func(cmd []string) fakedocker.Script {
			switch cmd[0] {
			case "sleep": // runs until killed
				return func(p *fakedocker.Proc) int { p.Stdout("started\n"); <-p.Killed(); return 0 }
			case "fail":
				return func(p *fakedocker.Proc) int { p.Stdout("out\n"); p.Stderr("err\n"); return 3 }
			}
			out := strings.Join(cmd, " ") + "\n"
			return func(p *fakedocker.Proc) int { p.Stdout(out); return 0 }
		}
	})
	e.ds.containers.killExecTree = func(_ string, pid int) error {
		e.mu.Lock()
		e.killed = append(e.killed, pid)
		e.mu.Unlock()
		e.docker.KillPid(pid)
		return nil
	}
	e.id = e.create(t, ctrConfig("exec"))
	e.start(t, e.id)
	return e
}

func (e *execEnv) exec(cmd []string, timeout int64) (*runtimeapi.ExecSyncResponse, error) {
	return e.ds.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: e.id, Cmd: cmd, Timeout: timeout})
}

func TestExecSyncReturnsOutputAndExitCode(t *testing.T) {
	e := newExecEnv(t)
	resp, err := e.exec([]string{"echo", "hello"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Stdout) != "echo hello\n" || len(resp.Stderr) != 0 || resp.ExitCode != 0 {
		t.Errorf("stdout %q stderr %q exit %d", resp.Stdout, resp.Stderr, resp.ExitCode)
	}
	resp, err = e.exec([]string{"fail"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Stdout) != "out\n" || string(resp.Stderr) != "err\n" || resp.ExitCode != 3 {
		t.Errorf("stdout %q stderr %q exit %d", resp.Stdout, resp.Stderr, resp.ExitCode)
	}
	if len(e.killed) != 0 {
		t.Errorf("killed %v for commands that exited", e.killed)
	}
}

func TestExecSyncTimeoutKillsTheProcess(t *testing.T) {
	e := newExecEnv(t)
	start := time.Now()
	_, err := e.exec([]string{"sleep", "100"}, 1)
	took := time.Since(start)
	if codeOf(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if took < time.Second || took > 5*time.Second {
		t.Errorf("ExecSync returned after %s, want about the 1s timeout", took)
	}
	e.mu.Lock()
	killed := append([]int(nil), e.killed...)
	e.mu.Unlock()
	if len(killed) != 1 || killed[0] <= 0 {
		t.Fatalf("killed pids %v, want the exec's", killed)
	}
	if n := e.docker.RunningExecs(); n != 0 {
		t.Errorf("%d execs still running after the timeout", n)
	}
}

func TestExecSyncCallerDeadlineKillsTheProcess(t *testing.T) {
	e := newExecEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := e.ds.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: e.id, Cmd: []string{"sleep", "100"}})
	if codeOf(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if n := e.docker.RunningExecs(); n != 0 {
		t.Errorf("%d execs still running after the caller gave up", n)
	}
}

func TestExecSyncPreconditions(t *testing.T) {
	e := newExecEnv(t)
	if _, err := e.exec(nil, 1); codeOf(err) != codes.InvalidArgument {
		t.Errorf("empty command: %v, want InvalidArgument", err)
	}
	if _, err := e.ds.ExecSync(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: "nope", Cmd: []string{"true"}}); codeOf(err) != codes.NotFound {
		t.Errorf("unknown container: %v, want NotFound", err)
	}
	if _, err := e.ds.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: e.id}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.exec([]string{"true"}, 1); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("stopped container: %v, want FailedPrecondition", err)
	}
}

func TestExecOutputIsBounded(t *testing.T) {
	o := newExecOutput(10)
	for _, w := range []struct {
		s   execStream
		txt string
	}{{o.stdout(), "123456"}, {o.stderr(), "abcdef"}, {o.stdout(), "789"}} {
		if n, err := w.s.Write([]byte(w.txt)); n != len(w.txt) || err != nil {
			t.Fatalf("Write = %d, %v: a full buffer must still accept (and drop) data", n, err)
		}
	}
	out, errOut := o.bytes()
	if string(out) != "123456" || string(errOut) != "abcd" || !o.truncated() {
		t.Errorf("stdout %q stderr %q truncated %v", out, errOut, o.truncated())
	}
}

// strangerExec makes the test's execs report the pid of a real process of
// the test's own, set to lie in otherCgroup as the (fake) procRoot tells:
// what Docker's pid for an exec names once the exec's process has exited
// and the kernel has given its pid away (otherCgroup outside the
// container), or the exec's real process (inside). The real process
// killer is used.
func (e *execEnv) strangerExec(t *testing.T, cgroup string) *exec.Cmd {
	t.Helper()
	cmd := testutil.Sleeper(t)
	pid := cmd.Process.Pid
	procRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(procRoot, strconv.Itoa(pid)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"), []byte(cgroup), 0o644); err != nil {
		t.Fatal(err)
	}
	e.docker.Do(func(s *fakedocker.State) {
		s.ExecPid = func() int { return pid }
	})
	e.ds.containers.procRoot = procRoot
	e.ds.containers.killExecTree = e.ds.containers.killInContainer
	return cmd
}

// A timed-out exec whose pid, by the time of the kill, names a process
// outside the container (the exec's process exited, its pid was reused)
// is not signalled: neither stopped nor killed.
func TestExecSyncTimeoutSparesARecycledPid(t *testing.T) {
	e := newExecEnv(t)
	stranger := e.strangerExec(t, "0::/system.slice/docker-"+strings.Repeat("9", 64)+".scope\n")
	_, err := e.exec([]string{"sleep", "100"}, 1)
	if codeOf(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if s := testutil.ProcState(stranger.Process.Pid); s != "S" && s != "R" {
		t.Errorf("the process that got the exec's pid is in state %q, want it untouched", s)
	}
}

// The same kill, for a pid that is the exec's (in the container's cgroup),
// kills the real process.
func TestExecSyncTimeoutKillsARealProcess(t *testing.T) {
	e := newExecEnv(t)
	proc := e.strangerExec(t, "12:pids:/docker/"+e.id+"\n0::/docker/"+e.id+"\n")
	died := make(chan *os.ProcessState, 1)
	go func() {
		st, _ := proc.Process.Wait()
		// Docker records the exit when the process dies.
		e.docker.KillPid(proc.Process.Pid)
		died <- st
	}()
	_, err := e.exec([]string{"sleep", "100"}, 1)
	if codeOf(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	select {
	case st := <-died:
		if ws, ok := st.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the exec's process ended with %v, want SIGKILL", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exec's process was not killed")
	}
}
