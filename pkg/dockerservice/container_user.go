package dockerservice

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/podns"
	"github.com/netshim/netshim/pkg/procutil"
)

// runningUser is the identity of a running container's first process, for
// ContainerStatus.user: its uid, gid and supplementary groups as the
// kernel has them in /proc/<pid>/status. Docker resolves the image's
// /etc/passwd and /etc/group inside the container, so only the process
// says which groups it got. No Docker call: the pid is the index's. It
// is nil when the container does not run, or its process cannot be read
// (it just exited; the next status has the container exited).
//
// The status file is read before the pid is checked to be the
// container's: a pid reused in between fails the check.
//
// The CRI asks for the identity initially attached to the container's
// first process (api.proto), not for what the process may have switched
// to since: so it is read once per process and remembered, and the
// ContainerStatus kubelet polls (every 10 s per container, for its log
// rotation) reads nothing. known says which containers still exist; the
// others' entries are dropped when a new one is added.
func (c *containerRuntime) runningUser(rec *store.Record, known func(id string) bool) *runtimeapi.ContainerUser {
	if !rec.Running() || rec.Pid <= 0 {
		return nil
	}
	if u, ok := c.users.get(rec.ID, rec.Pid); ok {
		return u
	}
	u, err := readProcessUser(c.procRoot, rec.Pid)
	if err == nil {
		err = procutil.InContainer(c.procRoot, rec.Pid, rec.ID)
	}
	if err != nil {
		klog.V(4).InfoS("Cannot read the identity of a container's process", "containerID", rec.ID, "pid", rec.Pid, "err", err)
		return nil
	}
	user := &runtimeapi.ContainerUser{Linux: u}
	c.users.put(rec.ID, rec.Pid, user, known)
	return user
}

// processUsers holds the identity read for each container's process.
type processUsers struct {
	mu   sync.Mutex
	byID map[string]processUser
}

type processUser struct {
	pid  int
	user *runtimeapi.ContainerUser // shared by every answer: read-only
}

func (p *processUsers) get(id string, pid int) (*runtimeapi.ContainerUser, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.byID[id]
	if !ok || e.pid != pid {
		return nil, false
	}
	return e.user, true
}

func (p *processUsers) put(id string, pid int, user *runtimeapi.ContainerUser, known func(id string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID == nil {
		p.byID = map[string]processUser{}
	}
	for old := range p.byID {
		if old != id && !known(old) {
			delete(p.byID, old)
		}
	}
	p.byID[id] = processUser{pid: pid, user: user}
}

// readProcessUser parses the Uid, Gid and Groups lines of
// procRoot/<pid>/status. The first of the four uids and gids is the real
// one, which runc sets with the others to the container's user.
func readProcessUser(procRoot string, pid int) (*runtimeapi.LinuxContainerUser, error) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return nil, err
	}
	u := &runtimeapi.LinuxContainerUser{}
	var seen int
	for line := range strings.Lines(string(data)) {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		switch key {
		case "Uid", "Gid":
			if len(fields) == 0 {
				return nil, fmt.Errorf("pid %d: empty %s line", pid, key)
			}
			id, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("pid %d: %s line %q: %w", pid, key, val, err)
			}
			if key == "Uid" {
				u.Uid = id
			} else {
				u.Gid = id
			}
			seen++
		case "Groups":
			for _, f := range fields {
				g, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("pid %d: Groups line %q: %w", pid, val, err)
				}
				u.SupplementalGroups = append(u.SupplementalGroups, g)
			}
			seen++
		}
	}
	if seen != 3 {
		return nil, errors.New("no Uid, Gid and Groups lines in " + filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	}
	return inProcessUserns(procRoot, pid, u)
}

// inProcessUserns translates the node's ids of a process's identity into
// the ids its user namespace sees (a pod with hostUsers: false): the CRI
// reports the user as the container knows it, uid 0 for its root. An id
// the namespace does not map is the kernel's overflow id, 65534, as the
// process would see it.
func inProcessUserns(procRoot string, pid int, u *runtimeapi.LinuxContainerUser) (*runtimeapi.LinuxContainerUser, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	uids, err := readIDMap(filepath.Join(dir, "uid_map"))
	if err != nil {
		return nil, err
	}
	gids, err := readIDMap(filepath.Join(dir, "gid_map"))
	if err != nil {
		return nil, err
	}
	if uids == nil && gids == nil {
		return u, nil // the node's user namespace
	}
	in := func(ms []podns.IDMap, id int64) int64 {
		if c, ok := podns.ContainerOf(ms, uint32(id)); ok {
			return int64(c)
		}
		return overflowID
	}
	out := &runtimeapi.LinuxContainerUser{Uid: in(uids, u.Uid), Gid: in(gids, u.Gid)}
	for _, g := range u.SupplementalGroups {
		out.SupplementalGroups = append(out.SupplementalGroups, in(gids, g))
	}
	return out, nil
}

// overflowID is the id the kernel shows for one a user namespace does not
// map (/proc/sys/kernel/overflowuid).
const overflowID = 65534

// readIDMap reads a uid_map or gid_map file; nil for the identity map of
// the node's user namespace ("0 0 4294967295"), or a file that does not
// exist (a kernel without user namespaces).
func readIDMap(path string) ([]podns.IDMap, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ms []podns.IDMap
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("%s: line %q: want three numbers", path, strings.TrimSpace(line))
		}
		m, err := podns.ParseIDMap(f[0] + ":" + f[1] + ":" + f[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		ms = append(ms, m)
	}
	if len(ms) == 1 && ms[0] == (podns.IDMap{ContainerID: 0, HostID: 0, Size: 4294967295}) {
		return nil, nil
	}
	return ms, nil
}
