package podns

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// User is the kind of a pod's user namespace (hostUsers: false). It is
// pinned by PinUser, not Pin: a Go process has many threads, and the
// kernel lets only a single-threaded process unshare its user namespace.
const User Kind = "user"

// IDMap is one range of a user namespace's uid or gid map: Size ids from
// ContainerID inside map to HostID on the node.
type IDMap struct {
	ContainerID, HostID, Size uint32
}

// String is the range as the marker carries it: "container:host:size".
func (m IDMap) String() string {
	return fmt.Sprintf("%d:%d:%d", m.ContainerID, m.HostID, m.Size)
}

// ParseIDMap reads a range written by String.
func ParseIDMap(s string) (IDMap, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return IDMap{}, fmt.Errorf("id map %q: want container:host:size", s)
	}
	var v [3]uint32
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return IDMap{}, fmt.Errorf("id map %q: %w", s, err)
		}
		v[i] = uint32(n)
	}
	m := IDMap{ContainerID: v[0], HostID: v[1], Size: v[2]}
	if m.Size == 0 {
		return IDMap{}, fmt.Errorf("id map %q: a range of no ids", s)
	}
	return m, nil
}

// MapsRoot says whether the ranges map container id 0, which a pod's user
// namespace must: its containers' root is what every image expects.
func MapsRoot(ms []IDMap) bool {
	for _, m := range ms {
		if m.ContainerID == 0 {
			return true
		}
	}
	return false
}

// HostOf translates a container id to the node's through ms, and says
// whether it is mapped.
func HostOf(ms []IDMap, id uint32) (uint32, bool) {
	for _, m := range ms {
		if id >= m.ContainerID && uint64(id) < uint64(m.ContainerID)+uint64(m.Size) {
			return m.HostID + (id - m.ContainerID), true
		}
	}
	return 0, false
}

// ContainerOf translates a node id to the container's through ms, and
// says whether it is mapped.
func ContainerOf(ms []IDMap, id uint32) (uint32, bool) {
	for _, m := range ms {
		if id >= m.HostID && uint64(id) < uint64(m.HostID)+uint64(m.Size) {
			return m.ContainerID + (id - m.HostID), true
		}
	}
	return 0, false
}

// PinUser makes a user namespace with the uid and gid maps, and a new
// namespace of each of kinds owned by it, and pins them on Path(name,
// kind) (User's among them): a pod's own user namespace, with the network
// (and IPC, UTS) namespaces its containers join. The others must be owned
// by the user namespace, not by the node's: the kernel lets a container's
// root mount sysfs only in a network namespace its user namespace owns.
//
// The namespaces belong to a child process that never runs
// (InNewNamespaces); they are bind-mounted, and it is killed. (The kernel
// lets only a single-threaded process unshare a user namespace, so the
// thread trick of Pin does not work.) setgroups stays allowed in the
// namespace: runc sets a container's supplementary groups there. On
// failure nothing is left behind.
func (p *Pinner) PinUser(name string, uids, gids []IDMap, kinds ...Kind) (Paths, error) {
	if name == "" || strings.ContainsAny(name, "/,=") || name == "." || name == ".." {
		return nil, fmt.Errorf("pinned namespace name %q: want a plain file name", name)
	}
	if len(uids) == 0 || len(gids) == 0 {
		return nil, errors.New("a user namespace needs a uid map and a gid map")
	}
	flags := syscall.CLONE_NEWUSER
	all := []Kind{User}
	for _, k := range kinds {
		if k == User {
			continue
		}
		f, err := k.cloneFlag()
		if err != nil {
			return nil, err
		}
		flags |= f
		all = append(all, k)
	}
	paths, err := p.mountPoints(name, all)
	if err != nil {
		return nil, err
	}
	err = InNewNamespaces(uintptr(flags), uids, gids, func(pid int) error {
		for k, path := range paths {
			src := fmt.Sprintf("/proc/%d/ns/%s", pid, k)
			if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("bind-mounting the new %s namespace on %s: %w", k, path, err)
			}
		}
		return nil
	})
	if err != nil {
		p.removeAll(paths)
		return nil, fmt.Errorf("pinning the user namespace %s: %w", name, err)
	}
	return paths, nil
}

// InNewNamespaces calls fn with the pid of a process in new namespaces of
// flags (CLONE_NEWUSER among them, with the uid and gid maps; setgroups
// allowed), whose /proc/<pid>/ns/ fn may open or bind-mount, and kills the
// process when fn returns. The process never runs a line of its program:
// it is forked traced and stops at its exec. (A multi-threaded process
// such as netshim cannot unshare a user namespace itself; ptrace ties the
// child to the thread that forked it, hence the locked thread.)
func InNewNamespaces(flags uintptr, uids, gids []IDMap, fn func(pid int) error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.Command("/proc/self/exe")
		cmd.Args = []string{"netshim-namespaces"}
		cmd.Env = []string{}
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:                 flags,
			UidMappings:                sysMaps(uids),
			GidMappings:                sysMaps(gids),
			GidMappingsEnableSetgroups: true,
			Ptrace:                     true,
			Pdeathsig:                  syscall.SIGKILL,
		}
		if err := cmd.Start(); err != nil {
			errc <- fmt.Errorf("starting a process in new namespaces: %w", err)
			return
		}
		defer func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}()
		errc <- fn(cmd.Process.Pid)
	}()
	return <-errc
}

func sysMaps(ms []IDMap) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(ms))
	for i, m := range ms {
		out[i] = syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)}
	}
	return out
}
