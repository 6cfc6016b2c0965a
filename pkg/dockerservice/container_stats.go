package dockerservice

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// Container stats are read from the containers' cgroups, found through
// their pid in the index: no Docker call (Docker's stats API samples for
// a second per container). The writable layer's usage is the last
// background measurement (container_layer.go): Docker only computes it by
// walking the layer (inspect with size), far too costly for kubelet's
// periodic listing.

// cpuSample is a container's CPU usage at one instant, kept to turn the
// next reading into a rate (UsageNanoCores), as kubelet expects.
type cpuSample struct {
	at    time.Time
	usage uint64
}

// statsReader reads cgroup statistics; its roots are variables for tests.
type statsReader struct {
	procRoot, cgroupRoot string

	mu   sync.Mutex
	prev map[string]cpuSample
}

func newStatsReader() *statsReader {
	return &statsReader{procRoot: "/proc", cgroupRoot: "/sys/fs/cgroup", prev: map[string]cpuSample{}}
}

// ContainerStats reports one container's CPU and memory usage.
func (ds *DockerService) ContainerStats(_ context.Context, r *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	rec, err := ds.mustFindContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: ds.containerStats(rec, time.Now())}, nil
}

// ListContainerStats reports the usage of the containers matching the
// filter (ID prefix, pod sandbox, label selector), created and exited
// ones included, with no usage figures for those not running.
func (ds *DockerService) ListContainerStats(_ context.Context, r *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	if err := ds.requireSynced(); err != nil {
		return nil, err
	}
	f := r.GetFilter()
	recs := ds.containersMatching(f.GetPodSandboxId(), f.GetId(), f.GetLabelSelector())
	now := time.Now()
	out := make([]*runtimeapi.ContainerStats, 0, len(recs))
	for _, rec := range recs {
		out = append(out, ds.containerStats(rec, now))
	}
	if f.GetId() == "" && f.GetPodSandboxId() == "" && len(f.GetLabelSelector()) == 0 {
		ds.containers.stats.forgetGone(recs)
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: out}, nil
}

// read builds one container's stats. A figure that cannot be read (the
// container stopped meanwhile, an unknown cgroup layout) is left out
// rather than failing the whole listing.
func (s *statsReader) read(rec *store.Record, now time.Time) *runtimeapi.ContainerStats {
	info := containerInfoOf(rec)
	ts := now.UnixNano()
	st := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: rec.ID, Metadata: info.metadata, Labels: info.labels, Annotations: info.annotations},
		Cpu:        &runtimeapi.CpuUsage{Timestamp: ts},
		Memory:     &runtimeapi.MemoryUsage{Timestamp: ts},
	}
	if !rec.Running() || rec.Pid <= 0 {
		return st
	}
	paths := s.cgroupPaths(rec.Pid)
	if usage, ok := s.cpuUsage(paths); ok {
		st.Cpu.UsageCoreNanoSeconds = &runtimeapi.UInt64Value{Value: usage}
		if rate, ok := s.rate(rec.ID, now, usage); ok {
			st.Cpu.UsageNanoCores = &runtimeapi.UInt64Value{Value: rate}
		}
	}
	s.memoryUsage(paths, st.Memory)
	return st
}

// rate turns two CPU readings into nanocores, remembering this one.
func (s *statsReader) rate(id string, now time.Time, usage uint64) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, ok := s.prev[id]
	s.prev[id] = cpuSample{at: now, usage: usage}
	elapsed := now.Sub(prev.at)
	if !ok || elapsed <= 0 || usage < prev.usage {
		return 0, false
	}
	return uint64(float64(usage-prev.usage) / elapsed.Seconds()), true
}

