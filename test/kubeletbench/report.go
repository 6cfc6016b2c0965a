package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// result is what one run measured.
type result struct {
	run run
	// up: manifests written -> every container running and every
	// sandbox ready. stopped, gone: manifests removed -> none running or
	// ready; -> none listed at all (kubelet removes them at its container
	// GC).
	up, stopped, gone time.Duration
	// startedP50, startedP99: manifests written -> a pod's container's
	// CRI StartedAt, over the pods (startedOK when read).
	startedP50, startedP99 time.Duration
	startedOK              bool
	holdWall               time.Duration
	pleg                   time.Duration
	plegOK                 bool
	cpu, pss               groupFigures
	// During the hold: the RPCs netshim served (kubelet's), by RPC, and
	// the Docker calls it made, by call; nil for the containerd peer.
	rpcs, dockerCalls map[string]float64
	notes             []string
	err               error
}

func (r result) summary() string {
	s := fmt.Sprintf("up %s, StartedAt p50 %s p99 %s, stack %.2f CPU-s over %s, PLEG relist mean %s, stack PSS %s, stopped %s, gone %s",
		fmtSecs(r.up), fmtStarted(r.startedP50, r.startedOK), fmtStarted(r.startedP99, r.startedOK), r.cpu.stackTotal(),
		r.holdWall.Round(time.Second), fmtPLEG(r.pleg, r.plegOK), fmtMiB(r.pss.stackTotal()), fmtSecs(r.stopped), fmtSecs(r.gone))
	if r.run.mode.kind == kindNetshim {
		s = fmt.Sprintf("netshim %.2f CPU-s, ", r.cpu.value[groupNetshim]) + s
	}
	return s
}

// report gathers the runs' results into one table, a column per mode,
// and, when the containerd peer ran, a column per netshim mode with its
// ratio to containerd.
type report struct {
	o       options
	info    map[string]string
	modes   []mode
	results []result
}

func newReport(o options, info map[string]string) *report {
	return &report{o: o, info: info, modes: o.columns()}
}

func (r *report) add(res result) { r.results = append(r.results, res) }

// ok is the successful results of a mode.
func (r *report) ok(m string) []result {
	var out []result
	for _, res := range r.results {
		if res.run.mode.name == m && res.err == nil {
			out = append(out, res)
		}
	}
	return out
}

