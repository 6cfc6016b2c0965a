package nodeconformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// RunSuite runs a ginkgo suite (bin args..., in dir, with env added to
// this process's) until it ends or ctx does, its output in logPath, and
// returns how long it ran and how it ended. Cancelled, the suite gets
// SIGTERM first, on which it cleans up what it made (the node suite stops
// its kubelet and API server, the cluster suite deletes its namespaces),
// and a minute before it is killed.
func RunSuite(ctx context.Context, dir, logPath string, env []string, bin string, args ...string) (time.Duration, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	start := time.Now()
	err = cmd.Run()
	return time.Since(start), err
}

// ReadReport parses the ginkgo JSON report at path; runErr is how the
// suite ended, named when it wrote no report.
func ReadReport(path, logPath string, runErr error) ([]Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("the suite wrote no report (%v; exit: %v); see %s", err, runErr, logPath)
	}
	defer f.Close()
	return ParseReport(f)
}

// Lines are the run's lines: one a spec, one a failed suite node.
func (t Tally) Lines() []string {
	var lines []string
	for _, r := range t.Results {
		lines = append(lines, r.Line())
	}
	for _, s := range t.SuiteFailures {
		lines = append(lines, fmt.Sprintf("FAIL suite node %s: %s", s.Name, firstLine(s.Message)))
	}
	return lines
}
