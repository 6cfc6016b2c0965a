//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/podns"
	"github.com/netshim/netshim/pkg/procutil"
	"github.com/netshim/netshim/test/harness"
)

// netshim makes its --netns-dir an unbindable mount, in the pinned and
// pause-less modes, so that a recursive bind of a directory above it (a
// node agent's hostPath of / or /run, which Docker binds recursively)
// copies none of the pods' pinned namespaces and /dev/shm. Here pod B's
// container binds the netns dir's parent (the harness's temp dir): it sees
// pod A's files in the directory but none of them mounted, and once A is
// removed nothing of A's namespaces is mounted in B's mount namespace.
//
// The first holds only where the kernel keeps a mount unbindable in a new
// mount namespace (runc makes one per container and binds in it): 6.18
// does not, and there the check is skipped, logged. The second holds on
// any kernel since 3.18, which detaches the mounts other namespaces have
// on a file when it is deleted, as netshim does when it removes a pod.
func TestNetNSDirUnbindable(t *testing.T) {
	for _, mode := range []string{"pinned", "pauseless"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, envOptions{extraFlags: []string{"--sandbox-netns=" + mode}})
			e.start()
			dir := e.ns.NetNSDir
			if !slices.ContainsFunc(mountinfo(t, "/proc/self/mountinfo"), func(m procutil.Mount) bool {
				return m.MountPoint == dir && slices.Contains(m.Optional, "unbindable")
			}) {
				t.Errorf("%s is no unbindable mount:\n%s", dir, mountsUnderDir(t, "/proc/self/mountinfo", dir))
			}

			a, _ := e.runPodWith("nsdir-a")
			files := map[podns.Kind]string{podns.Net: e.readCheckpoint(a).Data.NetNS}
			if mode == "pauseless" {
				files = e.pauselessFiles(a)
			}
			if filepath.Dir(files[podns.Net]) != dir {
				t.Fatalf("pod A's netns %q is not in %s", files[podns.Net], dir)
			}
			// What a copy of A's files would be in another mount
			// namespace: mounted at the same name, or an nsfs mount of
			// the same namespace.
			isA := map[string]bool{}
			for kind, f := range files {
				isA[filepath.Base(f)] = true
				if kind != "shm" {
					isA[fmt.Sprintf("%s:[%d]", kind, nsInode(t, f))] = true
				}
			}
			aMounts := func(mi string) []string {
				var out []string
				for _, m := range mountinfo(t, mi) {
					if isA[filepath.Base(m.MountPoint)] || (m.FSType == "nsfs" && isA[m.Root]) {
						out = append(out, m.MountPoint+" "+m.FSType+" "+m.Root)
					}
				}
				return out
			}

			b, bCfg := e.runPodWith("nsdir-b")
			agent := e.startContainer(b, bCfg, "agent", harness.WithCommand("sleep", "300"),
				harness.WithMounts(&runtimeapi.Mount{HostPath: filepath.Dir(dir), ContainerPath: "/host"}))
			// The bind is of the directory A's files are in.
			if ls := dockerExec(t, agent, "ls", "-a", "/host/"+filepath.Base(dir)); !strings.Contains(ls, filepath.Base(files[podns.Net])) {
				t.Fatalf("/host/%s in B's container holds %q, want pod A's %s", filepath.Base(dir), ls, filepath.Base(files[podns.Net]))
			}
			if unbindableInNewMountNS(t, dir) {
				inB := dockerExec(t, agent, "cat", "/proc/self/mountinfo")
				for _, m := range procutil.ParseMountinfo([]byte(inB)) {
					if strings.HasPrefix(filepath.Base(m.MountPoint), "pod-") && (m.FSType == "nsfs" || m.FSType == "tmpfs") {
						t.Errorf("B's container has a copy of a pod's namespace or /dev/shm: %s (%s %s)", m.MountPoint, m.FSType, m.Root)
					}
				}
			} else {
				t.Logf("this kernel (%s) does not keep %s unbindable in a new mount namespace: B's container holds copies of the pods' namespaces until they are removed; not checked",
					strings.TrimSpace(mustRun(t, "uname", "-r")), dir)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(mustRun(t, "docker", "inspect", "--format", "{{.State.Pid}}", agent)))
			if err != nil || pid <= 0 {
				t.Fatalf("pid of B's container: %v", err)
			}

			// Held open, A's namespaces outlive its files: their inode
			// numbers cannot be reused by another pod's meanwhile.
			for kind, f := range files {
				if kind == "shm" {
					continue
				}
				fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Close(fd)
			}
			e.mustCrictl("stopp", a)
			e.mustCrictl("rmp", a)
			for _, f := range files {
				if _, err := os.Stat(f); !os.IsNotExist(err) {
					t.Errorf("%s after rmp: %v, want it removed", f, err)
				}
			}
			if left := aMounts(fmt.Sprintf("/proc/%d/mountinfo", pid)); len(left) > 0 {
				t.Errorf("after pod A was removed, B's mount namespace still holds its namespaces: %q", left)
			}
			if left := aMounts("/proc/self/mountinfo"); len(left) > 0 {
				t.Errorf("after pod A was removed, the host still has %q mounted", left)
			}
		})
	}
}

// unbindableInNewMountNS says whether dir's mount is still unbindable
// in a mount namespace made from this one, as runc makes a container's.
func unbindableInNewMountNS(t *testing.T, dir string) bool {
	t.Helper()
	out := mustRun(t, "unshare", "--mount", "--propagation", "unchanged", "cat", "/proc/self/mountinfo")
	return slices.ContainsFunc(procutil.ParseMountinfo([]byte(out)), func(m procutil.Mount) bool {
		return m.MountPoint == dir && slices.Contains(m.Optional, "unbindable")
	})
}

func mountinfo(t *testing.T, path string) []procutil.Mount {
	t.Helper()
	m, err := procutil.ReadMountinfo(path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mountsUnderDir lists, for a failure's message, the mounts at or below dir.
func mountsUnderDir(t *testing.T, path, dir string) string {
	var b strings.Builder
	for _, m := range mountinfo(t, path) {
		if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
			fmt.Fprintf(&b, "%d %d %s %s %q\n", m.ID, m.Parent, m.MountPoint, m.FSType, m.Optional)
		}
	}
	return b.String()
}
