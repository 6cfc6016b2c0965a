package dockerservice

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// fakeProcess writes procRoot/<pid>/status and cgroup as the kernel would
// for a process of container id with that identity.
func fakeProcess(t *testing.T, procRoot string, pid int, cgroupOf, status string) {
	t.Helper()
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cgroup := "12:memory:/kubepods/pod1/" + cgroupOf + "\n0::/\n"
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
}

const procStatus = "Name:\tnginx\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4242\nPPid:\t4200\n" +
	"Uid:\t1000\t1000\t1000\t1000\nGid:\t3000\t3000\t3000\t3000\nFDSize:\t64\nGroups:\t3000 4000 50000 \nVmPeak:\t   10000 kB\n"

// ContainerStatus reports the identity the container's first process
// started with (api.proto: "initially attached"), read from /proc once
// per process: never a stranger's (a pid naming another container's
// process is refused, and nothing is remembered), not what the process
// switched to later, read again for a new process, none once exited.
func TestContainerStatusReportsTheProcessUser(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("who"))
	if u := e.status(t, id).GetUser(); u != nil {
		t.Errorf("created container: user %v, want none (no process yet)", u)
	}
	e.start(t, id)
	rec, _ := e.ds.store().Get(id)
	procRoot := t.TempDir()
	e.ds.containers.procRoot = procRoot
	wantUser := func(what string, uid, gid int64, groups ...int64) {
		t.Helper()
		u := e.status(t, id).GetUser().GetLinux()
		if u.GetUid() != uid || u.GetGid() != gid || !slices.Equal(u.GetSupplementalGroups(), groups) {
			t.Errorf("%s: user = %v, want uid %d gid %d groups %v", what, u, uid, gid, groups)
		}
	}

	// The pid names a process of another container: no user rather
	// than a stranger's.
	fakeProcess(t, procRoot, rec.Pid, "0123456789abcdef", procStatus)
	if u := e.status(t, id).GetUser(); u != nil {
		t.Errorf("pid of another container's process: user %v, want none", u)
	}

	fakeProcess(t, procRoot, rec.Pid, id, procStatus)
	wantUser("the container's process", 1000, 3000, 3000, 4000, 50000)

	// The process switches to root, then goes (the index has not seen
	// the exit yet): the identity it started with is what is reported,
	// without reading /proc again.
	fakeProcess(t, procRoot, rec.Pid, id, "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n")
	wantUser("after a setuid", 1000, 3000, 3000, 4000, 50000)
	if err := os.RemoveAll(filepath.Join(procRoot, strconv.Itoa(rec.Pid))); err != nil {
		t.Fatal(err)
	}
	wantUser("process gone, exit not seen yet", 1000, 3000, 3000, 4000, 50000)

	// A new process (Docker restarted the container in place): read
	// again.
	newPid := rec.Pid + 1
	e.ds.store().Update(id, func(r *store.Record) { r.Pid = newPid })
	fakeProcess(t, procRoot, newPid, id, "Uid:\t2000\t2000\t2000\t2000\nGid:\t2000\t2000\t2000\t2000\nGroups:\t7\n")
	wantUser("a new process", 2000, 2000, 7)

	if _, err := e.ds.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the container to show exited", func() bool {
		return e.status(t, id).State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	if u := e.status(t, id).GetUser(); u != nil {
		t.Errorf("exited container: user %v, want none", u)
	}

	// Removed: forgotten when the next container's identity is read.
	if _, err := e.ds.RemoveContainer(context.Background(), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	other := e.create(t, ctrConfig("other"))
	e.start(t, other)
	orec, _ := e.ds.store().Get(other)
	fakeProcess(t, procRoot, orec.Pid, other, procStatus)
	if u := e.status(t, other).GetUser(); u == nil {
		t.Fatal("second container: no user")
	}
	if _, ok := e.ds.containers.users.get(id, newPid); ok {
		t.Error("the removed container's identity is still remembered")
	}
}

func TestReadProcessUser(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		name, status string
		want         *runtimeapi.LinuxContainerUser
	}{
		{"root without groups", "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n", &runtimeapi.LinuxContainerUser{}},
		{"setuid binary: the real ids", "Uid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\nGroups:\t10\n", &runtimeapi.LinuxContainerUser{Uid: 1000, Gid: 1000, SupplementalGroups: []int64{10}}},
		{"no Groups line", "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n", nil},
		{"garbage uid", "Uid:\tx\nGid:\t0\nGroups:\t\n", nil},
		{"garbage group", "Uid:\t0\nGid:\t0\nGroups:\t1 y\n", nil},
		{"empty", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakeProcess(t, root, 7, "c", tc.status)
			got, err := readProcessUser(root, 7)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.GetUid() != tc.want.GetUid() || got.GetGid() != tc.want.GetGid() || !slices.Equal(got.GetSupplementalGroups(), tc.want.GetSupplementalGroups()) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := readProcessUser(root, 99999); err == nil {
		t.Error("no such process: want an error")
	}
}

// BenchmarkRunningUser is what the user adds to a ContainerStatus of a
// running container, which kubelet polls: "read" is the first status of a
// process (two small /proc reads, no Docker call), "remembered" every
// later one.
func BenchmarkRunningUser(b *testing.B) {
	root := b.TempDir()
	const id = "d4735e3a265e16eee03f59718b9b5d03019c07d8b6c51f90da3a666eec13ab35"
	dir := filepath.Join(root, "4242")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(procStatus), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::/kubepods/pod1/"+id+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	rec := &store.Record{ID: id, State: store.StateRunning, Pid: 4242}
	known := func(string) bool { return true }
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := &containerRuntime{procRoot: root}
			if c.runningUser(rec, known) == nil {
				b.Fatal("no user")
			}
		}
	})
	b.Run("remembered", func(b *testing.B) {
		c := &containerRuntime{procRoot: root}
		b.ReportAllocs()
		for b.Loop() {
			if c.runningUser(rec, known) == nil {
				b.Fatal("no user")
			}
		}
	})
}

// BenchmarkReadProcessUser is the /proc/<pid>/status half of it.
func BenchmarkReadProcessUser(b *testing.B) {
	root := b.TempDir()
	dir := filepath.Join(root, "4242")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(procStatus), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := readProcessUser(root, 4242); err != nil {
			b.Fatal(err)
		}
	}
}
