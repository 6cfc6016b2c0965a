//go:build kubelet

package e2ekubelet

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// summaryDeadline bounds the wait for kubelet's summary to show every
// figure: cAdvisor's housekeeping (pod cgroups, default gates) runs every
// 10-15 s, netshim measures writable layers in the background.
const summaryDeadline = 90 * time.Second

// The parts of kubelet's /stats/summary (stats/v1alpha1) the checks read.
type statsSummary struct {
	Pods []podStats `json:"pods"`
}

type podStats struct {
	PodRef struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"podRef"`
	CPU        *cpuStats        `json:"cpu"`
	Memory     *memoryStats     `json:"memory"`
	Network    *networkStats    `json:"network"`
	Containers []containerStats `json:"containers"`
}

type cpuStats struct {
	UsageNanoCores       *uint64 `json:"usageNanoCores"`
	UsageCoreNanoSeconds *uint64 `json:"usageCoreNanoSeconds"`
}

type memoryStats struct {
	WorkingSetBytes *uint64 `json:"workingSetBytes"`
}

type fsStats struct {
	UsedBytes *uint64 `json:"usedBytes"`
}

type networkStats struct {
	Name    string  `json:"name"`
	RxBytes *uint64 `json:"rxBytes"`
	TxBytes *uint64 `json:"txBytes"`
}

type containerStats struct {
	Name   string       `json:"name"`
	CPU    *cpuStats    `json:"cpu"`
	Memory *memoryStats `json:"memory"`
	Rootfs *fsStats     `json:"rootfs"`
	Logs   *fsStats     `json:"logs"`
}

func val(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

func (p *podStats) container(name string) *containerStats {
	for i := range p.Containers {
		if p.Containers[i].Name == name {
			return &p.Containers[i]
		}
	}
	return nil
}

// summaryPod returns the test pod's entry in kubelet's summary (nil when
// it has none yet) and the raw answer.
func (e *env) summaryPod() (*podStats, string, error) {
	body, err := httpGet(kubeletClient, e.kubeletURL+"/stats/summary")
	if err != nil {
		return nil, body, err
	}
	var sum statsSummary
	if err := json.Unmarshal([]byte(body), &sum); err != nil {
		return nil, body, fmt.Errorf("decoding /stats/summary: %w", err)
	}
	for i := range sum.Pods {
		if p := &sum.Pods[i]; p.PodRef.Name == e.mirrorName() && p.PodRef.Namespace == e.namespace {
			return p, body, nil
		}
	}
	return nil, body, nil
}

// missingUsage lists the figures the summary lacks for the test pod.
func missingUsage(p *podStats) []string {
	var miss []string
	// Nanocores is what `kubectl top` shows; kubelet derives it from two
	// readings when the runtime does not give it, so it may lag one poll.
	if p.CPU == nil || val(p.CPU.UsageNanoCores) == 0 || val(p.CPU.UsageCoreNanoSeconds) == 0 {
		miss = append(miss, "pod CPU (nanocores and total)")
	}
	if p.Memory == nil || val(p.Memory.WorkingSetBytes) == 0 {
		miss = append(miss, "pod memory working set")
	}
	busy := p.container(busyName)
	switch {
	case busy == nil:
		miss = append(miss, "container "+busyName)
	default:
		if busy.CPU == nil || val(busy.CPU.UsageCoreNanoSeconds) == 0 {
			miss = append(miss, busyName+" CPU")
		}
		if busy.Memory == nil || val(busy.Memory.WorkingSetBytes) == 0 {
			miss = append(miss, busyName+" memory working set")
		}
		if busy.Rootfs == nil || val(busy.Rootfs.UsedBytes) < busyFillBytes {
			miss = append(miss, fmt.Sprintf("%s rootfs >= %d bytes", busyName, busyFillBytes))
		}
	}
	if web := p.container(webName); web == nil || web.Logs == nil || val(web.Logs.UsedBytes) == 0 {
		miss = append(miss, webName+" logs")
	}
	return miss
}

func (e *env) saveSummary(name, body string) {
	if body != "" {
		_ = os.WriteFile(filepath.Join(e.artifacts, name), []byte(body), 0o644)
	}
}

// checkSummary: kubelet's summary shows, for the pod, non-zero CPU and
// memory working set, and for its containers CPU, working set, the rootfs
// the busy container filled and the logs web wrote.
func (e *env) checkSummary(o *observation) outcome {
	if o.sandboxID == "" {
		return fail(errors.New("no sandbox, so no pod stats"))
	}
	start := time.Now()
	var p *podStats
	var body string
	var err error
	miss := []string{"the pod"}
	for time.Since(start) < summaryDeadline {
		if p, body, err = e.summaryPod(); err == nil && p != nil {
			if miss = missingUsage(p); len(miss) == 0 {
				break
			}
		}
		time.Sleep(pollInterval)
	}
	e.saveSummary("stats-summary.json", body)
	if err != nil {
		return fail(err)
	}
	if len(miss) > 0 {
		return fail(fmt.Errorf("after %s kubelet's /stats/summary (gates %q) lacks %s (saved in %s)",
			time.Since(start).Round(time.Second), e.gates, strings.Join(miss, ", "), filepath.Join(e.artifacts, "stats-summary.json")))
	}
	busy, web := p.container(busyName), p.container(webName)
	return pass(fmt.Sprintf("after %s: pod CPU %d nanocores (%d ns total), pod working set %d B; %s: CPU %d ns, working set %d B, rootfs %d B; %s logs %d B",
		time.Since(start).Round(time.Second), val(p.CPU.UsageNanoCores), val(p.CPU.UsageCoreNanoSeconds), val(p.Memory.WorkingSetBytes),
		busyName, val(busy.CPU.UsageCoreNanoSeconds), val(busy.Memory.WorkingSetBytes), val(busy.Rootfs.UsedBytes),
		webName, val(web.Logs.UsedBytes)))
}

// checkSummaryNetwork (PodAndContainerStatsFromCRI): the pod's network
// rx/tx bytes, which kubelet then takes from netshim, grow after traffic
// to the pod.
func (e *env) checkSummaryNetwork(o *observation) outcome {
	if o.podIP == "" {
		return fail(errors.New("the pod has no IP"))
	}
	p, body, err := e.summaryPod()
	if err != nil {
		return fail(err)
	}
	if p == nil || p.Network == nil || p.Network.RxBytes == nil || p.Network.TxBytes == nil {
		e.saveSummary("stats-summary-network.json", body)
		return fail(fmt.Errorf("kubelet's summary has no pod network rx/tx bytes (gates %q)", e.gates))
	}
	rx0, tx0 := val(p.Network.RxBytes), val(p.Network.TxBytes)
	const gets = 8
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	url := fmt.Sprintf("http://%s/big", net.JoinHostPort(o.podIP, strconv.Itoa(webPort)))
	for i := 0; i < gets; i++ {
		got, err := httpGet(plain, url)
		if err != nil {
			return fail(err)
		}
		if len(got) != bigBytes {
			return fail(fmt.Errorf("GET %s: %d bytes, want %d", url, len(got), bigBytes))
		}
	}
	// The pod sent gets*bigBytes and received the requests.
	start := time.Now()
	var rx, tx uint64
	for time.Since(start) < summaryDeadline {
		if p, body, err = e.summaryPod(); err == nil && p != nil && p.Network != nil {
			rx, tx = val(p.Network.RxBytes), val(p.Network.TxBytes)
			if tx >= tx0+gets*bigBytes && rx > rx0 {
				break
			}
		}
		time.Sleep(pollInterval)
	}
	e.saveSummary("stats-summary-network.json", body)
	if tx < tx0+gets*bigBytes || rx <= rx0 {
		return fail(fmt.Errorf("after %d GETs of %d bytes: pod network rx %d -> %d, tx %d -> %d (want tx +%d and rx up)",
			gets, bigBytes, rx0, rx, tx0, tx, gets*bigBytes))
	}
	return pass(fmt.Sprintf("interface %s: rx %d -> %d B, tx %d -> %d B after %d GETs of %d B (%s)",
		p.Network.Name, rx0, rx, tx0, tx, gets, bigBytes, time.Since(start).Round(time.Second)))
}
