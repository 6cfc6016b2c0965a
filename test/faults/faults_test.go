//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// scenario is one fault; run reports its iterations in the scope's runs.
type scenario struct {
	name string
	run  func(t *testing.T, w *world)
}

var scenarios = []scenario{
	{"sigkill-during-pod-cycles", testSIGKILLDuringCycles},
	{"sigkill-inside-slow-ipam", testSIGKILLInsideSlowIPAM},
	{"dockerd-restart-under-load", testDockerdRestartUnderLoad},
	{"cni-plugin-hangs-or-lies", testCNIPluginHangsOrLies},
	{"damaged-checkpoints", testDamagedCheckpoints},
	{"disk-full", testDiskFull},
	{"duplicate-run-pod-sandbox", testDuplicateRunPodSandbox},
	{"cni-gc-never-parks-pod-starts", testCNIGCNeverParksPodStarts},
	{"stalled-image-pull", testStalledImagePull},
}

// only is the set of scenarios FAULTS_ONLY names (comma-separated), nil
// when it is unset: every scenario runs.
func only(t *testing.T) map[string]bool {
	v := strings.TrimSpace(os.Getenv("FAULTS_ONLY"))
	if v == "" {
		return nil
	}
	known := map[string]bool{}
	for _, sc := range scenarios {
		known[sc.name] = true
	}
	set := map[string]bool{}
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if !known[name] {
			var names []string
			for _, sc := range scenarios {
				names = append(names, sc.name)
			}
			t.Fatalf("FAULTS_ONLY names %q, which is no scenario; they are: %s", name, strings.Join(names, ", "))
		}
		set[name] = true
	}
	return set
}

// TestFaults runs the scenarios in order (those FAULTS_ONLY names, if
// set), each on a scope of its own, audits for leaks after each, and
// prints one line per scenario and a summary.
func TestFaults(t *testing.T) {
	s := requireSuite(t)
	selected := only(t)
	// What leaks before the suite (another run's debris) is not counted
	// against any scenario.
	baseline, err := audit(s, "--no-defaults")
	if err != nil {
		t.Fatalf("leak audit before the suite: %v", err)
	}
	if len(baseline) > 0 {
		t.Logf("leak audit before the suite found %d leak(s), not counted below:\n%s", len(baseline), strings.Join(baseline, "\n"))
	}
	known := map[string]bool{}
	for _, l := range baseline {
		known[l] = true
	}
	passed, failed := 0, 0
	for i, sc := range scenarios {
		if selected != nil && !selected[sc.name] {
			continue
		}
		// The slot stays the scenario's place in the list, so its bridge,
		// subnet and ports are the same in a partial run.
		scope := newScope(t, i+1)
		ran := false
		ok := t.Run(sc.name, func(t *testing.T) {
			ran = true
			sc.run(t, newWorld(t, s, scope))
		})
		if !ran {
			scope.remove(t)
			continue
		}
		leaks, aerr := audit(s, scope.auditArgs()...)
		var fresh []string
		for _, l := range leaks {
			if !known[l] {
				fresh = append(fresh, l)
			}
		}
		counts := countLeaks(fresh)
		if aerr != nil {
			counts = "audit failed: " + aerr.Error()
		}
		if len(fresh) > 0 {
			t.Errorf("%s: the leak audit found:\n%s", sc.name, strings.Join(fresh, "\n"))
		}
		verdict := "PASS"
		if !ok || len(fresh) > 0 || aerr != nil {
			verdict = "FAIL"
			failed++
		} else {
			passed++
		}
		fmt.Printf("faults: %s: %s (%d runs, leak audit: %s)\n", sc.name, verdict, scope.runs.Load(), counts)
		scope.remove(t)
	}
	fmt.Printf("faults: %d passed, %d failed\n", passed, failed)
}

var leakLine = regexp.MustCompile(`^LEAK \[(\w+)\] `)

// audit runs the leak audit and returns its LEAK lines. Exit status 1
// (leaks found) is not an error; anything else is.
func audit(s suite, args ...string) ([]string, error) {
	ctx, cancel := rpcCtx(context.Background())
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", append([]string{s.audit}, args...)...).Output()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", s.audit, strings.Join(args, " "), err, out)
	}
	var leaks []string
	for _, l := range strings.Split(string(out), "\n") {
		if leakLine.MatchString(l) {
			leaks = append(leaks, l)
		}
	}
	return leaks, nil
}

// countLeaks sums leak lines per check: "none" or "ipam=2 veths=1".
func countLeaks(leaks []string) string {
	if len(leaks) == 0 {
		return "none"
	}
	n := map[string]int{}
	for _, l := range leaks {
		n[leakLine.FindStringSubmatch(l)[1]]++
	}
	var parts []string
	for k, v := range n {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
