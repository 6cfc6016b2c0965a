package dockerservice

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
	e.docker.mu.Lock()
	e.docker.extras().onExec = func(cmd []string) fakeExecBehavior {
		switch cmd[0] {
		case "sleep":
			return fakeExecBehavior{stdout: "started\n", hang: true}
		case "fail":
			return fakeExecBehavior{stdout: "out\n", stderr: "err\n", exitCode: 3}
		}
		return fakeExecBehavior{stdout: strings.Join(cmd, " ") + "\n"}
	}
	e.docker.mu.Unlock()
	e.ds.containers.killProcessTree = func(pid int) error {
		e.mu.Lock()
		e.killed = append(e.killed, pid)
		e.mu.Unlock()
		e.docker.killPid(pid)
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
	if n := e.docker.runningExecs(); n != 0 {
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
	if n := e.docker.runningExecs(); n != 0 {
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

// TestKillProcessTree runs a real process tree on the host and kills it.
func TestKillProcessTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 300 & sleep 300 & sh -c 'sleep 300' & wait")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sh: %v", err)
	}
	root := cmd.Process.Pid
	var tree []int
	eventually(t, "the children to start", func() bool {
		kids, err := childrenOf("/proc", map[int]bool{root: true})
		if err != nil {
			t.Fatal(err)
		}
		tree = kids
		return len(kids) == 3
	})
	grandkids, _ := childrenOf("/proc", map[int]bool{tree[0]: true, tree[1]: true, tree[2]: true})
	tree = append(tree, grandkids...)
	if err := killProcessTree("/proc", root); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, p := range tree {
		eventually(t, "pid "+strconv.Itoa(p)+" to die", func() bool { return !alive(p) })
	}
	// Killing what is gone already is fine.
	if err := killProcessTree("/proc", root); err != nil {
		t.Errorf("second kill: %v", err)
	}
}

// alive: the process exists and is not a zombie (orphans are not reaped
// on every machine).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X" && syscall.Kill(pid, 0) == nil
}

func TestParentPid(t *testing.T) {
	for stat, want := range map[string]int{
		"123 (sh) S 45 123 123 0 -1":         45,
		"7 (a) b) (c) R 1 7 7 0 -1":          1,
		"9 (weird name with spaces) S 2 9 9": 2,
	} {
		if got, ok := parentPid([]byte(stat)); !ok || got != want {
			t.Errorf("parentPid(%q) = %d, %v; want %d", stat, got, ok, want)
		}
	}
	if _, ok := parentPid([]byte("garbage")); ok {
		t.Error("parentPid accepted garbage")
	}
}
