package stats

import (
	"os"
	"path/filepath"
	"strconv"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/cgstats"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// Pod stats, like container stats, come from files only: the index gives
// each container's pid, /proc/<pid>/cgroup its cgroup, and the cgroup
// files the figures; no Docker call on any of these paths.
//
// A pod's CPU and memory are those of its cgroup: kubelet's pod cgroup,
// which RunPodSandbox passed to Docker as the sandbox's cgroup parent.
// That parent is not kept in the index (asking Docker for it would cost a
// round trip per pod), but Docker puts each container's cgroup directly
// below its parent, named after the container ("<parent>/<id>",
// "<parent slice>/docker-<id>.scope"), so the pod cgroup is the parent
// directory of the infra container's (or, with the infra container gone,
// of any running container's). It is taken as the pod's only when that
// holds and the directory is the pod's alone: named as kubelet names pod
// cgroups after the pod UID, or holding no cgroup but the pod's
// containers'. A sandbox made with no cgroup parent (crictl, tests) sits
// in Docker's own cgroup ("/docker", "/system.slice") with every other
// container: its figures would be the node's containers', so the pod's
// are then the sum of its running containers' instead. That sum is what
// a pod cgroup would report, less the pressure figures, which cannot be
// added up and are left out.
//
// Network counters are those of the sandbox's network namespace, read
// from /proc/<pid>/net/dev of a process in it, which shows the namespace
// of that process with no setns. Host-network pods get none: the node's
// interfaces are not the pod's, and reporting them per pod would count
// the node's traffic once for each such pod.

// PodSample is what one reading of a pod's files found.
type PodSample struct {
	id       string
	metadata *runtimeapi.PodSandboxMetadata
	// sandbox is nil for a sandbox known only from its checkpoint.
	sandbox    *store.Record
	infra      cgroupSample // cgroup only: its stats are read when summed
	containers []*store.Record
	samples    map[string]cgroupSample // of the running containers

	// running says some container of the pod runs: pod figures exist.
	running bool
	// pod is the pod's usage; podCgroup its cgroup, nil when the pod's
	// usage is the sum of its containers'.
	pod       cgstats.Stats
	podCgroup cgstats.Paths
	// net is the pod's interfaces, lo left out; nil for a host-network
	// pod or when they could not be read.
	net []cgstats.Interface
}

// Pod is what a pod's sample starts from: the sandbox's record (nil for a
// sandbox known only from its checkpoint), its metadata, its containers'
// records, and whether it uses the node's network.
type Pod struct {
	ID          string
	Sandbox     *store.Record
	Metadata    *runtimeapi.PodSandboxMetadata
	Containers  []*store.Record
	HostNetwork bool
}

// Running says some container of the pod runs: the sample has pod
// figures.
func (ps *PodSample) Running() bool { return ps.running }

// SamplePod reads the figures of a sandbox and its containers.
func (s *Reader) SamplePod(p Pod) *PodSample {
	ps := &PodSample{id: p.ID, sandbox: p.Sandbox, metadata: p.Metadata, containers: p.Containers, samples: map[string]cgroupSample{}}
	if p.Sandbox != nil {
		if paths, ok := s.containerCgroup(p.Sandbox); ok {
			ps.infra = cgroupSample{paths: paths}
		}
	}
	// The process whose cgroup and netns stand for the pod's: the infra
	// container's, else a running container's (they all join the
	// sandbox's netns).
	anchor := ps.infra.paths
	anchorPid := 0
	if anchor != nil {
		anchorPid = p.Sandbox.Pid
	}
	var running []cgroupSample
	for _, c := range ps.containers {
		sample := s.sampleContainer(c)
		if sample.paths == nil {
			continue
		}
		ps.samples[c.ID] = sample
		running = append(running, sample)
		if anchor == nil {
			anchor, anchorPid = sample.paths, c.Pid
		}
	}
	if anchor == nil {
		return ps
	}
	ps.running = true
	if parent := anchor.Parent(); s.isPodCgroup(parent, ps.metadata.GetUid(), p.ID, ps.containers) {
		ps.podCgroup = parent
		ps.pod = s.fs().Read(parent)
	} else {
		if ps.infra.paths != nil {
			ps.infra.stats = s.fs().Read(ps.infra.paths)
			running = append(running, ps.infra)
		}
		parts := make([]cgstats.Stats, len(running))
		for i, r := range running {
			parts[i] = r.stats
		}
		ps.pod = cgstats.Sum(parts...)
	}
	if !p.HostNetwork {
		ps.net = s.podInterfaces(anchorPid)
	}
	return ps
}

// isPodCgroup says whether dir, the parent of a container's cgroup, is the
// pod's own cgroup (see the comment at the top of this file).
func (s *Reader) isPodCgroup(dir cgstats.Paths, uid, sandboxID string, containers []*store.Record) bool {
	name := dir.Name()
	if name == "" || name == "/" {
		return false
	}
	if cgstats.IsKubeletPodCgroup(name, uid) {
		return true
	}
	children, err := s.fs().Children(dir)
	if err != nil || len(children) == 0 {
		return false
	}
	ids := make([]string, 0, len(containers)+1)
	ids = append(ids, sandboxID)
	for _, c := range containers {
		ids = append(ids, c.ID)
	}
	for _, child := range children {
		ours := false
		for _, id := range ids {
			if cgstats.IsContainerCgroup(child, id) {
				ours = true
				break
			}
		}
		if !ours {
			return false
		}
	}
	return true
}

// podInterfaces reads the interfaces of pid's network namespace, lo left
// out (it carries the pod's traffic to itself, which kubelet and cAdvisor
// do not count).
func (s *Reader) podInterfaces(pid int) []cgstats.Interface {
	if pid <= 0 {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(s.procRoot, strconv.Itoa(pid), "net", "dev"))
	if err != nil {
		return nil
	}
	all, err := cgstats.ParseNetDev(data)
	if err != nil {
		return nil
	}
	out := all[:0]
	for _, i := range all {
		if i.Name != "lo" {
			out = append(out, i)
		}
	}
	return out
}

// PodStats builds the CRI stats of a sample.
func (s *Reader) PodStats(ps *PodSample, now time.Time) *runtimeapi.PodSandboxStats {
	ts := now.UnixNano()
	attrs := &runtimeapi.PodSandboxAttributes{Id: ps.id, Metadata: ps.metadata}
	if ps.sandbox != nil {
		info := ps.sandbox.SandboxInfo()
		attrs.Labels, attrs.Annotations = info.Labels, info.Annotations
	}
	// kubelet reads Linux.Containers with no nil check: Linux is always
	// there.
	linux := &runtimeapi.LinuxPodSandboxStats{
		Cpu:        &runtimeapi.CpuUsage{Timestamp: ts},
		Memory:     &runtimeapi.MemoryUsage{Timestamp: ts},
		Containers: make([]*runtimeapi.ContainerStats, 0, len(ps.containers)),
	}
	for _, c := range ps.containers {
		linux.Containers = append(linux.Containers, s.containerStats(c, ps.samples[c.ID], now))
	}
	if ps.running {
		linux.Cpu = cpuUsage(ps.pod, ts, func(usage uint64) (uint64, bool) {
			return s.podCPU.rate(ps.id, now, usage)
		})
		linux.Memory = memoryUsage(ps.pod, ts)
		linux.Io = ioUsage(ps.pod, ts)
		if ps.pod.Tasks != nil {
			linux.Process = &runtimeapi.ProcessUsage{Timestamp: ts, ProcessCount: &runtimeapi.UInt64Value{Value: *ps.pod.Tasks}}
		}
		linux.Network = networkUsage(ps.net, ts)
	}
	return &runtimeapi.PodSandboxStats{Attributes: attrs, Linux: linux}
}

// defaultInterface is the interface CNI plugins give a pod (CNI_IFNAME,
// which kubelet's network plugins set to eth0).
const defaultInterface = "eth0"

// networkUsage is the CRI view of a pod's interfaces: eth0 as the default
// one, the others listed. kubelet dereferences the default interface with
// no nil check, so a pod with interfaces but no eth0 gets the first one as
// its default, and a pod with none gets no network figures at all.
func networkUsage(ifaces []cgstats.Interface, ts int64) *runtimeapi.NetworkUsage {
	if len(ifaces) == 0 {
		return nil
	}
	def := 0
	for i, iface := range ifaces {
		if iface.Name == defaultInterface {
			def = i
			break
		}
	}
	conv := func(i cgstats.Interface) *runtimeapi.NetworkInterfaceUsage {
		return &runtimeapi.NetworkInterfaceUsage{
			Name:    i.Name,
			RxBytes: &runtimeapi.UInt64Value{Value: i.RxBytes}, RxErrors: &runtimeapi.UInt64Value{Value: i.RxErrors},
			TxBytes: &runtimeapi.UInt64Value{Value: i.TxBytes}, TxErrors: &runtimeapi.UInt64Value{Value: i.TxErrors},
		}
	}
	n := &runtimeapi.NetworkUsage{Timestamp: ts, DefaultInterface: conv(ifaces[def])}
	for i, iface := range ifaces {
		if i != def {
			n.Interfaces = append(n.Interfaces, conv(iface))
		}
	}
	return n
}
