package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// killStrays kills what a private engine rooted at dir can leave running
// after it stopped: containerd shims whose command line names dir (their
// containerd socket lives under it) and the container processes they
// started. A shim outlives a dockerd that was killed, or that stopped while
// a container's removal failed, and keeps its container running: without
// this every test run would leave pause processes behind on the machine.
// It returns how many processes it signalled.
func killStrays(proc, dir string) int {
	if dir == "" || dir == "/" {
		return 0
	}
	entries, err := os.ReadDir(proc)
	if err != nil {
		return 0
	}
	children := map[int][]int{}
	var shims []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid := parentOf(proc, pid); ppid > 0 {
			children[ppid] = append(children[ppid], pid)
		}
		cmd, err := os.ReadFile(filepath.Join(proc, e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		if len(args) > 0 && strings.Contains(filepath.Base(args[0]), "containerd-shim") && strings.Contains(string(cmd), dir) {
			shims = append(shims, pid)
		}
	}
	n := 0
	for _, shim := range shims {
		// The containers first, then the shim, so that no shim is left
		// to restart or wait on them.
		for _, c := range children[shim] {
			if syscall.Kill(c, syscall.SIGKILL) == nil {
				n++
			}
		}
		if syscall.Kill(shim, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// parentOf reads a process's parent pid from proc/PID/stat, 0 if gone.
func parentOf(proc string, pid int) int {
	data, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// The command name may hold spaces and parentheses: fields follow the
	// last ')'. Field 4 (state is 3) is the parent pid.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
