package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// lockFileName is the single-instance lock in --root-dir.
const lockFileName = "netshim.lock"

// lockRootDir makes this process the only netshim on rootDir: it takes an
// exclusive flock on ROOT/netshim.lock, without waiting, and keeps it for
// as long as the returned file is open, that is, for the daemon's life.
// A second netshim on the same root would otherwise replace the first
// one's socket, run its sandbox teardown retries and CNI GC against the
// same checkpoints, and fight over kubenet's rules; so this is the first
// thing run does, before any of that.
//
// flock, rather than a pid file, because the kernel drops the lock when
// the process dies, however it dies: a crash leaves no stale lock behind.
// The lock belongs to the open file, which is close-on-exec, so CNI
// plugins and other children cannot keep it alive after netshim exits.
// The holder's pid is written into the file only to name it in the error
// the next instance reports.
func lockRootDir(rootDir string) (*os.File, error) {
	if err := os.MkdirAll(rootDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating --root-dir %s: %w", rootDir, err)
	}
	path := filepath.Join(rootDir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the lock file %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := lockHolder(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another netshim%s is running with --root-dir %s (it holds the lock %s): stop it first, or give this instance its own --root-dir and --listen", holder, rootDir, path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(pid, 0)
	}
	return f, nil
}

// lockHolder names the pid a lock file records, as " (pid N)", or "".
func lockHolder(f *os.File) string {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(string(bytes.TrimSpace(buf[:n])))
	if err != nil || pid <= 0 {
		return ""
	}
	return fmt.Sprintf(" (pid %d)", pid)
}
