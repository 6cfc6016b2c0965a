package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A fake shim (a process named containerd-shim-runc-v2 whose arguments
// name the engine's directory) and its child are killed; a look-alike for
// another directory is left alone.
func TestKillStrays(t *testing.T) {
	// A shell under the shim's name: argv[0] is what killStrays looks at.
	bin := filepath.Join(t.TempDir(), "containerd-shim-runc-v2")
	if err := os.Symlink("/bin/sh", bin); err != nil {
		t.Fatal(err)
	}
	engineDir := filepath.Join(t.TempDir(), "nsdkr-test")
	otherDir := filepath.Join(t.TempDir(), "other")
	start := func(dir string) (*exec.Cmd, func() int) {
		cmd := exec.Command(bin, "-c", `sleep 300 & echo $! > "$2.child"; wait`, "shim", "-address", dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		child := func() int {
			data, _ := os.ReadFile(dir + ".child")
			pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
			return pid
		}
		return cmd, child
	}
	shim, child := start(engineDir)
	other, otherChild := start(otherDir)
	if !Eventually(10*time.Second, func() bool { return child() > 0 && otherChild() > 0 }) {
		t.Fatal("the fake shims did not start their children")
	}
	t.Cleanup(func() { _ = syscallKill(otherChild()) })

	if n := killStrays("/proc", engineDir); n != 2 {
		t.Errorf("killStrays signalled %d processes, want 2 (shim and child)", n)
	}
	// The fake shim may end by itself, with status 0, when its child is
	// killed first (its `wait` returns) before its own SIGKILL lands: what
	// matters is that it is gone, and that killStrays signalled it (above).
	exited := make(chan struct{})
	go func() { _ = shim.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("the shim was not killed")
	}
	gone := func(pid int) bool {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(data), ") Z ")
	}
	if !Eventually(10*time.Second, func() bool { return gone(child()) }) {
		t.Error("the shim's child was not killed")
	}
	if other.ProcessState != nil || gone(otherChild()) {
		t.Error("a shim of another directory was touched")
	}
}

func syscallKill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}
