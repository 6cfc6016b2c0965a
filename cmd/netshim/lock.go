package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// lockFileName is the single-instance lock in --root-dir.
const lockFileName = "netshim.lock"

// lockWait is how long start-up waits for the lock before it gives up:
// long enough for what a netshim killed a moment ago leaves holding it
// (see lockRootDir), short enough that a second instance started by
// mistake fails at once for a person watching.
const lockWait = 3 * time.Second

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
// plugins and other children cannot keep it alive once they run; but a
// child forked and not yet exec'd shares netshim's open files, and a
// netshim killed while it starts CNI plugins for 30 pods at once can
// leave one holding the lock for a moment after it died (seen once in the
// fault suite's kill loop, on a loaded 2-core machine). So the lock is
// tried again for up to wait before another holder is reported.
// The holder's pid is written into the file only to name it in the error
// the next instance reports.
func lockRootDir(rootDir string, wait time.Duration) (*os.File, error) {
	if err := os.MkdirAll(rootDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating --root-dir %s: %w", rootDir, err)
	}
	path := filepath.Join(rootDir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the lock file %s: %w", path, err)
	}
	if err := flockWithin(f, wait); err != nil {
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

// flockWithin takes an exclusive flock on f, trying again every 50 ms
// while another open file holds it, for up to wait.
func flockWithin(f *os.File, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
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
