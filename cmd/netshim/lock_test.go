package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/netshim/netshim/pkg/dockerservice"
)

// testOptions are options that keep everything run could touch inside dir.
func testOptions(dir string) *options {
	o := defaultOptions()
	o.rootDir = filepath.Join(dir, "root")
	o.listen = "unix://" + filepath.Join(dir, "run", "netshim.sock")
	o.dockerEndpoint = "unix://" + filepath.Join(dir, "no-docker.sock")
	o.cniConfDir = filepath.Join(dir, "net.d")
	o.cniBinDir = filepath.Join(dir, "bin")
	o.cniCacheDir = filepath.Join(dir, "cni-cache")
	o.kubenetIPAMDir = filepath.Join(dir, "ipam")
	o.networkPlugin = "none"
	o.streamingAddress = "127.0.0.1:0"
	// No --netns-dir (so the docker mode): run would make it a mount of
	// its own (podns.EnsureUnbindable), /run/netshim/netns by default.
	o.netnsDir, o.sandboxNetNS = "", dockerservice.SandboxNetNSDocker
	return o
}

// staleSocket leaves a unix socket file at path that nobody serves, as a
// crashed daemon does: the socket set-up of run replaces such a file.
func staleSocket(t *testing.T, path string) os.FileInfo {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// A second netshim on a root dir in use stops, with a message naming the
// other one, before it does anything: the first one's socket, checkpoint
// dir and CNI state are left as they are.
func TestSecondInstanceStopsBeforeAnySideEffect(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	held, err := lockRootDir(opts.rootDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	sock := strings.TrimPrefix(opts.listen, "unix://")
	before := staleSocket(t, sock)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = run(ctx, opts)
	if err == nil {
		t.Fatal("run succeeded on a root dir another netshim holds")
	}
	for _, want := range []string{"another netshim (pid " + strconv.Itoa(os.Getpid()) + ")", opts.rootDir, filepath.Join(opts.rootDir, lockFileName)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	after, err := os.Lstat(sock)
	if err != nil {
		t.Fatalf("the socket file is gone: %v", err)
	}
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Error("the socket file was replaced")
	}
	if got := listDir(t, opts.rootDir); !slices.Equal(got, []string{lockFileName}) {
		t.Errorf("root dir holds %v, want the lock file only (no checkpoint dir)", got)
	}
	if got := listDir(t, dir); !slices.Equal(got, []string{"root", "run"}) {
		t.Errorf("%s holds %v, want root and run only (no CNI cache, no IPAM dir)", dir, got)
	}
}

const lockHelperEnv = "NETSHIM_TEST_LOCK_HELPER_DIR"

// TestLockHelperProcess is not a test: it is the process that
// TestLockIsReleasedWhenTheHolderDies runs (the test binary again) to
// hold the lock, until it is killed.
func TestLockHelperProcess(t *testing.T) {
	dir := os.Getenv(lockHelperEnv)
	if dir == "" {
		t.Skip("helper process for TestLockIsReleasedWhenTheHolderDies")
	}
	if _, err := lockRootDir(dir, 0); err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("locked\n")
	select {} // until killed
}

// The kernel drops the lock of a process that dies, however it dies: a
// killed netshim leaves no stale lock to clean up.
func TestLockIsReleasedWhenTheHolderDies(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if s != "locked\n" {
			t.Fatalf("helper said %q, want locked", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the helper did not take the lock")
	}

	if f, err := lockRootDir(dir, 0); err == nil {
		f.Close()
		t.Fatal("took the lock another process holds")
	} else if want := "(pid " + strconv.Itoa(cmd.Process.Pid) + ")"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the holder %s", err, want)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	f, err := lockRootDir(dir, 0)
	if err != nil {
		t.Fatalf("lock still held after its holder was killed: %v", err)
	}
	defer f.Close()
	// Held again, by this process now: a third instance is refused.
	if g, err := lockRootDir(dir, 0); err == nil {
		g.Close()
		t.Error("took a lock this process holds through another open file")
	}
}

// TestLockWaitsForAMomentaryHolder: a lock another open file holds for a
// moment (what a child of a netshim killed mid-fork keeps until it
// execs) is taken once it is released, within the wait; one held longer
// than the wait is reported.
func TestLockWaitsForAMomentaryHolder(t *testing.T) {
	dir := t.TempDir()
	held, err := lockRootDir(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		time.Sleep(200 * time.Millisecond)
		held.Close()
		close(released)
	}()
	f, err := lockRootDir(dir, 30*time.Second)
	if err != nil {
		t.Fatalf("the lock released after 200 ms was not taken: %v", err)
	}
	<-released
	start := time.Now()
	if g, err := lockRootDir(dir, 300*time.Millisecond); err == nil {
		g.Close()
		t.Fatal("took a lock held for longer than the wait")
	} else if time.Since(start) < 300*time.Millisecond {
		t.Errorf("gave up after %s, before the wait of 300ms", time.Since(start))
	}
	f.Close()
}
