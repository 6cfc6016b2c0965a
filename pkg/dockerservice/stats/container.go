// Package stats reads the usage of containers and pods from their cgroups
// and network namespaces, and builds the CRI's stats and metrics of them:
// no Docker call on any of these paths.
package stats

import (
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/cgstats"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// Container stats are read from the containers' cgroups, found through
// their pid in the index: no Docker call (Docker's stats API samples for
// a second per container). The writable layer's usage is the last
// background measurement (Options.WritableLayer): Docker only computes it by
// walking the layer (inspect with size), far too costly for kubelet's
// periodic listing.

// Reader reads cgroup statistics and keeps what makes rates of them.
type Reader struct {
	procRoot, cgroupRoot string
	now                  func() time.Time

	// CPU samples of containers and of pods, kept apart so that
	// forgetting the containers no longer listed leaves the pods'.
	containerCPU, podCPU rateKeeper
	// cgroups are the containers' cgroups found so far
	// (cgroups.go).
	cgroups cgroupCache
	// writableLayer is a container's last measured writable layer, nil
	// when none; unset, none is reported.
	writableLayer func(id string) *runtimeapi.FilesystemUsage
}

// Options are where a Reader reads and what it reports besides cgroups;
// zero fields take the node's (/proc, /sys/fs/cgroup, time.Now).
type Options struct {
	ProcRoot, CgroupRoot string
	Now                  func() time.Time
	// WritableLayer is a container's last measured writable layer (the
	// runtime's background measuring, pkg/layerusage), nil when none.
	WritableLayer func(id string) *runtimeapi.FilesystemUsage
}

// New is a Reader of the cgroups under opts' roots.
func New(opts Options) *Reader {
	s := &Reader{procRoot: opts.ProcRoot, cgroupRoot: opts.CgroupRoot, now: opts.Now, writableLayer: opts.WritableLayer}
	if s.procRoot == "" {
		s.procRoot = "/proc"
	}
	if s.cgroupRoot == "" {
		s.cgroupRoot = "/sys/fs/cgroup"
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Now is the time figures read now are stamped with.
func (s *Reader) Now() time.Time { return s.now() }

// Container reads one container's figures and builds its CRI stats.
func (s *Reader) Container(rec *store.Record, now time.Time) *runtimeapi.ContainerStats {
	return s.containerStats(rec, s.sampleContainer(rec), now)
}

// ForgetContainersBut drops the CPU samples of the containers not in
// listed (an unfiltered listing: the containers that exist), and the
// cgroups of those known no more.
func (s *Reader) ForgetContainersBut(listed []*store.Record, known func(id string) bool) {
	s.containerCPU.forgetAllBut(recordIDs(listed))
	s.cgroups.retain(known)
}

// ForgetPodsBut drops the CPU samples of the pods not in listed (an
// unfiltered listing: the sandboxes that exist).
func (s *Reader) ForgetPodsBut(listed []*store.Record) {
	s.podCPU.forgetAllBut(recordIDs(listed))
}

// cgroupSample is a running container's cgroup and its usage, read at one
// instant. paths is nil when there are no figures: the container is not
// running, or its pid no longer names a process in its cgroup (it exited
// and the pid was reused; the index has not caught up yet).
type cgroupSample struct {
	paths cgstats.Paths
	stats cgstats.Stats
}

func (s *Reader) fs() cgstats.FS { return cgstats.FS{Root: s.cgroupRoot} }

// containerCgroup finds a running container's cgroup through its pid,
// once per process (cgroups.go).
func (s *Reader) containerCgroup(rec *store.Record) (cgstats.Paths, bool) {
	if !rec.Running() || rec.Pid <= 0 {
		return nil, false
	}
	if paths, ok := s.cgroups.get(rec.ID, rec.Pid); ok {
		return paths, true
	}
	all, err := cgstats.ReadProcCgroup(s.procRoot, rec.Pid)
	if err != nil {
		return nil, false
	}
	paths, ok := all.Container(rec.ID)
	if ok {
		s.cgroups.put(rec.ID, rec.Pid, paths)
	}
	return paths, ok
}

// sampleContainer reads a container's usage; no figures when it is not
// running.
func (s *Reader) sampleContainer(rec *store.Record) cgroupSample {
	paths, ok := s.containerCgroup(rec)
	if !ok {
		return cgroupSample{}
	}
	return cgroupSample{paths: paths, stats: s.fs().Read(paths)}
}

// containerStats builds one container's stats. A figure that cannot be
// read (the container stopped meanwhile, an unknown cgroup layout) is left
// out rather than failing the whole listing.
func (s *Reader) containerStats(rec *store.Record, sample cgroupSample, now time.Time) *runtimeapi.ContainerStats {
	info := rec.ContainerInfo()
	ts := now.UnixNano()
	st := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: rec.ID, Metadata: info.Metadata, Labels: info.Labels, Annotations: info.Annotations},
		Cpu:        &runtimeapi.CpuUsage{Timestamp: ts},
		Memory:     &runtimeapi.MemoryUsage{Timestamp: ts},
	}
	// A stopped container's layer is still there, and still counts.
	if s.writableLayer != nil {
		st.WritableLayer = s.writableLayer(rec.ID)
	}
	if sample.paths == nil {
		return st
	}
	st.Cpu = cpuUsage(sample.stats, ts, func(usage uint64) (uint64, bool) {
		return s.containerCPU.rate(rec.ID, now, usage)
	})
	st.Memory = memoryUsage(sample.stats, ts)
	st.Io = ioUsage(sample.stats, ts)
	return st
}

// cpuUsage is the CRI view of a cgroup's CPU figures; rate turns the
// cumulative usage into nanocores.
func cpuUsage(st cgstats.Stats, ts int64, rate func(uint64) (uint64, bool)) *runtimeapi.CpuUsage {
	c := &runtimeapi.CpuUsage{Timestamp: ts, Psi: psiStats(st.CPUPressure)}
	if st.CPUNanos != nil {
		c.UsageCoreNanoSeconds = &runtimeapi.UInt64Value{Value: *st.CPUNanos}
		if r, ok := rate(*st.CPUNanos); ok {
			c.UsageNanoCores = &runtimeapi.UInt64Value{Value: r}
		}
	}
	return c
}

// memoryUsage is the CRI view of a cgroup's memory: usage, working set
// (usage less inactive file pages, as kubelet and cAdvisor compute it),
// RSS and page faults.
func memoryUsage(st cgstats.Stats, ts int64) *runtimeapi.MemoryUsage {
	m := &runtimeapi.MemoryUsage{Timestamp: ts, Psi: psiStats(st.MemoryPressure)}
	if mem := st.Memory; mem != nil {
		m.UsageBytes = &runtimeapi.UInt64Value{Value: mem.Usage}
		m.WorkingSetBytes = &runtimeapi.UInt64Value{Value: mem.WorkingSet()}
		m.RssBytes = &runtimeapi.UInt64Value{Value: mem.RSS}
		m.PageFaults = &runtimeapi.UInt64Value{Value: mem.PageFaults}
		m.MajorPageFaults = &runtimeapi.UInt64Value{Value: mem.MajorPageFaults}
	}
	return m
}

// ioUsage carries only I/O pressure, the one I/O figure the CRI has; nil
// without it (cgroup v1).
func ioUsage(st cgstats.Stats, ts int64) *runtimeapi.IoUsage {
	if st.IOPressure == nil {
		return nil
	}
	return &runtimeapi.IoUsage{Timestamp: ts, Psi: psiStats(st.IOPressure)}
}

// psiStats converts pressure to the CRI's units: totals in nanoseconds
// (the kernel counts microseconds), averages in percent as they are.
func psiStats(p *cgstats.PSI) *runtimeapi.PsiStats {
	if p == nil {
		return nil
	}
	conv := func(d *cgstats.PSIData) *runtimeapi.PsiData {
		if d == nil {
			return nil
		}
		return &runtimeapi.PsiData{Total: d.TotalMicros * 1000, Avg10: d.Avg10, Avg60: d.Avg60, Avg300: d.Avg300}
	}
	return &runtimeapi.PsiStats{Some: conv(p.Some), Full: conv(p.Full)}
}

// minRateWindow is the shortest interval a CPU rate is computed over.
// kubelet reads the same cgroups through several RPCs moments apart
// (PodSandboxStats, then ListContainerStats of that pod; the summary and
// the resource metrics on their own schedules): a rate over the
// microseconds between two of them would be noise. A reading that comes
// sooner than this after the kept sample repeats the last rate instead of
// replacing the sample.
const minRateWindow = time.Second

// cpuSample is a cgroup's CPU usage at one instant, and the rate computed
// when it was taken.
type cpuSample struct {
	at      time.Time
	usage   uint64
	rate    uint64
	hasRate bool
}

// rateKeeper turns cumulative CPU readings into nanocores (UsageNanoCores,
// which kubelet takes as is when the runtime reports it), keeping one
// sample per container or pod.
type rateKeeper struct {
	mu   sync.Mutex
	prev map[string]cpuSample
}

// rate returns the nanocores since the kept sample of id, if there is
// one; see minRateWindow.
func (k *rateKeeper) rate(id string, now time.Time, usage uint64) (uint64, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.prev == nil {
		k.prev = map[string]cpuSample{}
	}
	prev, ok := k.prev[id]
	elapsed := now.Sub(prev.at)
	switch {
	case !ok || elapsed < 0 || usage < prev.usage:
		// First reading, a clock step back, or a counter that went
		// back (a pod whose containers are summed lost one).
		k.prev[id] = cpuSample{at: now, usage: usage}
		return 0, false
	case elapsed < minRateWindow:
		return prev.rate, prev.hasRate
	}
	r := uint64(float64(usage-prev.usage) / elapsed.Seconds())
	k.prev[id] = cpuSample{at: now, usage: usage, rate: r, hasRate: true}
	return r, true
}

// forgetAllBut drops the samples of ids not in keep.
func (k *rateKeeper) forgetAllBut(keep map[string]bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id := range k.prev {
		if !keep[id] {
			delete(k.prev, id)
		}
	}
}

func recordIDs(recs []*store.Record) map[string]bool {
	ids := make(map[string]bool, len(recs))
	for _, r := range recs {
		ids[r.ID] = true
	}
	return ids
}
