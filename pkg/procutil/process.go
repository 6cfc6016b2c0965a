// Package procutil identifies and signals host processes without being
// fooled by pid reuse.
//
// netshim learns container and exec pids from Docker, and acts on them
// later: it kills a timed-out exec's process tree, or hands
// /proc/<pid>/ns/net of a sandbox's infra container to CNI. By then the
// process may have exited and the kernel may have given its pid to an
// unrelated process; acting on the bare number would kill that process or
// configure its network namespace.
//
// The defence has two parts. A pidfd (pidfd_open, Linux 5.3) pins one
// process: signals sent through it can only reach that process, never a
// later holder of the same pid. And a pid cannot be reused while its
// process is alive (or a zombie), so whatever is read from /proc/<pid>
// between opening a pidfd and seeing, through the pidfd, that the process
// still lives, describes the pinned process (Process.Check). What is read
// is the process's cgroup, which names the Docker container it belongs to
// (InContainer): Docker's record of a pid is only trusted for a process
// that is, right now, inside that container.
package procutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// ErrGone says that the process has exited (or never existed).
var ErrGone = errors.New("the process has exited")

// Process is a handle on one process, by pidfd. Its zero value is not
// usable; use Open. Close it when done.
type Process struct {
	pid int
	// fd is the pidfd, or -1 where there is none (kernels before 5.3, or
	// a seccomp profile that refuses pidfd_open): the handle then falls
	// back to the pid and guards against reuse only through the checks
	// made with Check, leaving a window between check and signal.
	fd     int
	closed bool
}

// Open pins the process that has pid now.
func Open(pid int) (*Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("invalid pid %d", pid)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		return &Process{pid: pid, fd: fd}, nil
	case errors.Is(err, unix.ESRCH):
		return nil, fmt.Errorf("pid %d: %w", pid, ErrGone)
	case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
		// pidfd_open needs no privilege: EPERM comes from seccomp.
		return &Process{pid: pid, fd: -1}, nil
	}
	return nil, fmt.Errorf("opening a pidfd for pid %d: %w", pid, err)
}

// Pid is the process's pid (valid as a name for it while it lives).
func (p *Process) Pid() int { return p.pid }

// Signal sends sig to the process; 0 only checks that it is still there
// (a zombie counts: its pid is not free yet). It fails with ErrGone once
// the process has exited, even if its pid now names another process.
func (p *Process) Signal(sig unix.Signal) error {
	if p.closed {
		return fmt.Errorf("pid %d: signal through a closed handle", p.pid)
	}
	var err error
	if p.fd >= 0 {
		err = unix.PidfdSendSignal(p.fd, sig, nil, 0)
	} else {
		err = unix.Kill(p.pid, sig)
	}
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("pid %d: %w", p.pid, ErrGone)
	}
	if err != nil {
		return fmt.Errorf("signalling pid %d: %w", p.pid, err)
	}
	return nil
}

// Check runs check on the pid (typically reading /proc/<pid>), then
// makes sure the pinned process is still alive. If it is, the pid was
// never free between Open and now, so check looked at this very process
// and not at one that reused the pid. It fails with ErrGone when the
// process exited meanwhile, with check's error when that fails.
func (p *Process) Check(check func(pid int) error) error {
	if err := check(p.pid); err != nil {
		// A check that failed because the process vanished (its
		// /proc dir is gone) is reported as such.
		if p.Signal(0) != nil {
			return fmt.Errorf("pid %d: %w", p.pid, ErrGone)
		}
		return err
	}
	return p.Signal(0)
}

// Close releases the pidfd.
func (p *Process) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	if p.fd < 0 {
		return nil
	}
	return unix.Close(p.fd)
}

// exited says whether the process has stopped running: it exited (a
// zombie counts: it runs no more, though its pid is not free yet). A
// pidfd becomes readable then; without one, /proc/<pid>/stat says Z or
// X, or is gone.
func (p *Process) exited() bool {
	if p.fd >= 0 {
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n == 1
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || data[i+2] == 'Z' || data[i+2] == 'X'
}

// waitExited waits, for at most timeout, until every process has exited;
// it returns the pids of those that still run.
func waitExited(ps map[int]*Process, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	delay := time.Millisecond
	for {
		var left []int
		for pid, p := range ps {
			if !p.exited() {
				left = append(left, pid)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}