// forgetGone drops the CPU samples of containers no longer listed.
func (s *statsReader) forgetGone(listed []*store.Record) {
	keep := make(map[string]bool, len(listed))
	for _, r := range listed {
		keep[r.ID] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.prev {
		if !keep[id] {
			delete(s.prev, id)
		}
	}
}

// cgroupPaths reads /proc/<pid>/cgroup: controller (or "" for the cgroup
// v2 unified hierarchy) -> path.
func (s *statsReader) cgroupPaths(pid int) map[string]string {
	data, err := os.ReadFile(filepath.Join(s.procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil
	}
	paths := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// "4:memory:/docker/<id>", "2:cpu,cpuacct:/...", "0::/..."
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			paths[""] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			paths[c] = f[2]
		}
	}
	return paths
}

// cgroupFile finds a controller's file: cgroup v1 mounts a controller at
// <root>/<name> (or a combined "cpu,cpuacct" with symlinks), v2 has one
// tree at <root> (or <root>/unified in hybrid mode).
func (s *statsReader) cgroupFile(paths map[string]string, controller, v1File, v2File string) (string, bool) {
	if p, ok := paths[controller]; ok && controller != "" && v1File != "" {
		for _, mount := range []string{controller, "cpu,cpuacct"} {
			f := filepath.Join(s.cgroupRoot, mount, p, v1File)
			if _, err := os.Stat(f); err == nil {
				return f, true
			}
		}
	}
	if p, ok := paths[""]; ok && v2File != "" {
		for _, root := range []string{s.cgroupRoot, filepath.Join(s.cgroupRoot, "unified")} {
			f := filepath.Join(root, p, v2File)
			if _, err := os.Stat(f); err == nil {
				return f, true
			}
		}
	}
	return "", false
}

// cpuUsage is the cumulative CPU time in nanoseconds.
func (s *statsReader) cpuUsage(paths map[string]string) (uint64, bool) {
	if f, ok := s.cgroupFile(paths, "cpuacct", "cpuacct.usage", ""); ok {
		return readUint(f)
	}
	if f, ok := s.cgroupFile(paths, "", "", "cpu.stat"); ok {
		if v, ok := readStat(f)["usage_usec"]; ok {
			return v * 1000, true
		}
	}
	return 0, false
}

// memoryUsage fills usage, working set (usage less inactive file pages,
// as kubelet and cAdvisor compute it), RSS and page faults.
func (s *statsReader) memoryUsage(paths map[string]string, m *runtimeapi.MemoryUsage) {
	if f, ok := s.cgroupFile(paths, "memory", "memory.usage_in_bytes", ""); ok {
		usage, ok := readUint(f)
		if !ok {
			return
		}
		stat := readStat(filepath.Join(filepath.Dir(f), "memory.stat"))
		setMemory(m, usage, stat["total_inactive_file"], stat["total_rss"], stat["total_pgfault"], stat["total_pgmajfault"])
		return
	}
	if f, ok := s.cgroupFile(paths, "", "", "memory.current"); ok {
		usage, ok := readUint(f)
		if !ok {
			return
		}
		stat := readStat(filepath.Join(filepath.Dir(f), "memory.stat"))
		setMemory(m, usage, stat["inactive_file"], stat["anon"], stat["pgfault"], stat["pgmajfault"])
	}
}

func setMemory(m *runtimeapi.MemoryUsage, usage, inactiveFile, rss, faults, majorFaults uint64) {
	ws := uint64(0)
	if usage > inactiveFile {
		ws = usage - inactiveFile
	}
	m.UsageBytes = &runtimeapi.UInt64Value{Value: usage}
	m.WorkingSetBytes = &runtimeapi.UInt64Value{Value: ws}
	m.RssBytes = &runtimeapi.UInt64Value{Value: rss}
	m.PageFaults = &runtimeapi.UInt64Value{Value: faults}
	m.MajorPageFaults = &runtimeapi.UInt64Value{Value: majorFaults}
}

func readUint(path string) (uint64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return v, err == nil
}

// readStat reads a "key value" per line cgroup file.
func readStat(path string) map[string]uint64 {
	out := map[string]uint64{}
	data, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}
