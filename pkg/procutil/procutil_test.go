package procutil

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/netshim/netshim/internal/testutil"
)

const (
	ctrID   = "4f1c0ffee4f1c0ffee4f1c0ffee4f1c0ffee4f1c0ffee4f1c0ffee4f1c0ffee1"
	otherID = "99deadbeef99deadbeef99deadbeef99deadbeef99deadbeef99deadbeef9999"
)

// deadPid returns the pid of a process that has exited and been reaped.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatalf("running true: %v", err)
	}
	return cmd.Process.Pid
}

// fakeProc makes a procRoot holding a cgroup file for each pid given.
func fakeProc(t *testing.T, cgroups map[int]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, content := range cgroups {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// alive: the process exists and is not a zombie (orphans are not reaped
// on every machine).
func alive(pid int) bool {
	s := testutil.ProcState(pid)
	return s != "" && s != "Z" && s != "X"
}

// A handle keeps naming the process it was opened on: once that process
// has exited, signals through it fail whoever holds the pid now.
func TestHandleDoesNotOutliveItsProcess(t *testing.T) {
	cmd := testutil.Sleeper(t)
	p, err := Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Signal(0); err != nil {
		t.Fatalf("Signal(0) on a live process: %v", err)
	}
	if err := p.Check(func(int) error { return nil }); err != nil {
		t.Fatalf("Check on a live process: %v", err)
	}
	_ = cmd.Process.Kill()
	_, _ = cmd.Process.Wait() // reaped: the pid is free for reuse
	if err := p.Signal(unix.SIGKILL); !errors.Is(err, ErrGone) {
		t.Errorf("Signal after the process exited: %v, want ErrGone", err)
	}
	// What a check read can no longer be trusted to be about it.
	if err := p.Check(func(int) error { return nil }); !errors.Is(err, ErrGone) {
		t.Errorf("Check after the process exited: %v, want ErrGone", err)
	}
	if _, err := Open(cmd.Process.Pid); !errors.Is(err, ErrGone) && err != nil {
		// The pid may have been reused by now: then Open succeeds.
		t.Errorf("Open of a reaped pid: %v, want ErrGone or a new process", err)
	}
	if _, err := Open(0); err == nil {
		t.Error("Open(0) succeeded")
	}
	p.Close()
	if err := p.Signal(0); err == nil {
		t.Error("Signal through a closed handle succeeded")
	}
}

func TestInContainer(t *testing.T) {
	for _, tc := range []struct {
		name, cgroup string
		want         error // nil, ErrNotInContainer or ErrGone
	}{
		{"cgroup v1 cgroupfs", "12:pids:/docker/" + ctrID + "\n4:memory:/docker/" + ctrID + "\n0::/\n", nil},
		{"cgroup v1 under kubelet's parent", "3:cpu,cpuacct:/kubepods/burstable/podabc/" + ctrID + "\n", nil},
		{"cgroup v2 systemd", "0::/system.slice/docker-" + ctrID + ".scope\n", nil},
		{"cgroup v2 relative to our namespace", "0::/../docker-" + ctrID + ".scope/init\n", nil},
		{"another container", "0::/system.slice/docker-" + otherID + ".scope\n", ErrNotInContainer},
		{"a host process", "0::/user.slice/user-0.slice/session-1.scope\n", ErrNotInContainer},
		{"the ID as a controller name only", "1:" + ctrID + ":/\n", ErrNotInContainer},
		{"empty", "", ErrNotInContainer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeProc(t, map[int]string{42: tc.cgroup})
			err := InContainer(root, 42, ctrID)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("InContainer = %v, want %v", err, tc.want)
			}
		})
	}
	if err := InContainer(t.TempDir(), 42, ctrID); !errors.Is(err, ErrGone) {
		t.Errorf("no /proc entry: %v, want ErrGone", err)
	}
	if err := InContainer(fakeProc(t, map[int]string{42: "0::/docker/x\n"}), 42, ""); err == nil {
		t.Error("an empty container ID matched")
	}
}

// A pid that Docker reported for a container but that now names a process
// outside it (its pid was reused) is neither stopped nor killed.
func TestKillInContainerLeavesAReusedPidAlone(t *testing.T) {
	cmd := testutil.Sleeper(t)
	pid := cmd.Process.Pid
	root := fakeProc(t, map[int]string{pid: "0::/system.slice/docker-" + otherID + ".scope\n"})
	if err := KillInContainer(root, pid, ctrID); !errors.Is(err, ErrNotInContainer) {
		t.Fatalf("KillInContainer = %v, want ErrNotInContainer", err)
	}
	if s := testutil.ProcState(pid); s != "S" && s != "R" {
		t.Errorf("the unrelated process is in state %q, want it running untouched", s)
	}
}

