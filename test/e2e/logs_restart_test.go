//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A container that goes on writing while netshim is down, and exits before
// netshim is back, still has all of its output in its CRI log after the
// restart, each line once: what `kubectl logs --previous` shows.
func TestLogsWrittenWhileNetshimWasDown(t *testing.T) {
	e := newEnv(t, envOptions{})
	requireWorkloadImage(t)
	e.start()
	podJSON := e.writePodJSON("logs")
	podID := e.runp(podJSON)
	logFile := filepath.Join(e.dir, "logs", "logs", "writer.log")

	// The container writes line 1, waits until the test creates /tmp/go-on
	// in it, then writes lines 2 to 5 and exits.
	id := e.crictlRun(podID, podJSON, "writer", "sh", "-c",
		"echo line-1; while [ ! -e /tmp/go-on ]; do sleep 0.05; done; for i in 2 3 4 5; do echo line-$i; done; exit 0")
	if !poll(startDeadline, func() bool {
		data, _ := os.ReadFile(logFile)
		return strings.Contains(string(data), "line-1")
	}) {
		t.Fatalf("line-1 never reached %s", logFile)
	}

	e.mustStop(syscall.SIGKILL)
	// netshim is down: let the container finish.
	if out, err := runCmd("docker", "exec", id, "touch", "/tmp/go-on"); err != nil {
		t.Fatalf("docker exec touch: %v\n%s", err, out)
	}
	if !poll(startDeadline, func() bool {
		out, err := runCmd("docker", "inspect", "--format", "{{.State.Status}}", id)
		return err == nil && strings.TrimSpace(out) == "exited"
	}) {
		t.Fatal("the writer did not exit while netshim was down")
	}

	e.start()
	st := e.waitExited(id)
	if st.ExitCode != 0 {
		t.Errorf("writer exit code %d, want 0", st.ExitCode)
	}
	// Exit is reported only once the log is drained, so it is complete now.
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if n := strings.Count(string(data), fmt.Sprintf(" stdout F line-%d\n", i)); n != 1 {
			t.Errorf("%s has line-%d %d times, want once:\n%s", logFile, i, n, data)
		}
	}
}
