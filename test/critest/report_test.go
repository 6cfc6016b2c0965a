package critest

import (
	"slices"
	"strings"
	"testing"
)

// An excerpt of critest's -ginkgo.v output: a pass, a skip (whose
// report repeats the spec text with [It]), a failure, a spec whose result
// line never came, and ginkgo's summary.
const critestOutput = `critest version: v1.34.0
Running Suite: CRI validation - /tmp/nsconf.W0voyX
Will run 4 of 113 specs
------------------------------
[BeforeSuite] 
[BeforeSuite] PASSED [0.000 seconds]
------------------------------
[k8s.io] Networking runtime should support DNS config [Conformance]
sigs.k8s.io/cri-tools/pkg/validate/networking.go:56
  STEP: create a PodSandbox with DNS config @ 11/24/26 10:30:33.287
• [0.509 seconds]
------------------------------
[k8s.io] Container Mount Readonly runtime should support recursive readonly mounts
sigs.k8s.io/cri-tools/pkg/validate/container_linux.go:370
S [SKIPPED] [0.234 seconds]
[k8s.io] Container Mount Readonly runtime [It] should support recursive readonly mounts
  [SKIPPED] runtime does not implement recursive readonly mounts
------------------------------
[k8s.io] Streaming runtime should support exec [Conformance]
  STEP: exec @ 11/24/26 10:30:40
• [FAILED] [3.001 seconds]
[k8s.io] Streaming runtime [It] should support exec [Conformance]
------------------------------
[k8s.io] Image Manager should pull [Conformance]
• [TIMEDOUT] [60.000 seconds]
------------------------------
S

Summarizing 2 Failures:
  [FAIL] [k8s.io] Streaming runtime [It] should support exec [Conformance]

  [TIMEDOUT] [k8s.io] Image Manager should pull [Conformance]

Ran 3 of 113 Specs in 68.210 seconds
FAIL! -- 1 Passed | 2 Failed | 1 Pending | 110 Skipped
--- FAIL: TestE2ECRI (68.21s)
FAIL
`

func TestSpecLines(t *testing.T) {
	f := &specLines{}
	var got []string
	for _, l := range strings.Split(critestOutput, "\n") {
		if s, ok := f.line(l); ok {
			got = append(got, s)
		}
	}
	want := []string{
		"  pass  [k8s.io] Networking runtime should support DNS config [Conformance]",
		"  skip  [k8s.io] Container Mount Readonly runtime should support recursive readonly mounts",
		"  FAIL  [k8s.io] Streaming runtime should support exec [Conformance]",
		"  FAIL  [k8s.io] Image Manager should pull [Conformance]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("spec lines\n%q\nwant\n%q", got, want)
	}
}

func TestSummaryAndCounts(t *testing.T) {
	got := summary(critestOutput)
	if len(got) != 7 || got[0] != "Summarizing 2 Failures:" || got[len(got)-1] != "FAIL" || slices.Contains(got, "") {
		t.Errorf("summary %q", got)
	}
	if got := summary("Ran 81 of 113 Specs in 68.210 seconds\nSUCCESS! -- 81 Passed | 0 Failed | 0 Pending | 32 Skipped\n\nPASS\n"); len(got) != 3 {
		t.Errorf("summary of a passing run %q", got)
	}
	c, ok := parseCounts(critestOutput)
	if !ok || c != (Counts{Passed: 1, Failed: 2, Pending: 1, Skipped: 110}) {
		t.Fatalf("counts %+v, %v", c, ok)
	}
	if s := c.String(); s != "conformance: 1 passed, 2 failed, 111 skipped" {
		t.Errorf("final line %q", s)
	}
	// The last counts win (a suite that printed a count line earlier).
	if c, _ := parseCounts("1 Passed | 0 Failed | 0 Pending | 0 Skipped\n73 Passed | 0 Failed | 0 Pending | 40 Skipped\n"); c.Passed != 73 || c.Skipped != 40 {
		t.Errorf("counts %+v", c)
	}
	if _, ok := parseCounts("panic: no summary\n"); ok {
		t.Error("counts found in output without a summary")
	}
}
