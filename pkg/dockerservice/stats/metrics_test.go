package stats

import (
	"strings"
	"testing"
)

func TestMetricDescriptors(t *testing.T) {
	names := map[string]bool{}
	for _, d := range MetricDescriptors() {
		if names[d.Name] {
			t.Errorf("%s described twice", d.Name)
		}
		names[d.Name] = true
		if !strings.HasPrefix(d.Name, "container_") || d.Help == "" {
			t.Errorf("descriptor %v: want a cAdvisor name and a help text", d)
		}
		if strings.Join(d.LabelKeys[:len(metricLabelKeys)], ",") != "container,id,image,name,namespace,pod" {
			t.Errorf("%s: label keys %v do not start with kubelet's cAdvisor labels", d.Name, d.LabelKeys)
		}
	}
	// What kubelet's dashboards and the resource metrics read.
	for _, n := range []string{
		"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_memory_usage_bytes",
		"container_memory_rss", "container_network_receive_bytes_total", "container_network_transmit_bytes_total",
		"container_network_receive_errors_total", "container_network_transmit_errors_total", "container_threads",
	} {
		if !names[n] {
			t.Errorf("%s not described", n)
		}
	}
}
