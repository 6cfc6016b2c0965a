package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCell(t *testing.T) {
	rs := func(vs ...float64) []result {
		var out []result
		for _, v := range vs {
			out = append(out, result{up: time.Duration(v * float64(time.Second))})
		}
		return out
	}
	f := secs(func(r result) time.Duration { return r.up })
	format := func(v float64) string { return strings.TrimSuffix(strings.TrimSuffix(fmtCPU(v), "0"), ".0") }
	for _, tt := range []struct {
		in   []result
		want string
	}{
		{nil, "–"},
		{rs(2), "2"},
		{rs(3, 1, 2), "2 (1–3)"},
		{rs(4, 1, 2, 3), "2.5 (1–4)"},
	} {
		if got := cell(tt.in, f, format); got != tt.want {
			t.Errorf("cell(%d results) = %q, want %q", len(tt.in), got, tt.want)
		}
	}
}

func TestReportMarkdown(t *testing.T) {
	var o options
	o.pods, o.rounds, o.hold = 2, 1, time.Minute
	if err := o.modes.Set("pinned=--sandbox-netns=pinned"); err != nil {
		t.Fatal(err)
	}
	r := newReport(o, map[string]string{"kubelet": "Kubernetes v1.36.0"})
	cpu := newGroupFigures()
	cpu.value[groupNetshim], cpu.value[groupDockerd], cpu.value[groupKubelet] = 1.5, 2, 9
	cpu.procs[groupShims] = 4
	r.add(result{run: run{1, mode{name: "default"}}, up: 12 * time.Second, cpu: cpu, pss: newGroupFigures(),
		holdWall: time.Minute, pleg: 5 * time.Millisecond, plegOK: true,
		rpcs: map[string]float64{"Version": 240}, dockerCalls: map[string]float64{"info": 6}})
	r.add(result{run: run{1, mode{name: "pinned", args: []string{"--sandbox-netns=pinned"}}}, err: errors.New("pods up: boom")})
	md := r.markdown()
	for _, want := range []string{
		"| | default | pinned |",
		"| drop → all 2 containers running | 12.0 s | – |",
		"| kubelet PLEG relist mean over the hold | 5.0 ms | – |",
		"| **netshim CPU over the hold (CPU-s)** | **1.50** | **–** |",
		"| stack CPU over the hold (CPU-s) | 3.50 | – |",
		"| containerd shims running over the hold | 4 | – |",
		"| · containerd shims | 0.00 | – |",
		"| kubelet CPU over the hold (CPU-s; not in the stack) | 9.00 | – |",
		"| `Version` | 4.00 | – |",
		"| `info` | 0.10 | – |",
		"`pinned` (`--sandbox-netns=pinned`)",
		"- pinned, round 1 FAILED: pods up: boom",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	lines := r.netshimCPULines()
	if len(lines) != 2 || !strings.Contains(lines[0], "default: 1.50 CPU-s (1 run(s))") || !strings.Contains(lines[1], "pinned: – CPU-s (0 run(s))") {
		t.Errorf("netshim CPU lines = %q", lines)
	}
}
