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
		"| | default | pinned |\n|---|---|---|\n", // no ratio column without containerd
		"| drop → all 2 containers running | 12.0 s | – |",
		"| drop → a pod's container started (CRI StartedAt), p50 | – | – |",
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

func TestRatioCell(t *testing.T) {
	up := secs(func(r result) time.Duration { return r.up })
	rs := func(vs ...float64) []result {
		var out []result
		for _, v := range vs {
			out = append(out, result{up: time.Duration(v * float64(time.Second))})
		}
		return out
	}
	for _, tt := range []struct {
		netshim, containerd []result
		want                string
	}{
		{rs(5), rs(10), "0.50×"},
		{rs(4, 6, 5), rs(8, 12), "0.50×"}, // medians 5 and 10
		{rs(15), rs(10), "1.50×"},
		{nil, rs(10), "–"},
		{rs(5), nil, "–"},
		{rs(5), rs(0), "–"},
	} {
		if got := ratioCell(tt.netshim, tt.containerd, up); got != tt.want {
			t.Errorf("ratio of %d over %d results = %q, want %q", len(tt.netshim), len(tt.containerd), got, tt.want)
		}
	}
}

// With the containerd peer: its column, netshim's figures it has not
// left blank ("–"), and a ratio column per netshim mode on the rows where
// a ratio means something.
func TestReportMarkdownContainerd(t *testing.T) {
	var o options
	o.pods, o.rounds, o.hold, o.maxPods, o.containerdBinDir = 2, 2, time.Minute, 250, "/bin-dir"
	if err := o.modes.Set("pauseless=--sandbox-netns=pauseless"); err != nil {
		t.Fatal(err)
	}
	r := newReport(o, map[string]string{"containerd": "containerd v2.4.2", "runc": "runc version 1.4.3"})
	if got := len(r.modes); got != 3 || r.modes[2].kind != kindContainerd {
		t.Fatalf("modes = %v, want default, pauseless, containerd", r.modes)
	}
	netshimRes := func(m mode, up, stack, pss float64, shims int) result {
		cpu, mem := newGroupFigures(), newGroupFigures()
		cpu.value[groupNetshim], cpu.value[groupDockerd], cpu.value[groupShims] = 0.5, 1, stack-1.5
		cpu.procs[groupShims] = shims
		mem.value[groupShims] = pss * (1 << 20)
		return result{run: run{1, m}, up: time.Duration(up * float64(time.Second)), cpu: cpu, pss: mem, holdWall: time.Minute,
			startedP50: 2 * time.Second, startedP99: 4 * time.Second, startedOK: true,
			rpcs: map[string]float64{"Version": 60}, dockerCalls: map[string]float64{}}
	}
	def, pl := r.modes[0], r.modes[1]
	r.add(netshimRes(def, 6, 3, 200, 4))
	r.add(netshimRes(pl, 3, 2, 100, 2))
	ccpu, cmem := newGroupFigures(), newGroupFigures()
	ccpu.value[groupContainerd], ccpu.value[groupShims], ccpu.procs[groupShims] = 1, 1, 2
	cmem.value[groupContainerd], cmem.value[groupShims] = 30*(1<<20), 70*(1<<20)
	r.add(result{run: run{1, r.modes[2]}, up: 4 * time.Second, cpu: ccpu, pss: cmem, holdWall: time.Minute,
		startedP50: 1 * time.Second, startedP99: 2 * time.Second, startedOK: true})
	r.add(result{run: run{2, r.modes[2]}, err: errors.New("pods up: boom")})
	md := r.markdown()
	for _, want := range []string{
		"| | default | pauseless | containerd | default / containerd | pauseless / containerd |",
		"|---|---|---|---|---|---|",
		"| drop → all 2 containers running | 6.0 s | 3.0 s | 4.0 s | 1.50× | 0.75× |",
		"| drop → a pod's container started (CRI StartedAt), p50 | 2.0 s | 2.0 s | 1.0 s | 2.00× | 2.00× |",
		"| drop → a pod's container started (CRI StartedAt), p99 | 4.0 s | 4.0 s | 2.0 s | 2.00× | 2.00× |",
		"| **netshim CPU over the hold (CPU-s)** | **0.50** | **0.50** | **–** | | |",
		"| stack CPU over the hold (CPU-s) | 3.00 | 2.00 | 2.00 | 1.50× | 1.00× |",
		"| · netshim | 0.50 | 0.50 | – | | |",
		"| · dockerd | 1.00 | 1.00 | – | | |",
		"| · containerd | 0.00 | 0.00 | 1.00 | | |",
		"| containerd shims running over the hold | 4 | 2 | 2 | 2.00× | 1.00× |",
		"| stack PSS at the end of the hold | 200.0 MiB | 100.0 MiB | 100.0 MiB | 2.00× | 1.00× |",
		"| kubelet PLEG relist mean over the hold | – | – | – | – | – |",
		// netshim's own counts: netshim's columns only.
		"| RPC | default | pauseless |",
		"| `Version` | 1.00 | 1.00 |",
		"`containerd` (containerd's own CRI plugin, containerd v2.4.2, its runc shim v2 running runc version 1.4.3",
		"maxPods 250",
		"- containerd, round 2 FAILED: pods up: boom",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	lines := r.netshimCPULines()
	if len(lines) != 2 || strings.Contains(strings.Join(lines, "\n"), "containerd") {
		t.Errorf("netshim CPU lines = %q, want default and pauseless only", lines)
	}
	if s := r.results[2].summary(); strings.Contains(s, "netshim") || !strings.Contains(s, "StartedAt p50 1.0 s p99 2.0 s") {
		t.Errorf("containerd run's summary = %q", s)
	}
	if s := r.results[0].summary(); !strings.HasPrefix(s, "netshim 0.50 CPU-s, up 6.0 s") {
		t.Errorf("netshim run's summary = %q", s)
	}
}
