package stats

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/cgstats"
)

// With the PodAndContainerStatsFromCRI feature gate, kubelet's
// /metrics/cadvisor endpoint serves what ListPodSandboxMetrics returns,
// described once at start-up by ListMetricDescriptors, in place of
// cAdvisor's own. The metrics are therefore cAdvisor's, under its names
// and with the labels kubelet gave them (container, id, image, name,
// namespace, pod, and cpu or interface where cAdvisor has them), so that
// dashboards and alerts written for cAdvisor keep working:
//
//   - per container: container=<CRI name>, id=<its cgroup>, image=<image
//     as requested>, name=<Docker name>;
//   - per pod, from the pod cgroup: container="", id=<pod cgroup> ("" when
//     the pod's usage is the sum of its containers', see pod.go),
//     image="", name="";
//   - the pod's network, which cAdvisor reports on the infra container:
//     container="POD", with the infra container's id, image and name.
//
// CRI metric values are integers: the seconds counters (CPU time, pressure
// stall time) are whole seconds, rounded down. All are read live, so their
// timestamp is 0 (the CRI's "not cached").

// The label keys every metric has, in the order of their values.
var metricLabelKeys = []string{"container", "id", "image", "name", "namespace", "pod"}

// Metric names.
const (
	mCPUUsage       = "container_cpu_usage_seconds_total"
	mMemoryUsage    = "container_memory_usage_bytes"
	mMemoryWorkSet  = "container_memory_working_set_bytes"
	mMemoryRSS      = "container_memory_rss"
	mMemoryCache    = "container_memory_cache"
	mThreads        = "container_threads"
	mCPUWaiting     = "container_pressure_cpu_waiting_seconds_total"
	mCPUStalled     = "container_pressure_cpu_stalled_seconds_total"
	mMemoryWaiting  = "container_pressure_memory_waiting_seconds_total"
	mMemoryStalled  = "container_pressure_memory_stalled_seconds_total"
	mIOWaiting      = "container_pressure_io_waiting_seconds_total"
	mIOStalled      = "container_pressure_io_stalled_seconds_total"
	mRxBytes        = "container_network_receive_bytes_total"
	mRxPackets      = "container_network_receive_packets_total"
	mRxErrors       = "container_network_receive_errors_total"
	mRxDropped      = "container_network_receive_packets_dropped_total"
	mTxBytes        = "container_network_transmit_bytes_total"
	mTxPackets      = "container_network_transmit_packets_total"
	mTxErrors       = "container_network_transmit_errors_total"
	mTxDropped      = "container_network_transmit_packets_dropped_total"
	labelCPU        = "cpu"
	labelInterface  = "interface"
	cpuTotal        = "total" // cAdvisor's cpu label when it does not break usage down per CPU
	infraLabel      = "POD"   // the container label cAdvisor gives the infra container
	nanosPerSecond  = 1_000_000_000
	microsPerSecond = 1_000_000
)

// metricDescriptors is the fixed set ListMetricDescriptors returns and
// ListPodSandboxMetrics draws from; read-only (MetricDescriptors).
var metricDescriptors = func() []*runtimeapi.MetricDescriptor {
	d := func(name, help string, extra ...string) *runtimeapi.MetricDescriptor {
		keys := append(append([]string(nil), metricLabelKeys...), extra...)
		return &runtimeapi.MetricDescriptor{Name: name, Help: help, LabelKeys: keys}
	}
	return []*runtimeapi.MetricDescriptor{
		d(mCPUUsage, "Cumulative cpu time consumed in seconds.", labelCPU),
		d(mMemoryUsage, "Current memory usage in bytes, including all memory regardless of when it was accessed"),
		d(mMemoryWorkSet, "Current working set in bytes."),
		d(mMemoryRSS, "Size of RSS in bytes."),
		d(mMemoryCache, "Number of bytes of page cache memory."),
		d(mThreads, "Number of threads running inside the container"),
		d(mCPUWaiting, "Total time duration tasks in the container have waited due to CPU congestion."),
		d(mCPUStalled, "Total time duration no tasks in the container could make progress due to CPU congestion."),
		d(mMemoryWaiting, "Total time duration tasks in the container have waited due to memory congestion."),
		d(mMemoryStalled, "Total time duration no tasks in the container could make progress due to memory congestion."),
		d(mIOWaiting, "Total time duration tasks in the container have waited due to IO congestion."),
		d(mIOStalled, "Total time duration no tasks in the container could make progress due to IO congestion."),
		d(mRxBytes, "Cumulative count of bytes received", labelInterface),
		d(mRxPackets, "Cumulative count of packets received", labelInterface),
		d(mRxErrors, "Cumulative count of errors encountered while receiving", labelInterface),
		d(mRxDropped, "Cumulative count of packets dropped while receiving", labelInterface),
		d(mTxBytes, "Cumulative count of bytes transmitted", labelInterface),
		d(mTxPackets, "Cumulative count of packets transmitted", labelInterface),
		d(mTxErrors, "Cumulative count of errors encountered while transmitting", labelInterface),
		d(mTxDropped, "Cumulative count of packets dropped while transmitting", labelInterface),
	}
}()

