// Package cgstats reads the resource usage the kernel keeps for a cgroup
// (CPU time, memory, task count, pressure stall information) and the
// interface counters of a network namespace, from the files under
// /sys/fs/cgroup and /proc. It knows cgroup v1 (one hierarchy per
// controller), v2 (one unified hierarchy) and the hybrid layout (v1
// controllers plus an empty v2 tree at <root>/unified), and the shapes the
// cgroupfs and systemd drivers give container and pod cgroups. It makes no
// system call beyond reading those files.
package cgstats

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
)

// Paths is a process's cgroup membership as /proc/<pid>/cgroup lists it:
// v1 controller name -> path in that controller's hierarchy, and the key
// "" for the cgroup v2 unified hierarchy. Named v1 hierarchies
// ("name=systemd") are kept under their full name; no statistic is read
// from them.
type Paths map[string]string

// Unified is the key of the cgroup v2 hierarchy in Paths.
const Unified = ""

// ErrNoCgroup says /proc/<pid>/cgroup is gone: the process exited.
var ErrNoCgroup = errors.New("the process has exited")

// ReadProcCgroup reads procRoot/<pid>/cgroup.
func ReadProcCgroup(procRoot string, pid int) (Paths, error) {
	data, err := os.ReadFile(path.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("pid %d: %w", pid, ErrNoCgroup)
		}
		return nil, fmt.Errorf("reading the cgroups of pid %d: %w", pid, err)
	}
	return ParseProcCgroup(data), nil
}

// ParseProcCgroup parses the content of /proc/<pid>/cgroup:
// "hierarchy-ID:controller,controller:path" per line; the v2 hierarchy has
// ID 0 and no controllers. Malformed lines are skipped.
func ParseProcCgroup(data []byte) Paths {
	paths := Paths{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			continue
		}
		if f[1] == "" {
			paths[Unified] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			paths[c] = f[2]
		}
	}
	return paths
}

// V2Only says the process lives on a pure cgroup v2 host: no v1
// controller is mounted. Pressure files are read only then: in the hybrid
// layout the v2 tree holds no controllers and a process's place in it
// need not match its v1 cgroups.
func (p Paths) V2Only() bool {
	_, ok := p[Unified]
	return ok && len(p) == 1
}

// Name is the cgroup's path as cAdvisor and kubelet name it: the memory
// controller's on cgroup v1, the unified one on v2. "" when neither is
// known.
func (p Paths) Name() string {
	if v, ok := p["memory"]; ok {
		return v
	}
	return p[Unified]
}

// Parent is the membership one level up in every hierarchy.
func (p Paths) Parent() Paths {
	out := make(Paths, len(p))
	for k, v := range p {
		out[k] = path.Dir(v)
	}
	return out
}

// Container narrows p to the cgroup of the container with this full ID:
// in each hierarchy, the nearest ancestor (or the path itself) that
// IsContainerCgroup names after it. A process of a container that made
// cgroups of its own (systemd in a container moves itself to
// "<container>/init.scope") is found there. Hierarchies where no such
// ancestor exists are dropped (a named hierarchy the engine does not
// manage); ok is false if the one Name reads is among them, which
// means the process is not (or no longer) the container's: its pid was
// given to another process. Relative paths, as a cgroup namespace shows
// them ("/../docker-<id>.scope"), cannot be located and are dropped too.
func (p Paths) Container(id string) (Paths, bool) {
	if id == "" {
		return nil, false
	}
	out := make(Paths, len(p))
	for k, v := range p {
		if strings.Contains(v, "/..") {
			continue
		}
		for dir := v; dir != "/" && dir != "."; dir = path.Dir(dir) {
			if IsContainerCgroup(dir, id) {
				out[k] = dir
				break
			}
		}
	}
	key := Unified
	if _, ok := p["memory"]; ok {
		key = "memory"
	}
	if _, ok := out[key]; !ok {
		return nil, false
	}
	return out, true
}

// IsContainerCgroup says whether the cgroup dir is the one Docker makes
// for the container with this full ID: "<parent>/<id>" with the cgroupfs
// driver, "<slice>/docker-<id>.scope" with the systemd driver (engines
// speaking Docker's API use other prefixes, e.g. "libpod-<id>.scope").
func IsContainerCgroup(dir, id string) bool {
	base := path.Base(dir)
	return base == id || (strings.HasSuffix(base, "-"+id+".scope") && len(base) > len(id)+len("-.scope"))
}

// IsKubeletPodCgroup says whether dir is the cgroup kubelet makes for the
// pod with this UID: "<qos>/pod<uid>" with the cgroupfs driver,
// "kubepods[-<qos>]-pod<uid with '_' for '-'>.slice" with systemd (whose
// unit names cannot hold '-' inside a component).
func IsKubeletPodCgroup(dir, uid string) bool {
	if uid == "" {
		return false
	}
	base := path.Base(dir)
	if base == "pod"+uid {
		return true
	}
	return strings.HasPrefix(base, "kubepods") && strings.HasSuffix(base, "-pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
}
