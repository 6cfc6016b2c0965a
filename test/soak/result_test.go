//go:build soak

package soak

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// result is what one mode's run found.
type result struct {
	mode    string
	minutes float64
	elapsed time.Duration

	completed, aborted atomic.Int64
	skippedSamples     atomic.Int64
	waited             atomic.Int64 // ns the driver waited for a free slot
	errors             Tally
	kills              killLog

	mu        sync.Mutex
	failures  []string
	stuck     int // lifecycles that could not end
	noIP      map[string]bool
	samples   map[string][]Sample // fitted (after warm-up)
	allCount  int
	collected int
	leaks     int
	leakCount string
	fits      []Fit
}

func (r *result) fail(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, why)
}

// failLifecycle books a stuck lifecycle; the first few are named.
func (r *result) failLifecycle(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stuck++
	if r.stuck <= 5 {
		r.failures = append(r.failures, why)
	}
}

func (r *result) readyWithoutIP(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.noIP == nil {
		r.noIP = map[string]bool{}
	}
	if !r.noIP[id] {
		r.noIP[id] = true
		r.failures = append(r.failures, fmt.Sprintf("sandbox %s is READY without an IP", id))
	}
}

func (r *result) addSample(seg int, fitted bool, x float64, vals map[string]float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.allCount++
	if !fitted {
		return
	}
	if r.samples == nil {
		r.samples = map[string][]Sample{}
	}
	for k, v := range vals {
		r.samples[k] = append(r.samples[k], Sample{Seg: seg, X: x, Y: v})
	}
}

func (r *result) fitted(name string) []Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Sample(nil), r.samples[name]...)
}

func (r *result) passed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.failures) == 0
}

func (r *result) lifecycles() int64 { return r.completed.Load() + r.aborted.Load() }

func (r *result) perMinute() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.lifecycles()) / r.elapsed.Minutes()
}

func (r *result) slopes() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for i, f := range r.fits {
		parts = append(parts, fmt.Sprintf("%s %s (bound %g)", metrics[i].label, f.Per1000(metrics[i].unit), metrics[i].bound/metrics[i].unit))
	}
	return strings.Join(parts, ", ")
}

// line is the run's report, one paragraph of "soak: " lines.
func (r *result) line() string {
	verdict := "PASS"
	if !r.passed() {
		verdict = "FAIL"
	}
	r.mu.Lock()
	noIP, stuck, fails := len(r.noIP), r.stuck, append([]string(nil), r.failures...)
	samples, collected, leaks, leakCount := r.allCount, r.collected, r.leaks, r.leakCount
	r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %s: %s: %d lifecycles in %s (%.1f/min; %d completed, %d aborted by a dead sandbox, %d stuck), slot waits %s\n",
		r.mode, verdict, r.lifecycles(), r.elapsed.Round(time.Second), r.perMinute(), r.completed.Load(), r.aborted.Load(), stuck,
		time.Duration(r.waited.Load()).Round(time.Second))
	fmt.Fprintf(&b, "soak: %s: kills: %s\n", r.mode, r.kills.String())
	fmt.Fprintf(&b, "soak: %s: failed calls a kubelet saw (%d): %s\n", r.mode, r.errors.Total(), r.errors.String())
	fmt.Fprintf(&b, "soak: %s: READY without an IP: %d; sandboxes collected after the load: %d\n", r.mode, noIP, collected)
	fmt.Fprintf(&b, "soak: %s: per 1,000 lifecycles (%d samples, %d skipped while netshim restarted): %s\n", r.mode, samples, r.skippedSamples.Load(), r.slopes())
	fmt.Fprintf(&b, "soak: %s: leak audit: %d leak(s) (%s)", r.mode, leaks, leakCount)
	for _, f := range fails {
		fmt.Fprintf(&b, "\nsoak: %s: FAIL: %s", r.mode, f)
	}
	return b.String()
}

// markdown is the table docs/benchmarks.md takes.
func markdown(rs []*result) string {
	var b strings.Builder
	b.WriteString("| mode | minutes | lifecycles | per min | kills | failed calls | READY w/o IP | leaks |")
	for _, m := range metrics {
		fmt.Fprintf(&b, " %s / 1,000 |", m.label)
	}
	b.WriteString(" verdict |\n|---|---|---|---|---|---|---|---|")
	for range metrics {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	for _, r := range rs {
		verdict := "pass"
		if !r.passed() {
			verdict = "FAIL"
		}
		r.mu.Lock()
		noIP, leaks, fits := len(r.noIP), r.leaks, append([]Fit(nil), r.fits...)
		r.mu.Unlock()
		fmt.Fprintf(&b, "| %s | %.0f | %d | %.1f | %s | %d | %d | %d |", r.mode, r.elapsed.Minutes(), r.lifecycles(), r.perMinute(),
			r.kills.String(), r.errors.Total(), noIP, leaks)
		for i := range metrics {
			if i < len(fits) {
				fmt.Fprintf(&b, " %s |", fits[i].Per1000(metrics[i].unit))
			} else {
				b.WriteString(" – |")
			}
		}
		fmt.Fprintf(&b, " %s |\n", verdict)
	}
	return b.String()
}

// killLog counts the kills done, by kind, and what each CNI kill hit.
type killLog struct {
	mu   sync.Mutex
	n    map[KillKind]int
	what []string
}

func (k *killLog) add(kind KillKind, what string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n == nil {
		k.n = map[KillKind]int{}
	}
	if kind == KillCNI && what == "" {
		k.what = append(k.what, "no plugin ran within "+cniHunt.String())
		return
	}
	k.n[kind]++
	if what != "" {
		k.what = append(k.what, what)
	}
}

func (k *killLog) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var parts []string
	for kind, n := range k.n {
		parts = append(parts, fmt.Sprintf("%s=%d", kind, n))
	}
	sort.Strings(parts)
	s := strings.Join(parts, " ")
	if s == "" {
		s = "none"
	}
	if len(k.what) > 0 {
		s += " (" + strings.Join(k.what, ", ") + ")"
	}
	return s
}