// metricSet collects metrics sharing the base label values.
type metricSet struct {
	labels  []string // values of metricLabelKeys
	metrics []*runtimeapi.Metric
}

func (m *metricSet) add(name string, typ runtimeapi.MetricType, value uint64, extra ...string) {
	values := make([]string, 0, len(m.labels)+len(extra))
	values = append(append(values, m.labels...), extra...)
	m.metrics = append(m.metrics, &runtimeapi.Metric{
		Name: name, MetricType: typ, LabelValues: values, Value: &runtimeapi.UInt64Value{Value: value},
	})
}

// addCgroup adds the metrics of one cgroup's figures (those it has).
func (m *metricSet) addCgroup(st cgstats.Stats) {
	const counter, gauge = runtimeapi.MetricType_COUNTER, runtimeapi.MetricType_GAUGE
	if st.CPUNanos != nil {
		m.add(mCPUUsage, counter, *st.CPUNanos/nanosPerSecond, cpuTotal)
	}
	if mem := st.Memory; mem != nil {
		m.add(mMemoryUsage, gauge, mem.Usage)
		m.add(mMemoryWorkSet, gauge, mem.WorkingSet())
		m.add(mMemoryRSS, gauge, mem.RSS)
		m.add(mMemoryCache, gauge, mem.Cache)
	}
	if st.Tasks != nil {
		m.add(mThreads, gauge, *st.Tasks)
	}
	for _, p := range []struct {
		psi              *cgstats.PSI
		waiting, stalled string
	}{
		{st.CPUPressure, mCPUWaiting, mCPUStalled},
		{st.MemoryPressure, mMemoryWaiting, mMemoryStalled},
		{st.IOPressure, mIOWaiting, mIOStalled},
	} {
		if p.psi == nil {
			continue
		}
		m.add(p.waiting, counter, p.psi.Some.TotalMicros/microsPerSecond)
		if p.psi.Full != nil {
			m.add(p.stalled, counter, p.psi.Full.TotalMicros/microsPerSecond)
		}
	}
}

func (m *metricSet) addInterfaces(ifaces []cgstats.Interface) {
	const counter = runtimeapi.MetricType_COUNTER
	for _, i := range ifaces {
		m.add(mRxBytes, counter, i.RxBytes, i.Name)
		m.add(mRxPackets, counter, i.RxPackets, i.Name)
		m.add(mRxErrors, counter, i.RxErrors, i.Name)
		m.add(mRxDropped, counter, i.RxDropped, i.Name)
		m.add(mTxBytes, counter, i.TxBytes, i.Name)
		m.add(mTxPackets, counter, i.TxPackets, i.Name)
		m.add(mTxErrors, counter, i.TxErrors, i.Name)
		m.add(mTxDropped, counter, i.TxDropped, i.Name)
	}
}

// PodMetrics builds one sandbox's metrics from a sample.
func PodMetrics(ps *PodSample) *runtimeapi.PodSandboxMetrics {
	ns, pod := ps.metadata.GetNamespace(), ps.metadata.GetName()
	pm := &runtimeapi.PodSandboxMetrics{PodSandboxId: ps.id}

	podSet := metricSet{labels: []string{"", ps.podCgroup.Name(), "", "", ns, pod}}
	podSet.addCgroup(ps.pod)
	if ps.net != nil && ps.sandbox != nil {
		infra := metricSet{labels: []string{infraLabel, ps.infra.paths.Name(), ps.sandbox.Image, ps.sandbox.Name, ns, pod}}
		infra.addInterfaces(ps.net)
		podSet.metrics = append(podSet.metrics, infra.metrics...)
	}
	pm.Metrics = podSet.metrics

	for _, c := range ps.containers {
		sample, ok := ps.samples[c.ID]
		if !ok {
			continue
		}
		set := metricSet{labels: []string{c.ContainerInfo().Metadata.GetName(), sample.paths.Name(), c.Image, c.Name, ns, pod}}
		set.addCgroup(sample.stats)
		pm.ContainerMetrics = append(pm.ContainerMetrics, &runtimeapi.ContainerMetrics{ContainerId: c.ID, Metrics: set.metrics})
	}
	return pm
}

// MetricDescriptors describes every metric PodMetrics may report. The set
// never changes; the caller must not modify it.
func MetricDescriptors() []*runtimeapi.MetricDescriptor { return metricDescriptors }
