//go:build cluster

package e2ecluster

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/netshim/netshim/test/harness"
)

// summaryTimeout bounds the wait for the summary to show every figure:
// cAdvisor's housekeeping runs every 10-15 s.
const summaryTimeout = 90 * time.Second

// The parts of kubelet's /stats/summary (stats/v1alpha1) the check reads.
type (
	statsSummary struct {
		Node struct {
			CPU    *cpuStats    `json:"cpu"`
			Memory *memoryStats `json:"memory"`
		} `json:"node"`
		Pods []podStats `json:"pods"`
	}
	podStats struct {
		PodRef struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"podRef"`
		CPU        *cpuStats        `json:"cpu"`
		Memory     *memoryStats     `json:"memory"`
		Network    *networkStats    `json:"network"`
		Containers []containerStats `json:"containers"`
	}
	cpuStats struct {
		UsageCoreNanoSeconds *uint64 `json:"usageCoreNanoSeconds"`
	}
	memoryStats struct {
		WorkingSetBytes *uint64 `json:"workingSetBytes"`
	}
	networkStats struct {
		RxBytes *uint64 `json:"rxBytes"`
		TxBytes *uint64 `json:"txBytes"`
	}
	containerStats struct {
		Name   string       `json:"name"`
		CPU    *cpuStats    `json:"cpu"`
		Memory *memoryStats `json:"memory"`
	}
)

func val(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

// TestStatsSummary: the Node's stats summary, read through kube-apiserver's
// node proxy, shows the pod's CPU, memory and network, and its
// container's CPU and memory.
func TestStatsSummary(t *testing.T) {
	ns := namespace(t)
	// Some CPU first, then a server (ready once it listens).
	apply(t, ns, podSpec("stats", `mkdir -p /www && head -c 200000 /dev/zero > /www/blob && `+
		`(i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done) && exec httpd -f -p 8080 -h /www`)+
		"    readinessProbe:\n      tcpSocket: {port: 8080}\n      periodSeconds: 1\n")
	p := waitReady(t, ns, "stats")
	// Traffic through the pod's interface: 200 kB out, requests in.
	for range 5 {
		if _, err := httpGet(fmt.Sprintf("http://%s:8080/blob", p.Status.PodIP)); err != nil {
			t.Fatalf("GET from the pod: %v", err)
		}
	}

	raw := "/api/v1/nodes/" + nodeName + "/proxy/stats/summary"
	var ps *podStats
	var last string
	if !harness.Eventually(summaryTimeout, func() bool {
		out, err := w.cp.Kubectl("get", "--raw", raw)
		if err != nil {
			last = err.Error()
			return false
		}
		var s statsSummary
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			last = err.Error()
			return false
		}
		last = out
		ps = nil
		for i := range s.Pods {
			if s.Pods[i].PodRef.Namespace == ns && s.Pods[i].PodRef.Name == "stats" {
				ps = &s.Pods[i]
			}
		}
		if ps == nil || ps.CPU == nil || ps.Memory == nil || ps.Network == nil {
			return false
		}
		c := containerOf(ps, "app")
		return val(ps.CPU.UsageCoreNanoSeconds) > 0 && val(ps.Memory.WorkingSetBytes) > 0 &&
			val(ps.Network.RxBytes) > 0 && val(ps.Network.TxBytes) >= 5*200000 &&
			c != nil && c.CPU != nil && val(c.CPU.UsageCoreNanoSeconds) > 0 && c.Memory != nil && val(c.Memory.WorkingSetBytes) > 0
	}) {
		b, _ := json.MarshalIndent(ps, "", "  ")
		t.Fatalf("within %s the summary never showed the pod's CPU, memory, network (tx >= 1 MB) and its container's CPU and memory; pod entry:\n%s\nlast answer (start): %.2000s",
			summaryTimeout, b, last)
	}
	t.Logf("pod stats: cpu %d ns, working set %d B, rx %d B, tx %d B",
		val(ps.CPU.UsageCoreNanoSeconds), val(ps.Memory.WorkingSetBytes), val(ps.Network.RxBytes), val(ps.Network.TxBytes))
}

func containerOf(ps *podStats, name string) *containerStats {
	for i := range ps.Containers {
		if ps.Containers[i].Name == name {
			return &ps.Containers[i]
		}
	}
	return nil
}
