package cgstats

import (
	"errors"
	"os"
	"path"
)

// FS reads cgroup files below Root, where the hierarchies are mounted
// (/sys/fs/cgroup; tests point it at a fake tree).
type FS struct {
	Root string
}

// Stats is one cgroup's usage. A nil field could not be read: the cgroup
// is gone (its tasks exited meanwhile), its controller is not mounted, or
// the kernel lacks the file (pressure needs cgroup v2 and CONFIG_PSI).
type Stats struct {
	// CPUNanos is the cumulative CPU time of the cgroup's tasks.
	CPUNanos *uint64
	Memory   *Memory
	// Tasks is pids.current: the processes and threads in the cgroup and
	// below, which is what a pids limit counts.
	Tasks *uint64
	// Pressure stall information, on cgroup v2 only.
	CPUPressure, MemoryPressure, IOPressure *PSI
}

// Memory is a cgroup's memory use in bytes, and its page fault counts,
// hierarchical (the cgroup and everything below).
type Memory struct {
	// Usage is all memory charged to the cgroup, page cache included.
	Usage uint64
	// InactiveFile is the page cache the kernel would reclaim first.
	InactiveFile uint64
	// RSS is anonymous memory (v1 total_rss, v2 anon).
	RSS uint64
	// Cache is the page cache (v1 total_cache, v2 file).
	Cache                       uint64
	PageFaults, MajorPageFaults uint64
}

// WorkingSet is the usage less the inactive page cache, as kubelet and
// cAdvisor compute it: the memory the cgroup cannot give back cheaply,
// which is what memory pressure evictions rank by.
func (m *Memory) WorkingSet() uint64 {
	if m.Usage < m.InactiveFile {
		return 0
	}
	return m.Usage - m.InactiveFile
}

// Read reads the usage of the cgroup p names: v1 controllers where
// mounted, the v2 files otherwise.
func (fs FS) Read(p Paths) Stats {
	var s Stats
	if v, ok := fs.readUint(p, "cpuacct", "cpuacct.usage", ""); ok {
		s.CPUNanos = &v
	} else if data, err := fs.v2File(p, "cpu.stat"); err == nil {
		if usec, ok := ParseFlatKeyed(data)["usage_usec"]; ok {
			v := usec * 1000
			s.CPUNanos = &v
		}
	}
	s.Memory = fs.memory(p)
	if v, ok := fs.readUint(p, "pids", "pids.current", "pids.current"); ok {
		s.Tasks = &v
	}
	if p.V2Only() {
		s.CPUPressure = fs.psi(p, "cpu.pressure")
		s.MemoryPressure = fs.psi(p, "memory.pressure")
		s.IOPressure = fs.psi(p, "io.pressure")
	}
	return s
}

func (fs FS) memory(p Paths) *Memory {
	if usage, ok := fs.readUint(p, "memory", "memory.usage_in_bytes", ""); ok {
		// The total_ figures count the cgroups below too, as usage does.
		data, _ := fs.v1File(p, "memory", "memory.stat")
		st := ParseFlatKeyed(data)
		return &Memory{
			Usage: usage, InactiveFile: st["total_inactive_file"], RSS: st["total_rss"], Cache: st["total_cache"],
			PageFaults: st["total_pgfault"], MajorPageFaults: st["total_pgmajfault"],
		}
	}
	if usage, ok := fs.readUint(p, "", "", "memory.current"); ok {
		// v2's memory.stat is hierarchical already.
		data, _ := fs.v2File(p, "memory.stat")
		st := ParseFlatKeyed(data)
		return &Memory{
			Usage: usage, InactiveFile: st["inactive_file"], RSS: st["anon"], Cache: st["file"],
			PageFaults: st["pgfault"], MajorPageFaults: st["pgmajfault"],
		}
	}
	return nil
}

func (fs FS) psi(p Paths, file string) *PSI {
	data, err := fs.v2File(p, file)
	if err != nil {
		return nil
	}
	psi, err := ParsePSI(data)
	if err != nil {
		return nil
	}
	return psi
}

// readUint reads a single-value file: the v1 one of controller if the
// process is in that controller's hierarchy, else the v2 one.
func (fs FS) readUint(p Paths, controller, v1File, v2File string) (uint64, bool) {
	var data []byte
	err := os.ErrNotExist
	if controller != "" && v1File != "" {
		data, err = fs.v1File(p, controller, v1File)
	}
	if err != nil && v2File != "" {
		data, err = fs.v2File(p, v2File)
	}
	if err != nil {
		return 0, false
	}
	v, err := ParseUint(data)
	return v, err == nil
}

// v1Mounts are the directories a v1 controller may be mounted at: its
// name, or the co-mounted pair systemd and most distributions use for
// cpu and cpuacct (with "cpu" and "cpuacct" symlinks, which some setups
// lack).
var v1Mounts = map[string][]string{
	"cpu":     {"cpu", "cpu,cpuacct", "cpuacct,cpu"},
	"cpuacct": {"cpuacct", "cpu,cpuacct", "cpuacct,cpu"},
}

func (fs FS) v1File(p Paths, controller, file string) ([]byte, error) {
	rel, ok := p[controller]
	if !ok {
		return nil, os.ErrNotExist
	}
	mounts := v1Mounts[controller]
	if mounts == nil {
		mounts = []string{controller}
	}
	for _, m := range mounts {
		data, err := os.ReadFile(path.Join(fs.Root, m, rel, file))
		if !errors.Is(err, os.ErrNotExist) {
			return data, err
		}
	}
	return nil, os.ErrNotExist
}

// v2File reads a file of the unified hierarchy: mounted at the root on a
// pure v2 host, at <root>/unified in the hybrid layout.
func (fs FS) v2File(p Paths, file string) ([]byte, error) {
	rel, ok := p[Unified]
	if !ok {
		return nil, os.ErrNotExist
	}
	return os.ReadFile(path.Join(fs.v2Root(p), rel, file))
}

func (fs FS) v2Root(p Paths) string {
	if p.V2Only() {
		return fs.Root
	}
	return path.Join(fs.Root, "unified")
}

// Children lists the cgroups directly below p's, in the hierarchy Name
// reads.
func (fs FS) Children(p Paths) ([]string, error) {
	var dir string
	if rel, ok := p["memory"]; ok {
		dir = path.Join(fs.Root, "memory", rel)
	} else if rel, ok := p[Unified]; ok {
		dir = path.Join(fs.v2Root(p), rel)
	} else {
		return nil, os.ErrNotExist
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Sum adds up the stats of disjoint cgroups: the containers of a pod
// whose own cgroup is not known. A figure some parts lack (a container
// that exited meanwhile) is the sum of the others; one no part has stays
// nil. Pressure cannot be added up and is left out.
func Sum(parts ...Stats) Stats {
	var s Stats
	add := func(dst **uint64, v *uint64) {
		if v == nil {
			return
		}
		if *dst == nil {
			*dst = new(uint64)
		}
		**dst += *v
	}
	for _, p := range parts {
		add(&s.CPUNanos, p.CPUNanos)
		add(&s.Tasks, p.Tasks)
		if m := p.Memory; m != nil {
			if s.Memory == nil {
				s.Memory = &Memory{}
			}
			s.Memory.Usage += m.Usage
			s.Memory.InactiveFile += m.InactiveFile
			s.Memory.RSS += m.RSS
			s.Memory.Cache += m.Cache
			s.Memory.PageFaults += m.PageFaults
			s.Memory.MajorPageFaults += m.MajorPageFaults
		}
	}
	return s
}
