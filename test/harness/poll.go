package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const (
	// PollInterval is how often Eventually looks again.
	PollInterval = 50 * time.Millisecond
	// CommandDeadline bounds every command RunCmd runs: a wedged iptables
	// or docker CLI fails the test instead of hanging it.
	CommandDeadline = 2 * time.Minute
)

// Eventually calls cond every PollInterval until it returns true or timeout
// has passed, and reports whether it did. cond runs at least once, so a
// zero timeout is a single look. Nothing in the suites sleeps for a fixed
// time: every wait is one of these.
func Eventually(timeout time.Duration, cond func() bool) bool {
	end := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(PollInterval)
	}
}

// EventuallyCtx is Eventually bounded by a context as well as by timeout.
func EventuallyCtx(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	end := time.Now().Add(timeout)
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// RunCmd runs a command with CommandDeadline and returns its combined
// output.
func RunCmd(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CommandDeadline)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// MustRun runs a command and fails the test, with its output, if it fails.
func MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := RunCmd(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// FileTail returns the last n lines of the file at path, or a note saying
// why there are none: a log's end for an error message.
func FileTail(path string, n int) string { return tail(path, n) }

// tail returns the last n lines of the file at path, or a note saying why
// there are none.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log at %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
