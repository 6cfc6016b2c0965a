package nodeconformance

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A ginkgo v2 JSON report as the suite writes it, cut down to the fields
// read and to one spec per interesting state.
const sampleReport = `[{
  "SuitePath": "/x",
  "SpecReports": [
    {"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed", "RunTime": 1000000000},
    {"ContainerHierarchyTexts": ["[sig-node] Pods"], "LeafNodeType": "It",
     "LeafNodeText": "should be submitted and removed [NodeConformance] [Conformance]",
     "State": "passed", "RunTime": 2500000000},
    {"ContainerHierarchyTexts": ["[sig-node] Probing container"], "LeafNodeType": "It",
     "LeafNodeText": "should be restarted [NodeConformance]",
     "State": "failed", "RunTime": 60000000000,
     "Failure": {"Message": "timed out\nmore", "Location": {"FileName": "probe.go", "LineNumber": 42}}},
    {"ContainerHierarchyTexts": ["[sig-node] Swap [Feature:NodeSwap]", "with configuration"], "LeafNodeType": "It",
     "LeafNodeText": "QOS Guaranteed [NodeConformance]", "State": "skipped"},
    {"ContainerHierarchyTexts": ["[sig-node] AppArmor"], "LeafNodeType": "It",
     "LeafNodeText": "should enforce a profile [NodeConformance]", "State": "skipped",
     "Failure": {"Message": "Only supported for node OS distro [gci ubuntu]"}},
    {"ContainerHierarchyTexts": ["[sig-node] Density"], "LeafNodeType": "It",
     "LeafNodeText": "should be fast [Serial]", "State": "skipped"},
    {"ContainerHierarchyTexts": ["[sig-node] Pods"], "LeafNodeType": "It",
     "LeafNodeText": "should panic [NodeConformance]", "State": "panicked", "Failure": {"Message": "boom"}}
  ]
}]`

func TestParseReport(t *testing.T) {
	specs, err := ParseReport(strings.NewReader(sampleReport))
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 7 {
		t.Fatalf("got %d specs, want 7", len(specs))
	}
	got := specs[2]
	if got.Name != "[sig-node] Probing container should be restarted [NodeConformance]" || got.State != "failed" ||
		got.Duration != time.Minute || got.Location != "probe.go:42" || got.Message != "timed out\nmore" {
		t.Errorf("spec 2 = %+v", got)
	}
	if specs[0].Name != "SynchronizedBeforeSuite" || specs[0].NodeType != "SynchronizedBeforeSuite" {
		t.Errorf("a suite node is named after its type, got %+v", specs[0])
	}
	if _, err := ParseReport(strings.NewReader("{not json")); err == nil {
		t.Error("a broken report parsed without error")
	}
}

func TestClassify(t *testing.T) {
	specs, err := ParseReport(strings.NewReader(sampleReport))
	if err != nil {
		t.Fatal(err)
	}
	skips := []Skip{
		{`\[Feature:NodeSwap\]`, "no swap"},
		{`never matches anything`, "stale"},
	}
	tests := []struct {
		name            string
		focus           *regexp.Regexp
		pass, fail, skp int
		lines           []string
	}{
		{
			name: "full run", pass: 1, fail: 2, skp: 2,
			lines: []string{
				"PASS [sig-node] Pods should be submitted and removed [NodeConformance] [Conformance] (3s)",
				"FAIL [sig-node] Probing container should be restarted [NodeConformance] (1m0s): timed out",
				"SKIP [sig-node] Swap [Feature:NodeSwap] with configuration QOS Guaranteed [NodeConformance]: no swap",
				"SKIP [sig-node] AppArmor should enforce a profile [NodeConformance]: Only supported for node OS distro [gci ubuntu]",
				"FAIL [sig-node] Pods should panic [NodeConformance] (0s): boom",
			},
		},
		{
			name: "focused run counts only the focus", focus: regexp.MustCompile(`Probing`), fail: 1,
			lines: []string{"FAIL [sig-node] Probing container should be restarted [NodeConformance] (1m0s): timed out"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tally, err := Classify(specs, tc.focus, skips)
			if err != nil {
				t.Fatal(err)
			}
			p, f, s := tally.Counts()
			if p != tc.pass || f != tc.fail || s != tc.skp {
				t.Errorf("counts = %d/%d/%d, want %d/%d/%d", p, f, s, tc.pass, tc.fail, tc.skp)
			}
			var lines []string
			for _, r := range tally.Results {
				lines = append(lines, r.Line())
			}
			if strings.Join(lines, "\n") != strings.Join(tc.lines, "\n") {
				t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(tc.lines, "\n"))
			}
			if len(tally.UnusedSkips) == 0 || tally.UnusedSkips[len(tally.UnusedSkips)-1].Pattern != "never matches anything" {
				t.Errorf("the stale entry is not reported: %+v", tally.UnusedSkips)
			}
		})
	}
}

