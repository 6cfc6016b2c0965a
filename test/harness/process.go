package harness

import (
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// proc is a started child process and, once it exited, its exit status.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // written before done is closed
}

// startProc starts cmd with its output going to log, which is closed when
// the process exits.
func startProc(cmd *exec.Cmd, log io.WriteCloser) (*proc, error) {
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitErr is the exit status; nil while the process runs.
func (p *proc) exitErr() error {
	if !p.exited() {
		return nil
	}
	return p.err
}

// stop sends sig and waits for the exit, killing the process after
// timeout (which is then an error).
func (p *proc) stop(what string, sig syscall.Signal, timeout time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !p.exited() {
		return fmt.Errorf("signalling %s (pid %d): %w", what, p.pid(), err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s (pid %d) did not exit within %s of %v; killed", what, p.pid(), timeout, sig)
	}
}