func TestKillInContainerKillsItsProcess(t *testing.T) {
	cmd := testutil.Sleeper(t)
	pid := cmd.Process.Pid
	root := fakeProc(t, map[int]string{pid: "0::/docker/" + ctrID + "\n"})
	if err := KillInContainer(root, pid, ctrID); err != nil {
		t.Fatal(err)
	}
	st, _ := cmd.Process.Wait()
	if ws, ok := st.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("process ended with %v, want SIGKILL", st)
	}
	// Killing what is gone already is fine.
	if err := KillInContainer(root, deadPid(t), ctrID); err != nil {
		t.Errorf("KillInContainer of a gone process: %v", err)
	}
}

func TestNetNSPath(t *testing.T) {
	self := os.Getpid()
	root := fakeProc(t, map[int]string{self: "0::/docker/" + ctrID + "\n"})
	got, err := NetNSPath(root, self, ctrID)
	if want := filepath.Join(root, strconv.Itoa(self), "ns", "net"); err != nil || got != want {
		t.Errorf("NetNSPath = %q, %v; want %q", got, err, want)
	}
	if got, err := NetNSPath(root, self, otherID); !errors.Is(err, ErrNotInContainer) || got != "" {
		t.Errorf("NetNSPath of another container's pid = %q, %v; want ErrNotInContainer", got, err)
	}
	if got, err := NetNSPath(root, deadPid(t), ctrID); !errors.Is(err, ErrGone) || got != "" {
		t.Errorf("NetNSPath of a gone pid = %q, %v; want ErrGone", got, err)
	}
}

// TestKillTree runs a real process tree on the host and kills it.
func TestKillTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 300 & sleep 300 & sh -c 'sleep 300' & wait")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sh: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rootPid := cmd.Process.Pid
	var tree []int
	testutil.Eventually(t, "the children to start", func() bool {
		kids, err := childrenOf("/proc", map[int]*Process{rootPid: nil})
		if err != nil {
			t.Fatal(err)
		}
		tree = kids
		return len(kids) == 3
	})
	parents := map[int]*Process{}
	for _, k := range tree {
		parents[k] = nil
	}
	// The inner sh may have exec'd its sleep: there may be no grandchild.
	grandkids, _ := childrenOf("/proc", parents)
	tree = append(tree, grandkids...)
	p, err := Open(rootPid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := KillTree("/proc", p); err != nil {
		t.Fatal(err)
	}
	// KillTree returns once the tree has exited: no poll. (ExecSync's
	// timeout relies on it: its caller looks for the exec's processes
	// right after.)
	for _, pid := range append(tree, rootPid) {
		if alive(pid) {
			t.Errorf("pid %d still runs (state %s) when KillTree returned", pid, testutil.ProcState(pid))
		}
	}
	_ = cmd.Wait()
	// Killing what is gone already is fine.
	if err := KillTree("/proc", p); err != nil {
		t.Errorf("second kill: %v", err)
	}
}

func TestParseParentPid(t *testing.T) {
	for stat, want := range map[string]int{
		"123 (sh) S 45 123 123 0 -1":         45,
		"7 (a) b) (c) R 1 7 7 0 -1":          1,
		"9 (weird name with spaces) S 2 9 9": 2,
	} {
		if got, ok := parseParentPid([]byte(stat)); !ok || got != want {
			t.Errorf("parseParentPid(%q) = %d, %v; want %d", stat, got, ok, want)
		}
	}
	for _, bad := range []string{"garbage", "1 (x) S", "1 (x) S notanumber"} {
		if _, ok := parseParentPid([]byte(bad)); ok {
			t.Errorf("parseParentPid accepted %q", bad)
		}
	}
}

// Without pidfds (old kernels, seccomp), a handle falls back to the pid:
// it still tells a live process from a gone one.
func TestHandleWithoutPidfd(t *testing.T) {
	cmd := testutil.Sleeper(t)
	p := &Process{pid: cmd.Process.Pid, fd: -1}
	if err := p.Check(func(int) error { return nil }); err != nil {
		t.Fatalf("Check on a live process: %v", err)
	}
	if err := p.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, _ := cmd.Process.Wait()
	if ws, ok := st.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("process ended with %v, want SIGKILL", st)
	}
	if err := p.Signal(0); !errors.Is(err, ErrGone) {
		t.Errorf("Signal(0) after exit: %v, want ErrGone", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
