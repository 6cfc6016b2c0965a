package main

import (
	"strings"
	"testing"
	"time"
)

// A trimmed scrape of kubelet v1.36's /metrics and of netshim's.
const sampleMetrics = `# HELP kubelet_pleg_relist_duration_seconds [ALPHA] Duration in seconds for relisting pods in PLEG.
# TYPE kubelet_pleg_relist_duration_seconds histogram
kubelet_pleg_relist_duration_seconds_bucket{le="0.005"} 10
kubelet_pleg_relist_duration_seconds_bucket{le="+Inf"} 120
kubelet_pleg_relist_duration_seconds_sum 0.9
kubelet_pleg_relist_duration_seconds_count 120
kubelet_pleg_relist_interval_seconds_sum 121.5
netshim_rpc_duration_seconds_bucket{code="OK",rpc="Version",le="0.001"} 479
netshim_rpc_duration_seconds_count{code="OK",rpc="Version"} 480
netshim_rpc_duration_seconds_count{code="NotFound",rpc="ContainerStatus"} 2
netshim_rpc_duration_seconds_count{code="OK",rpc="ContainerStatus"} 55 1700000000000
netshim_docker_call_duration_seconds_count{call="info"} 12
weird line without a value we do not read
`

func TestParseSamples(t *testing.T) {
	wanted := map[string]string{plegRelistSum: "", plegRelistCount: "", netshimRPCs: "rpc", netshimDockerCalls: "call"}
	s, err := parseSamples(strings.NewReader(sampleMetrics), wanted)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{plegRelistSum, "", 0.9},
		{plegRelistCount, "", 120},
		{netshimRPCs, "Version", 480},
		{netshimRPCs, "ContainerStatus", 57}, // both codes
		{netshimDockerCalls, "info", 12},
	} {
		if got := s.get(c.name, c.label); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.label, got, c.want)
		}
	}
	if len(s) != 4 || len(s[netshimRPCs]) != 2 {
		t.Errorf("kept %v, want only the wanted series", s)
	}
}

func TestParseSamplesErrors(t *testing.T) {
	wanted := map[string]string{plegRelistSum: "", netshimRPCs: "rpc"}
	for name, text := range map[string]string{
		"bad value": "kubelet_pleg_relist_duration_seconds_sum abc\n",
		"no value":  "kubelet_pleg_relist_duration_seconds_sum\n",
		"no label":  "netshim_rpc_duration_seconds_count{code=\"OK\"} 4\n",
	} {
		if _, err := parseSamples(strings.NewReader(text), wanted); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	s, err := parseSamples(strings.NewReader("other_metric 1\n# comment\n"), wanted)
	if err != nil || len(s) != 0 {
		t.Errorf("nothing wanted: %v, %v", s, err)
	}
}

func TestPLEGMeanAndCounts(t *testing.T) {
	a := samples{plegRelistSum: {"": 1}, plegRelistCount: {"": 100}, netshimRPCs: {"Version": 10, "ListContainers": 5}}
	b := samples{plegRelistSum: {"": 1.6}, plegRelistCount: {"": 220}, netshimRPCs: {"Version": 490, "ListContainers": 5, "Status": 3}}
	mean, ok := plegMean(a, b)
	if !ok || mean != 5*time.Millisecond {
		t.Errorf("PLEG mean = %v, %v; want 5ms", mean, ok)
	}
	if _, ok := plegMean(a, a); ok {
		t.Error("PLEG mean without a relist in between: ok")
	}
	got := countsBetween(a, b, netshimRPCs)
	if len(got) != 2 || got["Version"] != 480 || got["Status"] != 3 {
		t.Errorf("counts between = %v, want Version 480 and Status 3 only", got)
	}
}
