package dockerservice

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakePluginProc is a stand-in for a CNI plugin a dead netshim left
// running: a process group leader (as pluginExec makes them) with a child
// (its IPAM plugin), carrying CNI_CONTAINERID.
type fakePluginProc struct {
	cmd  *exec.Cmd
	done chan *os.ProcessState
}

func startPlugin(t *testing.T, containerID string) *fakePluginProc {
	t.Helper()
	cmd := exec.Command("sh", "-c", "sleep 300 & wait")
	cmd.Env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID="+containerID)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sh: %v", err)
	}
	p := &fakePluginProc{cmd: cmd, done: make(chan *os.ProcessState, 1)}
	go func() {
		_ = cmd.Wait()
		p.done <- cmd.ProcessState
	}()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return p
}

func (p *fakePluginProc) exited(d time.Duration) (*os.ProcessState, bool) {
	select {
	case st := <-p.done:
		return st, true
	case <-time.After(d):
		return nil, false
	}
}

// liveInGroup counts the processes of a process group that have not
// exited (zombies excluded: PID 1 may never reap an orphan's child).
func liveInGroup(t *testing.T, pgid int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			n++
		}
	}
	return n
}

func TestStartupKillsOrphanedPlugins(t *testing.T) {
	e := newTestEnv(t)
	id := e.run(t, podConfig("web"))
	orphan := startPlugin(t, id)
	other := startPlugin(t, "not-a-sandbox-of-this-netshim")

	e.restart(t)
	st, ok := orphan.exited(10 * time.Second)
	if !ok {
		t.Fatal("the orphaned plugin of a known sandbox still runs after start-up")
	}
	if ws, _ := st.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("orphaned plugin ended with %v, want SIGKILL", st)
	}
	if n := liveInGroup(t, orphan.cmd.Process.Pid); n != 0 {
		t.Errorf("%d process(es) of the orphaned plugin's group still run: its IPAM child was not killed", n)
	}
	if _, ok := other.exited(100 * time.Millisecond); ok {
		t.Error("a plugin of an unknown sandbox was killed")
	}
}
