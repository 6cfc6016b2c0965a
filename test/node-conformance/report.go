package nodeconformance

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// ConformanceTag is the text every spec of the node conformance set
// carries in its name (framework.WithNodeConformance).
const ConformanceTag = "[NodeConformance]"

// Spec is one node of the suite's ginkgo JSON report (--ginkgo.json-report).
type Spec struct {
	Name     string // containers' texts and the leaf's, space-separated
	NodeType string // "It" for specs; suite nodes otherwise
	State    string // passed, failed, skipped, pending, panicked, timedout, interrupted, aborted
	Duration time.Duration
	Message  string // the failure or skip message
	Location string // file:line of the failure
}

// ginkgoReport is the part of ginkgo v2's types.Report this reads.
type ginkgoReport struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeType            string
		LeafNodeText            string
		State                   string
		RunTime                 int64
		Failure                 struct {
			Message  string
			Location struct {
				FileName   string
				LineNumber int
			}
		}
	}
}

// ParseReport reads a ginkgo JSON report (an array of suite reports).
func ParseReport(r io.Reader) ([]Spec, error) {
	var reports []ginkgoReport
	if err := json.NewDecoder(r).Decode(&reports); err != nil {
		return nil, fmt.Errorf("decoding the ginkgo JSON report: %w", err)
	}
	var out []Spec
	for _, rep := range reports {
		for _, s := range rep.SpecReports {
			parts := append(append([]string(nil), s.ContainerHierarchyTexts...), s.LeafNodeText)
			name := strings.TrimSpace(strings.Join(parts, " "))
			if name == "" {
				name = s.LeafNodeType
			}
			sp := Spec{
				Name:     name,
				NodeType: s.LeafNodeType,
				State:    s.State,
				Duration: time.Duration(s.RunTime),
				Message:  s.Failure.Message,
			}
			if s.Failure.Location.FileName != "" {
				sp.Location = fmt.Sprintf("%s:%d", s.Failure.Location.FileName, s.Failure.Location.LineNumber)
			}
			out = append(out, sp)
		}
	}
	return out, nil
}

// Skip is one entry of the reviewed skip list: the specs Pattern matches
// (a Go regexp on the full spec name, which is also what ginkgo's --skip
// matches) and why this machine or this offline setup cannot pass them.
type Skip struct {
	Pattern string
	Reason  string
}

// Outcome is what a spec's run counts as.
type Outcome string

const (
	Passed  Outcome = "PASS"
	Failed  Outcome = "FAIL"
	Skipped Outcome = "SKIP"
)

// Result is one spec of the run, as the summary counts it.
type Result struct {
	Spec
	Outcome Outcome
	Reason  string // for a skip: the skip list's reason or the spec's own message
}

// Tally is the counted run.
type Tally struct {
	Results []Result
	// SuiteFailures are failed suite nodes (BeforeSuite and the like):
	// each fails the run without being a spec.
	SuiteFailures []Spec
	// UnusedSkips are skip list entries no spec of the run matched:
	// stale entries, to be removed from the list.
	UnusedSkips []Skip
}

// Counts returns the passed, failed and skipped figures; a failed suite
// node counts as a failure.
func (t Tally) Counts() (passed, failed, skipped int) {
	for _, r := range t.Results {
		switch r.Outcome {
		case Passed:
			passed++
		case Failed:
			failed++
		case Skipped:
			skipped++
		}
	}
	return passed, failed + len(t.SuiteFailures), skipped
}

// SummaryLine is the run's last line.
func (t Tally) SummaryLine() string {
	p, f, s := t.Counts()
	return fmt.Sprintf("node-conformance: %d passed, %d failed, %d skipped", p, f, s)
}

// failedStates are the ginkgo states that fail a spec.
var failedStates = map[string]bool{
	"failed": true, "panicked": true, "timedout": true, "interrupted": true, "aborted": true,
}

// Classify counts the specs of the run: those whose name carries
// ConformanceTag and that focus matches (nil: all of them). A spec the
// skip list matches is skipped for the list's reason, whatever ginkgo
// says; one that skipped itself keeps its own message as the reason; one
// that never ran (the suite stopped early) is a failure.
func Classify(specs []Spec, focus *regexp.Regexp, skips []Skip) (Tally, error) {
	return ClassifyTagged(specs, ConformanceTag, focus, skips)
}

// ClassifyTagged is Classify for the specs whose name carries tag
// (kubernetes' e2e suite's "[Conformance]", say), or one of also.
func ClassifyTagged(specs []Spec, tag string, focus *regexp.Regexp, skips []Skip, also ...string) (Tally, error) {
	res := make([]*regexp.Regexp, len(skips))
	for i, s := range skips {
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			return Tally{}, fmt.Errorf("skip list entry %q: %w", s.Pattern, err)
		}
		res[i] = re
	}
	used := make([]bool, len(skips))
	var t Tally
	for _, sp := range specs {
		if sp.NodeType != "It" {
			if failedStates[sp.State] {
				t.SuiteFailures = append(t.SuiteFailures, sp)
			}
			continue
		}
		tagged := strings.Contains(sp.Name, tag)
		for _, a := range also {
			tagged = tagged || strings.Contains(sp.Name, a)
		}
		if !tagged || (focus != nil && !focus.MatchString(sp.Name)) {
			continue
		}
		r := Result{Spec: sp}
		skipped := -1
		for i, re := range res {
			if re.MatchString(sp.Name) {
				skipped, used[i] = i, true
				break
			}
		}
		switch {
		case skipped >= 0:
			r.Outcome, r.Reason = Skipped, skips[skipped].Reason
		case sp.State == "passed":
			r.Outcome = Passed
		case failedStates[sp.State]:
			r.Outcome = Failed
		case sp.Message != "": // the spec skipped itself, and said why
			r.Outcome, r.Reason = Skipped, firstLine(sp.Message)
		default:
			// Focused, not in the skip list, and never started: the suite
			// stopped before it (timeout, interrupt, a failed BeforeSuite).
			// That is no skip: it counts against the run.
			r.Outcome, r.Message = Failed, "not run: the suite stopped before this spec (ginkgo state "+sp.State+")"
		}
		t.Results = append(t.Results, r)
	}
	for i, u := range used {
		if !u {
			t.UnusedSkips = append(t.UnusedSkips, skips[i])
		}
	}
	return t, nil
}

// Line is the one line a result prints as.
func (r Result) Line() string {
	switch r.Outcome {
	case Failed:
		return fmt.Sprintf("FAIL %s (%s): %s", r.Name, r.Duration.Round(time.Second), firstLine(r.Message))
	case Skipped:
		return fmt.Sprintf("SKIP %s: %s", r.Name, r.Reason)
	default:
		return fmt.Sprintf("PASS %s (%s)", r.Name, r.Duration.Round(time.Second))
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
