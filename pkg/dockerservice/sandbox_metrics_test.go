package dockerservice

import (
	"context"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestListPodSandboxMetrics(t *testing.T) {
	e := newPodEnv(t)
	h := newFakeHost(t, e.ds, true)
	running := e.create(t, ctrConfig("running"))
	e.start(t, running)
	e.create(t, ctrConfig("created"))
	pod := podDir(true)
	h.cgroupFiles(pod, podUsage)
	infraDir := h.container(e.ds, e.sandboxID, pod, infraUsage)
	ctrDir := h.container(e.ds, running, pod, ctrUsage)
	h.netdev(e.pid(t, e.sandboxID), map[string][4]uint64{"lo": {999, 0, 999, 0}, "eth0": {5000, 1, 7000, 2}})
	// A second pod with nothing running has no metrics.
	stopped := e.run(t, podConfig("stopped"))
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: stopped}); err != nil {
		t.Fatal(err)
	}

	descs, _ := e.ds.ListMetricDescriptors(context.Background(), &runtimeapi.ListMetricDescriptorsRequest{})
	keys := map[string][]string{}
	for _, d := range descs.Descriptors {
		keys[d.Name] = d.LabelKeys
	}
	e.quiesce(t)
	e.docker.ResetCalls()
	resp, err := e.ds.ListPodSandboxMetrics(context.Background(), &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if calls := e.docker.Calls(); len(calls) != 0 {
		t.Errorf("ListPodSandboxMetrics called Docker: %v", calls)
	}
	if len(resp.PodMetrics) != 1 || resp.PodMetrics[0].PodSandboxId != e.sandboxID {
		t.Fatalf("pod metrics = %v, want the running pod's only", resp.PodMetrics)
	}
	pm := resp.PodMetrics[0]

	// index: name + label values -> value, checking each metric against
	// its descriptor on the way.
	index := func(metrics []*runtimeapi.Metric) map[string]uint64 {
		out := map[string]uint64{}
		for _, m := range metrics {
			k, ok := keys[m.Name]
			if !ok {
				t.Errorf("%s has no descriptor: kubelet drops it", m.Name)
				continue
			}
			if len(k) != len(m.LabelValues) {
				t.Errorf("%s: %d label values for %d keys", m.Name, len(m.LabelValues), len(k))
			}
			if m.Timestamp != 0 {
				t.Errorf("%s: timestamp %d, want 0 (read live)", m.Name, m.Timestamp)
			}
			out[m.Name+"{"+strings.Join(m.LabelValues, ",")+"}"] = m.GetValue().GetValue()
		}
		return out
	}
	podLabels := "," + pod + ",,,ns,web"
	infra, _ := e.ds.store().Get(e.sandboxID)
	infraLabels := "POD," + infraDir + "," + infra.Image + "," + infra.Name + ",ns,web"
	ctrRec, _ := e.ds.store().Get(running)
	ctrLabels := "running," + ctrDir + "," + ctrRec.Image + "," + ctrRec.Name + ",ns,web"

	got := index(pm.Metrics)
	for name, want := range map[string]uint64{
		"container_cpu_usage_seconds_total{" + podLabels + ",total}":                 9,
		"container_memory_usage_bytes{" + podLabels + "}":                            podUsage.mem,
		"container_memory_working_set_bytes{" + podLabels + "}":                      podUsage.mem - podUsage.inactiveFile,
		"container_memory_rss{" + podLabels + "}":                                    podUsage.mem / 2,
		"container_memory_cache{" + podLabels + "}":                                  podUsage.mem / 2,
		"container_threads{" + podLabels + "}":                                       podUsage.tasks,
		"container_pressure_cpu_waiting_seconds_total{" + podLabels + "}":            7,
		"container_pressure_cpu_stalled_seconds_total{" + podLabels + "}":            3,
		"container_pressure_io_waiting_seconds_total{" + podLabels + "}":             2,
		"container_network_receive_bytes_total{" + infraLabels + ",eth0}":            5000,
		"container_network_receive_errors_total{" + infraLabels + ",eth0}":           1,
		"container_network_transmit_bytes_total{" + infraLabels + ",eth0}":           7000,
		"container_network_transmit_errors_total{" + infraLabels + ",eth0}":          2,
		"container_network_receive_packets_total{" + infraLabels + ",eth0}":          11,
		"container_network_transmit_packets_dropped_total{" + infraLabels + ",eth0}": 4,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %d (present %v), want %d", name, v, ok, want)
		}
	}
	for k := range got {
		if strings.HasSuffix(k, ",lo}") {
			t.Errorf("%s: lo is not the pod's traffic", k)
		}
	}

	if len(pm.ContainerMetrics) != 1 || pm.ContainerMetrics[0].ContainerId != running {
		t.Fatalf("container metrics = %v, want the running container's only", pm.ContainerMetrics)
	}
	got = index(pm.ContainerMetrics[0].Metrics)
	for name, want := range map[string]uint64{
		"container_cpu_usage_seconds_total{" + ctrLabels + ",total}": 3,
		"container_memory_working_set_bytes{" + ctrLabels + "}":      ctrUsage.mem - ctrUsage.inactiveFile,
		"container_threads{" + ctrLabels + "}":                       ctrUsage.tasks,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %d (present %v), want %d; have %v", name, v, ok, want, got)
		}
	}
}
