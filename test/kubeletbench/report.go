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
	holdWall          time.Duration
	pleg              time.Duration
	plegOK            bool
	cpu, pss          groupFigures
	// During the hold: the RPCs netshim served (kubelet's), by RPC, and
	// the Docker calls it made, by call.
	rpcs, dockerCalls map[string]float64
	notes             []string
	err               error
}

func (r result) summary() string {
	return fmt.Sprintf("up %s, netshim %.2f CPU-s and stack %.2f CPU-s over %s, PLEG relist mean %s, stack PSS %s, stopped %s, gone %s",
		fmtSecs(r.up), r.cpu.value[groupNetshim], r.cpu.stackTotal(), r.holdWall.Round(time.Second),
		fmtPLEG(r.pleg, r.plegOK), fmtMiB(r.pss.stackTotal()), fmtSecs(r.stopped), fmtSecs(r.gone))
}

// report gathers the runs' results into one table, a column per mode.
type report struct {
	o       options
	info    map[string]string
	modes   []mode
	results []result
}

func newReport(o options, info map[string]string) *report {
	return &report{o: o, info: info, modes: o.modes.all()}
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

// cell is the median of f over a mode's successful runs, with the range
// when there are several; "–" when there is none.
func cell(rs []result, f func(result) (float64, bool), format func(float64) string) string {
	var vs []float64
	for _, res := range rs {
		if v, ok := f(res); ok {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return "–"
	}
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	if len(vs) == 1 {
		return format(med)
	}
	return fmt.Sprintf("%s (%s–%s)", format(med), format(vs[0]), format(vs[len(vs)-1]))
}

func fmtSecs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
func fmtCPU(v float64) string        { return fmt.Sprintf("%.2f", v) }
func fmtMiB(v float64) string        { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
func fmtMs(v float64) string         { return fmt.Sprintf("%.1f ms", v) }

func fmtPLEG(d time.Duration, ok bool) string {
	if !ok {
		return "–"
	}
	return fmtMs(float64(d) / float64(time.Millisecond))
}

func secs(d func(result) time.Duration) func(result) (float64, bool) {
	return func(r result) (float64, bool) { return d(r).Seconds(), true }
}

func (r *report) markdown() string {
	var b strings.Builder
	o := r.o
	fmt.Fprintf(&b, "## netshim under a real kubelet: %d static pods\n\n", o.pods)
	fmt.Fprintf(&b, "%s; Docker %s; netshim %s. %d static pods of one container each (%s, `sh -c %q`), "+
		"written at once into kubelet's static pod dir; CNI bridge + host-local + portmap + firewall (%s). "+
		"Hold: %s with the pods running and nothing changing, after %s of settling. kubelet: standalone, syncFrequency %s, -v=%d; "+
		"netshim -v=%d. %d CPUs, %s. %d round(s), the modes rotated each round; each cell is the median over the rounds (min–max when several).\n\n",
		orUnknown(r.info["kubelet"]), orUnknown(r.info["docker"]), orUnknown(r.info["netshim"]), o.pods, o.image, sleeper,
		subnetCIDR, o.hold, o.settle, o.syncFrequency, o.kubeletV, o.netshimV, runtime.NumCPU(), kernel(), o.rounds)
	b.WriteString("Modes: ")
	for i, m := range r.modes {
		if i > 0 {
			b.WriteString("; ")
		}
		if len(m.args) == 0 {
			fmt.Fprintf(&b, "`%s` (no extra flag)", m.name)
		} else {
			fmt.Fprintf(&b, "`%s` (`%s`)", m.name, strings.Join(m.args, " "))
		}
	}
	b.WriteString(".\n\n")

	cols := make([][]result, len(r.modes))
	header := "| |"
	sep := "|---|"
	for i, m := range r.modes {
		cols[i] = r.ok(m.name)
		header += " " + m.name + " |"
		sep += "---|"
	}
	b.WriteString(header + "\n" + sep + "\n")
	rowWrapped := func(what, wrap string, f func(result) (float64, bool), format func(float64) string) {
		b.WriteString("| " + what + " |")
		for _, rs := range cols {
			b.WriteString(" " + wrap + cell(rs, f, format) + wrap + " |")
		}
		b.WriteString("\n")
	}
	row := func(what string, f func(result) (float64, bool), format func(float64) string) {
		rowWrapped(what, "", f, format)
	}
	groupRow := func(what string, fig func(result) groupFigures, g group, format func(float64) string) {
		row(what, func(res result) (float64, bool) { return fig(res).value[g], true }, format)
	}
	cpu := func(res result) groupFigures { return res.cpu }
	pss := func(res result) groupFigures { return res.pss }
	row(fmt.Sprintf("drop → all %d containers running", o.pods), secs(func(r result) time.Duration { return r.up }), func(v float64) string { return fmt.Sprintf("%.1f s", v) })
	row("kubelet PLEG relist mean over the hold", func(res result) (float64, bool) {
		return float64(res.pleg) / float64(time.Millisecond), res.plegOK
	}, fmtMs)
	rowWrapped("**netshim CPU over the hold (CPU-s)**", "**", func(res result) (float64, bool) { return res.cpu.value[groupNetshim], true }, fmtCPU)
	row("stack CPU over the hold (CPU-s)", func(res result) (float64, bool) { return res.cpu.stackTotal(), true }, fmtCPU)
	groupRow("· netshim", cpu, groupNetshim, fmtCPU)
	groupRow("· dockerd", cpu, groupDockerd, fmtCPU)
	groupRow("· containerd", cpu, groupContainerd, fmtCPU)
	// The shims are one per container, pause containers included: a
	// mode without pause containers has half as many.
	row("containerd shims running over the hold", func(res result) (float64, bool) { return float64(res.cpu.procs[groupShims]), true }, func(v float64) string { return fmt.Sprintf("%.0f", v) })
	groupRow("· containerd shims", cpu, groupShims, fmtCPU)
	row("stack PSS at the end of the hold", func(res result) (float64, bool) { return res.pss.stackTotal(), true }, fmtMiB)
	groupRow("· netshim", pss, groupNetshim, fmtMiB)
	groupRow("· dockerd", pss, groupDockerd, fmtMiB)
	groupRow("· containerd", pss, groupContainerd, fmtMiB)
	groupRow("· containerd shims", pss, groupShims, fmtMiB)
	groupRow("kubelet CPU over the hold (CPU-s; not in the stack)", cpu, groupKubelet, fmtCPU)
	groupRow("kubelet PSS at the end of the hold (not in the stack)", pss, groupKubelet, fmtMiB)
	row("manifests removed → all stopped", secs(func(r result) time.Duration { return r.stopped }), func(v float64) string { return fmt.Sprintf("%.1f s", v) })
	row("manifests removed → all gone from the CRI", secs(func(r result) time.Duration { return r.gone }), func(v float64) string { return fmt.Sprintf("%.1f s", v) })

	r.perSecondTable(&b, "The RPCs netshim served during the hold (kubelet's), per second (its `netshim_rpc_duration_seconds_count`):",
		"RPC", header, sep, cols, func(res result) map[string]float64 { return res.rpcs })
	r.perSecondTable(&b, "netshim's Docker API calls during the hold, per second (its `netshim_docker_call_duration_seconds_count`):",
		"call", header, sep, cols, func(res result) map[string]float64 { return res.dockerCalls })

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

// perSecondTable writes a table of counts per second of the hold, a row
// per key found in any run, a column per mode; nothing if no run counted
// anything.
func (r *report) perSecondTable(b *strings.Builder, title, what, header, sep string, cols [][]result, counts func(result) map[string]float64) {
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
	fmt.Fprintf(b, "\n%s\n\n| %s |%s\n%s\n", title, what, header[3:], sep)
	for _, k := range names {
		b.WriteString("| `" + k + "` |")
		for _, rs := range cols {
			b.WriteString(" " + cell(rs, func(res result) (float64, bool) {
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
