package multinode

import (
	"regexp"
	"strings"
	"testing"
)

// The reviewed lists compile, every skip says why, and the quick focus
// selects conformance specs only.
func TestReviewedLists(t *testing.T) {
	for _, f := range QuickFocus {
		if _, err := regexp.Compile(f); err != nil {
			t.Errorf("QuickFocus %q: %v", f, err)
		}
		if !strings.Contains(f, regexp.QuoteMeta(ConformanceTag)) {
			t.Errorf("QuickFocus %q does not require %s", f, ConformanceTag)
		}
	}
	for _, s := range SkipList {
		if _, err := regexp.Compile(s.Pattern); err != nil {
			t.Errorf("skip %q: %v", s.Pattern, err)
		}
		if strings.TrimSpace(s.Reason) == "" {
			t.Errorf("skip %q has no reason", s.Pattern)
		}
	}
}

// Both subsets have a pinned pass count, and the quick one is a part of
// the full one.
func TestWantPassed(t *testing.T) {
	full, quick := WantPassed["full"], WantPassed["quick"]
	if quick <= 0 || full < quick {
		t.Errorf("WantPassed = %v: want 0 < quick <= full", WantPassed)
	}
	if len(WantPassed) != 2 {
		t.Errorf("WantPassed = %v: want exactly the subsets full and quick", WantPassed)
	}
}