// A failed BeforeSuite fails the run although no spec failed, and the
// specs it kept from running are failures, not skips.
func TestClassifySuiteFailure(t *testing.T) {
	specs := []Spec{
		{Name: "SynchronizedBeforeSuite", NodeType: "SynchronizedBeforeSuite", State: "failed", Message: "system validation"},
		{Name: "[sig-node] X [NodeConformance]", NodeType: "It", State: "skipped"},
	}
	tally, err := Classify(specs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, f, _ := tally.Counts(); f != 2 {
		t.Errorf("failures = %d, want 2 (the suite node and the spec it kept from running)", f)
	}
	if got := tally.SummaryLine(); got != "node-conformance: 0 passed, 2 failed, 0 skipped" {
		t.Errorf("summary = %q", got)
	}
}

func TestClassifyRejectsBadPattern(t *testing.T) {
	if _, err := Classify(nil, nil, []Skip{{`(unclosed`, "x"}}); err == nil {
		t.Error("a skip pattern that does not compile was accepted")
	}
}

// The reviewed lists themselves: every pattern compiles (ginkgo uses Go
// regexps too), every skip has a reason, and no entry is a catch-all.
func TestReviewedLists(t *testing.T) {
	for _, s := range SkipList {
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			t.Errorf("skip %q: %v", s.Pattern, err)
			continue
		}
		if strings.TrimSpace(s.Reason) == "" {
			t.Errorf("skip %q has no reason", s.Pattern)
		}
		if re.MatchString("[sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]") {
			t.Errorf("skip %q matches an ordinary pod spec", s.Pattern)
		}
	}
	if len(QuickFocus) == 0 {
		t.Fatal("no quick subset")
	}
	for _, f := range QuickFocus {
		if _, err := regexp.Compile(f); err != nil {
			t.Errorf("quick focus %q: %v", f, err)
		}
	}
}

func TestShadowPath(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	write := func(dir, name string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(a, "systemd-run", 0o755)
	write(a, "mount", 0o755)
	write(a, "README", 0o644)
	write(b, "mount", 0o755) // shadowed by a's
	write(b, "iptables", 0o755)
	if err := os.Mkdir(filepath.Join(b, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := ShadowPath(filepath.Join(t.TempDir(), "path"), a+":relative:"+b+"::/does/not/exist", "systemd-run")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "iptables,mount" {
		t.Errorf("PATH dir holds %v, want iptables and mount", names)
	}
	if target, _ := os.Readlink(filepath.Join(dir, "mount")); target != filepath.Join(a, "mount") {
		t.Errorf("mount -> %s, want the first one on PATH", target)
	}
}

// The specs of the features a narrowed run adds (QuickFeatureTags) count
// like the conformance set's: a failed one fails the run.
func TestClassifyFeatureTags(t *testing.T) {
	specs := []Spec{
		{Name: "[sig-node] A [NodeConformance]", NodeType: "It", State: "passed"},
		{Name: "[sig-node] Security Context When creating a pod with HostUsers must create the user namespace if set to false [LinuxOnly] [Feature:UserNamespacesSupport]", NodeType: "It", State: "failed", Message: "x"},
		{Name: "[sig-node] Security Context SupplementalGroupsPolicy [LinuxOnly] [Feature:SupplementalGroupsPolicy] when Strict", NodeType: "It", State: "passed"},
		{Name: "[sig-node] B [Feature:Other]", NodeType: "It", State: "failed", Message: "not counted"},
	}
	for _, tc := range []struct {
		also []string
		want string
	}{
		{nil, "node-conformance: 1 passed, 0 failed, 0 skipped"},
		{QuickFeatureTags, "node-conformance: 2 passed, 1 failed, 0 skipped"},
	} {
		tally, err := ClassifyTagged(specs, ConformanceTag, nil, nil, tc.also...)
		if err != nil {
			t.Fatal(err)
		}
		if got := tally.SummaryLine(); got != tc.want {
			t.Errorf("also %v: %q, want %q", tc.also, got, tc.want)
		}
	}
}
