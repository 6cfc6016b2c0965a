package procutil

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotInContainer says that a pid Docker gave for a container (or one of
// its execs) now names a process outside that container: the container's
// process exited and the kernel gave the pid to another one.
var ErrNotInContainer = errors.New("the pid belongs to a process outside the container (the container's process exited and its pid was reused)")

// InContainer checks, from procRoot/<pid>/cgroup, that the process is in
// a cgroup of the Docker container with this (full) ID. Docker names
// every container's cgroup after its ID: "<parent>/<id>" with the
// cgroupfs driver, "<slice>/docker-<id>.scope" with systemd (and other
// engines speaking its API do likewise, e.g. "libpod-<id>.scope"). Every
// process of a container, execs included, is placed in it (or below it,
// for a container that makes cgroups of its own). The path is read as the
// caller's cgroup namespace shows it, which keeps the container's
// directory name even when relative ("/../docker-<id>.scope").
//
// The cgroup is the container's identity the kernel keeps per process: a
// process that got a dead container's pid is in another cgroup, unless it
// is in the same container, where nothing outside it is at stake.
// Comparing start times instead (/proc/<pid>/stat against Docker's
// StartedAt) mixes two clocks and Docker's start latency, and an inode
// of the netns recorded at start would not survive a netshim restart.
func InContainer(procRoot string, pid int, containerID string) error {
	if containerID == "" {
		return errors.New("no container ID to check the process against")
	}
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pid %d: %w", pid, ErrGone)
		}
		return fmt.Errorf("reading the cgroups of pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		_, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		if _, path, ok := strings.Cut(rest, ":"); ok && strings.Contains(path, containerID) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the cgroups of pid %d: %w", pid, err)
	}
	return fmt.Errorf("pid %d, container %s: %w", pid, containerID, ErrNotInContainer)
}

// OpenInContainer pins the process that has pid and checks that it is a
// process of the container. It fails with ErrGone when there is no such
// process, ErrNotInContainer when the pid names a process elsewhere.
func OpenInContainer(procRoot string, pid int, containerID string) (*Process, error) {
	p, err := Open(pid)
	if err != nil {
		return nil, err
	}
	if err := p.Check(func(pid int) error { return InContainer(procRoot, pid, containerID) }); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// NetNSPath returns procRoot/<pid>/ns/net, the network namespace of the
// container's process pid, after checking that pid is a live process of
// that container (see OpenInContainer for the errors).
//
// The path is handed to programs that open it later (CNI plugins, the
// port-forward dialer); nothing can pin it for them short of a bind
// mount. What remains is the window between this check and their open:
// the infra container would have to die, and its pid be given to another
// process, within it; before, the window was the container's whole life
// after its death.
func NetNSPath(procRoot string, pid int, containerID string) (string, error) {
	p, err := OpenInContainer(procRoot, pid, containerID)
	if err != nil {
		return "", err
	}
	p.Close()
	return filepath.Join(procRoot, strconv.Itoa(pid), "ns", "net"), nil
}

// KillInContainer SIGKILLs the process pid and all its descendants,
// provided that pid is a process of the container (an exec's pid from
// Docker's ExecInspect is checked this way before anything is signalled).
// A process that is gone already is not an error; one outside the
// container is refused with ErrNotInContainer and left alone.
func KillInContainer(procRoot string, pid int, containerID string) error {
	p, err := OpenInContainer(procRoot, pid, containerID)
	if errors.Is(err, ErrGone) {
		return nil
	}
	if err != nil {
		return err
	}
	defer p.Close()
	return KillTree(procRoot, p)
}

// killWait bounds how long KillTree waits for the killed processes to
// end. SIGKILL acts at once, unless a process is in an uninterruptible
// sleep (a hung NFS read, say), which no signal can end.
const killWait = 5 * time.Second

// KillTree SIGKILLs root and all its descendants, and returns once every
// one of them has exited (a zombie counts), so that a caller looking
// right after finds none running. The tree is first frozen with SIGSTOP,
// level by level, so that no process can fork a child the kill would
// miss; then every member is killed. Each descendant found in procRoot is
// pinned with a pidfd and its parent re-read before it is signalled, so a
// pid that changed hands between the listing and the signal is skipped.
// Processes that are gone already are skipped. A member still running
// killWait after the kill is an error naming it.
func KillTree(procRoot string, root *Process) error {
	if err := root.Signal(unix.SIGSTOP); err != nil {
		if errors.Is(err, ErrGone) {
			return nil
		}
		return fmt.Errorf("stopping pid %d: %w", root.Pid(), err)
	}
	tree := map[int]*Process{root.Pid(): root}
	defer func() {
		for pid, p := range tree {
			if pid != root.Pid() {
				p.Close()
			}
		}
	}()
	for {
		children, err := childrenOf(procRoot, tree)
		if err != nil {
			// Kill what we know rather than leave it stopped.
			killAll(tree)
			return err
		}
		added := false
		for _, c := range children {
			p, err := Open(c)
			if err != nil {
				continue // exited meanwhile
			}
			err = p.Check(func(pid int) error {
				ppid, err := ParentPid(procRoot, pid)
				if err != nil {
					return err
				}
				if _, ok := tree[ppid]; !ok {
					return fmt.Errorf("pid %d: no longer a child of the tree", pid)
				}
				return nil
			})
			if err != nil {
				p.Close()
				continue
			}
			_ = p.Signal(unix.SIGSTOP)
			tree[c] = p
			added = true
		}
		if !added {
			break
		}
	}
	killAll(tree)
	if left := waitExited(tree, killWait); len(left) > 0 {
		return fmt.Errorf("pids %v still run %s after SIGKILL (an uninterruptible sleep?)", left, killWait)
	}
	return nil
}

func killAll(tree map[int]*Process) {
	for _, p := range tree {
		_ = p.Signal(unix.SIGKILL)
	}
}

// childrenOf lists the processes whose parent is in parents and that are
// not in it themselves, from one pass over procRoot.
func childrenOf(procRoot string, parents map[int]*Process) ([]int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, in := parents[p]; in {
			continue
		}
		ppid, err := ParentPid(procRoot, p)
		if err != nil {
			continue // exited meanwhile
		}
		if _, ok := parents[ppid]; ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// ParentPid reads the parent of pid from procRoot/<pid>/stat.
func ParentPid(procRoot string, pid int) (int, error) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("reading the stat of pid %d: %w", pid, err)
	}
	ppid, ok := parseParentPid(data)
	if !ok {
		return 0, fmt.Errorf("pid %d: unreadable stat %q", pid, data)
	}
	return ppid, nil
}

// parseParentPid reads the ppid from /proc/<pid>/stat: "pid (comm) state
// ppid ...", where comm may hold spaces and parentheses, so the fields are
// counted from the last ')'.
func parseParentPid(stat []byte) (int, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
