package stats

import (
	"sync"

	"github.com/netshim/netshim/pkg/cgstats"
)

// cgroupCache remembers the cgroup of each running container (workload or
// infra) that stats were read for, found once through its pid. Docker
// makes a container's cgroup when it starts it and never moves it, and
// cgstats.Paths.Container narrows a process's membership to that cgroup
// whatever the process does below it: so a later reading of
// /proc/<pid>/cgroup of the same process says nothing new. kubelet reads
// the stats of every container every 10 s; each reading was one /proc
// read more than the cgroup files themselves.
//
// An entry holds for the pid it was found with: a container Docker
// restarts in place gets a new one, and is looked up again. A pid the
// container's process no longer has (it exited, the index has not caught
// up) may still name the cgroup, whose files are then the container's
// last figures or gone: never another process's, as a fresh lookup
// guarantees by checking the path names the container.
type cgroupCache struct {
	mu      sync.Mutex
	entries map[string]cachedCgroup
}

type cachedCgroup struct {
	pid   int
	paths cgstats.Paths
}

// get returns the cgroup of container id found with pid.
func (c *cgroupCache) get(id string, pid int) (cgstats.Paths, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok || e.pid != pid {
		return nil, false
	}
	return e.paths, true
}

// put remembers the cgroup of container id, found with pid. The caller
// hands paths over: they are shared by every later reader, read-only.
func (c *cgroupCache) put(id string, pid int, paths cgstats.Paths) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]cachedCgroup{}
	}
	c.entries[id] = cachedCgroup{pid: pid, paths: paths}
}

// retain drops the entries of the containers keep says are gone.
func (c *cgroupCache) retain(keep func(id string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.entries {
		if !keep(id) {
			delete(c.entries, id)
		}
	}
}
