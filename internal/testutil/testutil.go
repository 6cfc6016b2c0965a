// Package testutil holds the few helpers that unit tests across netshim's
// packages share: a bounded poll, a look at a host process's state, a
// metric's value, the log entries of a test logger, and files written
// for a fake /proc or cgroup tree.
package testutil

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EventuallyTimeout bounds every Eventually.
const EventuallyTimeout = 10 * time.Second

// Eventually polls cond until it holds, failing the test with what it was
// waiting for once EventuallyTimeout has passed. Tests wait on conditions,
// never for fixed times.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(EventuallyTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", EventuallyTimeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ProcState is a host process's state letter from /proc/PID/stat ("R",
// "S", "Z", ...), or "" once the process is gone.
func ProcState(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name may hold spaces and parentheses: the state
	// follows the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// Sleeper starts a real host process that lives until killed (a stand-in
// for a container's or exec's process); the test kills and reaps it at the
// end if it is still there.
func Sleeper(t testing.TB) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting sleep: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	return cmd
}
