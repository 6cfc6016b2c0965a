package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// samples, or 0 for none.
func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// fmtDur prints a latency in a unit that keeps three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

func fmtBytes(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// fmtKinds lists request kinds with their count per op.
func fmtKinds(c requestCounts, ops int) string {
	top := c.top()
	if len(top) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(top))
	for _, k := range top {
		parts = append(parts, fmt.Sprintf("`%s` %s", k.kind, fmtPerOp(k.count, ops)))
	}
	return strings.Join(parts, ", ")
}

func fmtPerOp(n, ops int) string {
	if ops <= 1 {
		return fmt.Sprintf("×%d", n)
	}
	v := float64(n) / float64(ops)
	if v == math.Trunc(v) {
		return fmt.Sprintf("×%.0f", v)
	}
	return fmt.Sprintf("×%.2f", v)
}

// row is one line of the results table.
type row struct {
	item  string // the item number(s)
	what  string
	value string
}

// report collects the rows of the table and the figures that the ratios
// and acceptance checks are computed from.
type report struct {
	rows   []row
	chains []chainResult
	durs   map[string]time.Duration
	nums   map[string]float64
	header []string
	notes  []string
}

func newReport() *report {
	return &report{durs: map[string]time.Duration{}, nums: map[string]float64{}}
}

func (r *report) add(item, what, value string) {
	r.rows = append(r.rows, row{item, what, value})
	fmt.Printf("  %-58s %s\n", what, value)
}

func (r *report) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// chainResult is RunPodSandbox in each sandbox netns mode and on the floor
// (with loopback), over the same rounds on one CNI chain: sample i of
// each is from round i.
type chainResult struct {
	key                           string // "bridge" or "slow": what the acceptance targets name
	title                         string
	rounds                        int
	def, pinned, pauseless, floor []time.Duration
	floorPhases                   []floorPhases // the steps of each floor sample
	pinnedSkip                    string        // why pinned (and pauseless, which needs the same) has no samples
}

// phasesP50 is the p50 of each floor step, "create / start / inspect /
// loopback ADD / ADD".
func (c chainResult) phasesP50() string {
	if len(c.floorPhases) == 0 {
		return "n/a"
	}
	steps := []func(floorPhases) time.Duration{
		func(p floorPhases) time.Duration { return p.create },
		func(p floorPhases) time.Duration { return p.start },
		func(p floorPhases) time.Duration { return p.inspect },
		func(p floorPhases) time.Duration { return p.loADD },
		func(p floorPhases) time.Duration { return p.add },
	}
	parts := make([]string, len(steps))
	for i, step := range steps {
		var ds []time.Duration
		for _, p := range c.floorPhases {
			ds = append(ds, step(p))
		}
		parts[i] = fmtDur(percentile(ds, 50))
	}
	return strings.Join(parts, " / ")
}

// chainRow is one line of the chain table: its label and its value for a
// chain.
type chainRow struct {
	what  string
	value func(c chainResult) string
}

var chainRows = []chainRow{
	{"(a) default mode, p50 / p90", func(c chainResult) string { return p50p90(c.def) }},
	{"(b) pinned mode, p50 / p90", func(c chainResult) string { return p50p90OrNot(c.pinned) }},
	{"(c) pauseless mode, p50 / p90", func(c chainResult) string { return p50p90OrNot(c.pauseless) }},
	{"(d) floor: create+start+inspect, loopback ADD + ADD, p50 / p90", func(c chainResult) string { return p50p90(c.floor) }},
	{"  floor steps p50: create / start / inspect / loopback ADD / ADD", chainResult.phasesP50},
	{"pinned / floor, p50 / p50", func(c chainResult) string { return ratioOrNA(c.pinned, c.floor) }},
	{"pauseless / floor, p50 / p50", func(c chainResult) string { return ratioOrNA(c.pauseless, c.floor) }},
	{"default / floor, p50 / p50", func(c chainResult) string { return ratioOrNA(c.def, c.floor) }},
	{"pinned / floor, median of the per-round ratios", func(c chainResult) string { return pairedRatio(c.pinned, c.floor) }},
	{"pauseless / floor, median of the per-round ratios", func(c chainResult) string { return pairedRatio(c.pauseless, c.floor) }},
	{"default / floor, median of the per-round ratios", func(c chainResult) string { return pairedRatio(c.def, c.floor) }},
	{"rounds", func(c chainResult) string { return fmt.Sprint(c.rounds) }},
}

// p50p90OrNot is p50p90 for a mode that may not have been measured (the
// notes say why).
func p50p90OrNot(s []time.Duration) string {
	if len(s) == 0 {
		return "not measured"
	}
	return p50p90(s)
}

func ratioOrNA(a, b []time.Duration) string {
	if len(a) == 0 || len(b) == 0 {
		return "n/a"
	}
	return ratio(percentile(a, 50), percentile(b, 50))
}

// addChain records one chain's comparison and prints it.
func (r *report) addChain(c chainResult) {
	r.chains = append(r.chains, c)
	fmt.Printf("  RunPodSandbox, %s:\n", c.title)
	for _, row := range chainRows {
		fmt.Printf("    %-56s %s\n", row.what, row.value(c))
	}
}

func (r *report) chain(key string) (chainResult, bool) {
	for _, c := range r.chains {
		if c.key == key {
			return c, true
		}
	}
	return chainResult{}, false
}

