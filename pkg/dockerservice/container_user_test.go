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

func TestContainerStatusReportsTheProcessUser(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("who"))
	if u := e.status(t, id).GetUser(); u != nil {
		t.Errorf("created container: user %v, want none (no process yet)", u)
	}
	e.start(t, id)
	rec, _ := e.ds.store.Get(id)
	procRoot := t.TempDir()
	e.ds.containers.procRoot = procRoot

	fakeProcess(t, procRoot, rec.Pid, id, procStatus)
	u := e.status(t, id).GetUser().GetLinux()
	if u.GetUid() != 1000 || u.GetGid() != 3000 || !slices.Equal(u.GetSupplementalGroups(), []int64{3000, 4000, 50000}) {
		t.Errorf("user = %v, want uid 1000 gid 3000 groups [3000 4000 50000]", u)
	}

	// The pid now names a process of another container: no user rather
	// than a stranger's.
	fakeProcess(t, procRoot, rec.Pid, "0123456789abcdef", procStatus)
	if u := e.status(t, id).GetUser(); u != nil {
		t.Errorf("pid reused outside the container: user %v, want none", u)
	}

	// Gone: no user, and the status still answers.
	if err := os.RemoveAll(filepath.Join(procRoot, strconv.Itoa(rec.Pid))); err != nil {
		t.Fatal(err)
	}
	if u := e.status(t, id).GetUser(); u != nil {
		t.Errorf("process gone: user %v, want none", u)
	}

	fakeProcess(t, procRoot, rec.Pid, id, procStatus)
	if _, err := e.ds.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the container to show exited", func() bool {
		return e.status(t, id).State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	if u := e.status(t, id).GetUser(); u != nil {
		t.Errorf("exited container: user %v, want none", u)
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
// running container, which kubelet polls: two small /proc reads, no
// Docker call.
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
	c := &containerRuntime{procRoot: root}
	rec := &store.Record{ID: id, State: store.StateRunning, Pid: 4242}
	b.ReportAllocs()
	for b.Loop() {
		if c.runningUser(rec) == nil {
			b.Fatal("no user")
		}
	}
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
