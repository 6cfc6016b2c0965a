//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// A container whose output ends without a newline has that last chunk in
// its CRI log as soon as its exit is reported: kubelet reads a
// FallbackToLogsOnError termination message, and `kubectl logs` a
// short-lived pod's output, at that moment. Docker 20.10's followed log
// stream can end before its copier writes such a chunk (a few in a hundred
// containers), which netshim's final read of the log makes up for; with
// enough containers the race shows up here if that read is missing.
func TestLogLastChunkWithoutNewline(t *testing.T) {
	e := newEnv(t, envOptions{})
	requireWorkloadImage(t)
	e.start()
	podJSON := e.writePodJSON("partial")
	podID := e.runp(podJSON)

	const containers = 15
	for i := range containers {
		id := e.crictlRun(podID, podJSON, fmt.Sprintf("partial-%d", i), "sh", "-c",
			fmt.Sprintf("printf 'first %d, ' && printf 'DONE %d'", i, i))
		if st := e.waitExited(id); st.ExitCode != 0 {
			t.Fatalf("container %d exited with %d, want 0", i, st.ExitCode)
		}
		want := fmt.Sprintf("first %d, DONE %d", i, i)
		if got := e.crictlLogs(id); !strings.Contains(got, want) {
			t.Errorf("container %d: log right after the exit is %q, want %q", i, got, want)
		}
	}
}
