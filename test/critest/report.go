package critest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// specLines turns ginkgo's -v output, line by line, into one line per
// finished spec: "  pass  <spec>", "  FAIL  <spec>" or "  skip  <spec>".
// The spec's text line starts with "[k8s.io]"; its result line with "•"
// (passed or failed) or "S [SKIPPED]".
type specLines struct {
	spec string
}

var (
	failRE = regexp.MustCompile(`^• \[(FAILED|PANICKED|TIMEDOUT|INTERRUPTED)\]`)
	passRE = regexp.MustCompile(`^• \[[0-9.]+ seconds\]`)
)

// line takes one line of critest's output and returns the spec line it
// completes, if any.
func (s *specLines) line(l string) (string, bool) {
	verdict := ""
	switch {
	case strings.HasPrefix(l, "[k8s.io]"):
		s.spec = l
		return "", false
	case failRE.MatchString(l):
		verdict = "FAIL"
	case passRE.MatchString(l):
		verdict = "pass"
	case strings.HasPrefix(l, "S [SKIPPED]"):
		verdict = "skip"
	default:
		return "", false
	}
	spec := s.spec
	s.spec = ""
	if spec == "" {
		return "", false
	}
	return "  " + verdict + "  " + spec, true
}

var summaryStartRE = regexp.MustCompile(`^Summarizing [0-9]+ Failure|^Ran [0-9]+ of [0-9]+ Specs`)

// summary is critest's own summary: from ginkgo's "Summarizing N
// Failures" (or "Ran N of M Specs") to the end, without blank lines.
func summary(log string) []string {
	var out []string
	on := false
	for _, l := range strings.Split(log, "\n") {
		if !on && summaryStartRE.MatchString(l) {
			on = true
		}
		if on && strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// Counts are ginkgo's final counts.
type Counts struct {
	Passed, Failed, Pending, Skipped int
}

// String is the last line of a run, which CI and people read: pending
// specs count as skipped.
func (c Counts) String() string {
	return fmt.Sprintf("conformance: %d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped+c.Pending)
}

var countsRE = regexp.MustCompile(`([0-9]+) Passed \| ([0-9]+) Failed \| ([0-9]+) Pending \| ([0-9]+) Skipped`)

// parseCounts reads the last "N Passed | N Failed | N Pending | N Skipped"
// of critest's output.
func parseCounts(log string) (Counts, bool) {
	all := countsRE.FindAllStringSubmatch(log, -1)
	if len(all) == 0 {
		return Counts{}, false
	}
	m := all[len(all)-1]
	var n [4]int
	for i := range n {
		v, err := strconv.Atoi(m[i+1])
		if err != nil {
			return Counts{}, false
		}
		n[i] = v
	}
	return Counts{Passed: n[0], Failed: n[1], Pending: n[2], Skipped: n[3]}, true
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