// values are f over results, where f has one.
func values(rs []result, f func(result) (float64, bool)) []float64 {
	var vs []float64
	for _, res := range rs {
		if v, ok := f(res); ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// median of vs; false when there is none.
func median(vs []float64) (float64, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
	}
	return s[len(s)/2], true
}

// cell is the median of f over a mode's successful runs, with the range
// when there are several; "–" when there is none.
func cell(rs []result, f func(result) (float64, bool), format func(float64) string) string {
	vs := values(rs, f)
	med, ok := median(vs)
	if !ok {
		return "–"
	}
	if len(vs) == 1 {
		return format(med)
	}
	return fmt.Sprintf("%s (%s–%s)", format(med), format(slices.Min(vs)), format(slices.Max(vs)))
}

// ratioCell is a netshim mode's median over containerd's: "0.68×"; "–"
// when either has none or containerd's is 0.
func ratioCell(netshim, containerd []result, f func(result) (float64, bool)) string {
	a, okA := median(values(netshim, f))
	b, okB := median(values(containerd, f))
	if !okA || !okB || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func fmtSecs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
func fmtCPU(v float64) string        { return fmt.Sprintf("%.2f", v) }
func fmtMiB(v float64) string        { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
func fmtMs(v float64) string         { return fmt.Sprintf("%.1f ms", v) }
func fmtS(v float64) string          { return fmt.Sprintf("%.1f s", v) }
func fmtCount(v float64) string      { return fmt.Sprintf("%.0f", v) }

func fmtPLEG(d time.Duration, ok bool) string {
	if !ok {
		return "–"
	}
	return fmtMs(float64(d) / float64(time.Millisecond))
}

func fmtStarted(d time.Duration, ok bool) string {
	if !ok {
		return "–"
	}
	return fmtSecs(d)
}

func secs(d func(result) time.Duration) func(result) (float64, bool) {
	return func(r result) (float64, bool) { return d(r).Seconds(), true }
}

// tableRow is one row of the main table: what it shows, how each run's
// figure is read (false: the run has none, such as netshim's own CPU in
// the containerd peer's run) and formatted, and whether a ratio to
// containerd's column means something there.
type tableRow struct {
	what   string
	bold   bool
	value  func(result) (float64, bool)
	format func(float64) string
	ratio  bool
}

// groupValue reads a group's figure, which a run has only if the group
// is part of its runtime's stack (or is kubelet's).
func groupValue(fig func(result) groupFigures, g group) func(result) (float64, bool) {
	return func(res result) (float64, bool) {
		return fig(res).value[g], g == groupKubelet || slices.Contains(stackGroupsOf(res.run.mode.kind), g)
	}
}

func (r *report) rows() []tableRow {
	cpu := func(res result) groupFigures { return res.cpu }
	pss := func(res result) groupFigures { return res.pss }
	dur := func(d func(result) time.Duration) func(result) (float64, bool) { return secs(d) }
	started := func(d func(result) time.Duration) func(result) (float64, bool) {
		return func(res result) (float64, bool) { return d(res).Seconds(), res.startedOK }
	}
	return []tableRow{
		{what: fmt.Sprintf("drop → all %d containers running", r.o.pods), value: dur(func(r result) time.Duration { return r.up }), format: fmtS, ratio: true},
		{what: "drop → a pod's container started (CRI StartedAt), p50", value: started(func(r result) time.Duration { return r.startedP50 }), format: fmtS, ratio: true},
		{what: "drop → a pod's container started (CRI StartedAt), p99", value: started(func(r result) time.Duration { return r.startedP99 }), format: fmtS, ratio: true},
		{what: "kubelet PLEG relist mean over the hold", value: func(res result) (float64, bool) {
			return float64(res.pleg) / float64(time.Millisecond), res.plegOK
		}, format: fmtMs, ratio: true},
		{what: "**netshim CPU over the hold (CPU-s)**", bold: true, value: func(res result) (float64, bool) {
			return res.cpu.value[groupNetshim], res.run.mode.kind == kindNetshim
		}, format: fmtCPU},
		{what: "stack CPU over the hold (CPU-s)", value: func(res result) (float64, bool) { return res.cpu.stackTotal(), true }, format: fmtCPU, ratio: true},
		{what: "· netshim", value: groupValue(cpu, groupNetshim), format: fmtCPU},
		{what: "· dockerd", value: groupValue(cpu, groupDockerd), format: fmtCPU},
		{what: "· containerd", value: groupValue(cpu, groupContainerd), format: fmtCPU},
		// The shims are one per container under Docker, pause containers
		// included (a mode without pause containers has half as many);
		// containerd's CRI runs a pod's containers under its sandbox's.
		{what: "containerd shims running over the hold", value: func(res result) (float64, bool) {
			return float64(res.cpu.procs[groupShims]), true
		}, format: fmtCount, ratio: true},
		{what: "· containerd shims", value: groupValue(cpu, groupShims), format: fmtCPU, ratio: true},
		{what: "stack PSS at the end of the hold", value: func(res result) (float64, bool) { return res.pss.stackTotal(), true }, format: fmtMiB, ratio: true},
		{what: "· netshim", value: groupValue(pss, groupNetshim), format: fmtMiB},
		{what: "· dockerd", value: groupValue(pss, groupDockerd), format: fmtMiB},
		{what: "· containerd", value: groupValue(pss, groupContainerd), format: fmtMiB},
		{what: "· containerd shims", value: groupValue(pss, groupShims), format: fmtMiB, ratio: true},
		{what: "kubelet CPU over the hold (CPU-s; not in the stack)", value: groupValue(cpu, groupKubelet), format: fmtCPU, ratio: true},
		{what: "kubelet PSS at the end of the hold (not in the stack)", value: groupValue(pss, groupKubelet), format: fmtMiB, ratio: true},
		{what: "manifests removed → all stopped", value: dur(func(r result) time.Duration { return r.stopped }), format: fmtS, ratio: true},
		{what: "manifests removed → all gone from the CRI", value: dur(func(r result) time.Duration { return r.gone }), format: fmtS, ratio: true},
	}
}

// column is one mode's successful results.
type column struct {
	mode mode
	rs   []result
}

// columns splits the modes: all of them, netshim's alone, and the
// containerd peer's (nil when it is not in the rotation).
func (r *report) columns() (all, netshim []column, containerd *column) {
	for _, m := range r.modes {
		c := column{mode: m, rs: r.ok(m.name)}
		all = append(all, c)
		if m.kind == kindContainerd {
			peer := c
			containerd = &peer
		} else {
			netshim = append(netshim, c)
		}
	}
	return all, netshim, containerd
}

func (r *report) markdown() string {
	var b strings.Builder
	o := r.o
	all, netshim, containerd := r.columns()
	fmt.Fprintf(&b, "## netshim under a real kubelet: %d static pods\n\n", o.pods)
	fmt.Fprintf(&b, "%s; Docker %s; netshim %s. %d static pods of one container each (%s, `sh -c %q`), "+
		"written at once into kubelet's static pod dir; CNI bridge + host-local + portmap + firewall (%s). "+
		"Hold: %s with the pods running and nothing changing, after %s of settling. kubelet: standalone, syncFrequency %s, -v=%d%s; "+
		"netshim -v=%d. %d CPUs, %s. %d round(s), the modes rotated each round; each cell is the median over the rounds (min–max when several).\n\n",
		orUnknown(r.info["kubelet"]), orUnknown(r.info["docker"]), orUnknown(r.info["netshim"]), o.pods, o.image, sleeper,
		subnetCIDR, o.hold, o.settle, o.syncFrequency, o.kubeletV, maxPodsNote(o.maxPods), o.netshimV, runtime.NumCPU(), kernel(), o.rounds)
	b.WriteString("Modes: ")
	for i, m := range r.modes {
		if i > 0 {
			b.WriteString("; ")
		}
		switch {
		case m.kind == kindContainerd:
			fmt.Fprintf(&b, "`%s` (containerd's own CRI plugin, %s, its runc shim v2 running %s, overlayfs, the same CNI conflist; "+
				"a fresh containerd each run, the images imported from the private dockerd; its stack is containerd and its shims)",
				m.name, orUnknown(r.info["containerd"]), orUnknown(r.info["runc"]))
		case len(m.args) == 0:
			fmt.Fprintf(&b, "`%s` (no extra flag)", m.name)
		default:
			fmt.Fprintf(&b, "`%s` (`%s`)", m.name, strings.Join(m.args, " "))
		}
	}
	b.WriteString(".\n\n")

	header, sep := "| |", "|---|"
	for _, c := range all {
		header += " " + c.mode.name + " |"
		sep += "---|"
	}
	var ratioCols []column
	if containerd != nil {
		ratioCols = netshim
		for _, c := range ratioCols {
			header += " " + c.mode.name + " / " + containerd.mode.name + " |"
			sep += "---|"
		}
	}
	b.WriteString(header + "\n" + sep + "\n")
	for _, row := range r.rows() {
		wrap := ""
		if row.bold {
			wrap = "**"
		}
		b.WriteString("| " + row.what + " |")
		for _, c := range all {
			b.WriteString(" " + wrap + cell(c.rs, row.value, row.format) + wrap + " |")
		}
		for _, c := range ratioCols {
			if row.ratio {
				b.WriteString(" " + ratioCell(c.rs, containerd.rs, row.value) + " |")
			} else {
				b.WriteString(" |")
			}
		}
		b.WriteString("\n")
	}

	r.perSecondTable(&b, "The RPCs netshim served during the hold (kubelet's), per second (its `netshim_rpc_duration_seconds_count`):",
		"RPC", netshim, func(res result) map[string]float64 { return res.rpcs })
	r.perSecondTable(&b, "netshim's Docker API calls during the hold, per second (its `netshim_docker_call_duration_seconds_count`):",
		"call", netshim, func(res result) map[string]float64 { return res.dockerCalls })

	var notes []string
	for _, res := range r.results {
		for _, n := range res.notes {
			notes = append(notes, fmt.Sprintf("%s: %s", res.run, n))
		}
		if res.err != nil {
			notes = append(notes, fmt.Sprintf("%s FAILED: %s", res.run, strings.ReplaceAll(res.err.Error(), "\n", " ")))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n")
		for _, n := range notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}

func maxPodsNote(maxPods int) string {
	if maxPods == 0 {
		return ""
	}
	return fmt.Sprintf(", maxPods %d", maxPods)
}

// perSecondTable writes a table of counts per second of the hold, a row
// per key found in any run, a column per netshim mode (the counts are
// netshim's own metrics); nothing if no run counted anything.
func (r *report) perSecondTable(b *strings.Builder, title, what string, cols []column, counts func(result) map[string]float64) {
	keys := map[string]bool{}
	for _, res := range r.results {
		for k := range counts(res) {
			keys[k] = true
		}
	}
	if len(keys) == 0 {
		return
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	header, sep := "| "+what+" |", "|---|"
	for _, c := range cols {
		header += " " + c.mode.name + " |"
		sep += "---|"
	}
	fmt.Fprintf(b, "\n%s\n\n%s\n%s\n", title, header, sep)
	for _, k := range names {
		b.WriteString("| `" + k + "` |")
		for _, c := range cols {
			b.WriteString(" " + cell(c.rs, func(res result) (float64, bool) {
				if res.holdWall <= 0 {
					return 0, false
				}
				return counts(res)[k] / res.holdWall.Seconds(), true
			}, func(v float64) string { return fmt.Sprintf("%.2f", v) }) + " |")
		}
		b.WriteString("\n")
	}
}

// netshimCPULines are one line per mode with netshim's own CPU over the
// hold, for a reader (or a script) that wants that figure alone.
func (r *report) netshimCPULines() []string {
	var out []string
	for _, m := range r.modes {
		if m.kind != kindNetshim {
			continue
		}
		rs := r.ok(m.name)
		out = append(out, fmt.Sprintf("netshim CPU over the %s hold: %s: %s CPU-s (%d run(s))", r.o.hold, m.name,
			cell(rs, func(res result) (float64, bool) { return res.cpu.value[groupNetshim], true }, fmtCPU), len(rs)))
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

func kernel() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "kernel ?"
	}
	return "kernel " + strings.TrimSpace(string(data))
}