// chainTable renders the chains side by side.
func (r *report) chainTable(b *strings.Builder) {
	if len(r.chains) == 0 {
		return
	}
	b.WriteString("\nRunPodSandbox by sandbox netns mode and CNI chain (issue 13): each round makes one pod of each kind, in an order that rotates every round.\n\n| RunPodSandbox |")
	for _, c := range r.chains {
		b.WriteString(" " + c.title + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(r.chains)) + "\n")
	for _, row := range chainRows {
		b.WriteString("| " + row.what + " |")
		for _, c := range r.chains {
			b.WriteString(" " + escapePipes(row.value(c)) + " |")
		}
		b.WriteString("\n")
	}
}

// chainChecks are the acceptance targets of issue 13 (the default mode on
// the bridge chain is the existing RunPodSandbox target).
func (r *report) chainChecks() []check {
	var out []check
	for _, t := range []struct {
		key, what string
		pinned    bool
		limit     float64
	}{
		{"bridge", "RunPodSandbox p50, pinned mode ≤ 0.8 × floor p50 (bridge chain)", true, 0.8},
		{"slow", "RunPodSandbox p50, pinned mode ≤ 0.6 × floor p50 (slow chain)", true, 0.6},
		{"slow", "RunPodSandbox p50, default mode ≤ 1.05 × floor p50 (slow chain)", false, 1.05},
	} {
		c := check{target: t.what, measured: "not measured", met: "—"}
		res, ok := r.chain(t.key)
		samples := res.def
		if t.pinned {
			samples = res.pinned
		}
		switch {
		case ok && len(samples) > 0 && len(res.floor) > 0:
			v := float64(percentile(samples, 50)) / float64(percentile(res.floor, 50))
			// Three decimals: at two, 0.601 would read as a target met.
			c.measured = fmt.Sprintf("%.3f× (per-round median %s)", v, pairedRatio(samples, res.floor))
			c.met = yesNo(v <= t.limit)
		case ok && t.pinned && res.pinnedSkip != "":
			c.measured = "not measured: pinned mode unavailable (see the notes)"
		}
		out = append(out, c)
	}
	return out
}

// check is one acceptance target of the issue.
type check struct {
	target   string
	measured string
	met      string
}

// checks evaluates the acceptance targets from what was measured; a figure
// that was not measured (scenario failed) says so.
func (r *report) checks() []check {
	var out []check
	// The target is netshim's latency: where the bench also timed the call
	// with the answer kept as bytes, that figure is judged, since decoding
	// a 48 kB answer is the client's work (kubelet's), not the runtime's.
	lat := func(name, key string) {
		d, ok := r.durs[key+".p99"]
		c := check{target: name + " p99 < 1 ms with the pods present", measured: "not measured", met: "—"}
		if ok {
			c.measured = fmtDur(d)
			c.met = yesNo(d < time.Millisecond)
			if raw, ok := r.durs[key+"raw.p99"]; ok {
				c.measured = fmt.Sprintf("%s netshim + gRPC (%s with the client decoding the answer)", fmtDur(raw), fmtDur(d))
				c.met = yesNo(raw < time.Millisecond)
			}
		}
		out = append(out, c)
	}
	lat("ListPodSandbox", "list")
	lat("PodSandboxStatus", "status")
	c := check{target: "idle Docker requests: 0 per second apart from the events stream", measured: "not measured", met: "—"}
	if v, ok := r.nums["idle.rps"]; ok {
		c.measured = fmt.Sprintf("%.2f/s", v)
		c.met = yesNo(v == 0)
	}
	out = append(out, c)
	ratio := func(target, num, den string, limit float64) {
		c := check{target: target, measured: "not measured", met: "—"}
		n, ok1 := r.durs[num]
		d, ok2 := r.durs[den]
		if ok1 && ok2 && d > 0 {
			v := float64(n) / float64(d)
			c.measured = fmt.Sprintf("%.2f×", v)
			c.met = yesNo(v <= limit)
		}
		out = append(out, c)
	}
	ratio("RunPodSandbox p50 ≤ 1.05 × floor p50 (floor with loopback ADD; default mode, bridge chain)", "run.p50", "floor.lo.p50", 1.05)
	ratio("Stop+Remove p50 ≤ 1.1 × teardown floor p50 (floor with loopback DEL)", "stopremove.p50", "teardown.lo.p50", 1.1)
	// Issue 10: kubelet polls the stats calls; they must cost no Docker
	// round trip, however many containers there are.
	for _, k := range []struct{ name, key string }{{"ListPodSandboxStats", "podstatsctr"}, {"ListContainerStats", "ctrstats"}} {
		c := check{target: "Docker requests per " + k.name + " with a running container in each pod: 0", measured: "not measured", met: "—"}
		if v, ok := r.nums[k.key+".reqs"]; ok {
			c.measured = fmt.Sprintf("%.3g", v)
			c.met = yesNo(v == 0)
		}
		out = append(out, c)
	}
	return append(out, r.chainChecks()...)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

// markdown renders the whole report.
func (r *report) markdown() string {
	var b strings.Builder
	for _, h := range r.header {
		b.WriteString(h + "\n")
	}
	b.WriteString("\n| # | Measurement | Value |\n|---|---|---|\n")
	for _, row := range r.rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", row.item, row.what, escapePipes(row.value))
	}
	r.chainTable(&b)
	b.WriteString("\n| Acceptance target | Measured | Met |\n|---|---|---|\n")
	for _, c := range r.checks() {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", c.target, c.measured, c.met)
	}
	if len(r.notes) > 0 {
		b.WriteString("\n")
		for _, n := range r.notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}

func escapePipes(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
