package critest

import (
	"regexp"
	"strings"
	"testing"
)

func TestSkipsPerEngine(t *testing.T) {
	tests := []struct {
		engine, privileged string
		want               int
		wantPriv           bool
		wantErr            string
	}{
		{engine: "docker20", want: 18, wantPriv: true},
		{engine: "docker20-runc143", want: 18, wantPriv: true},
		{engine: "docker29", want: 6},
		{engine: "docker20", privileged: "run", want: 6},
		{engine: "docker29", privileged: "skip", want: 18, wantPriv: true},
		{engine: "docker29", privileged: "run", want: 6},
		{engine: "docker20", privileged: "yes", wantErr: "PRIVILEGED=yes: want run or skip"},
	}
	for _, tc := range tests {
		skips, err := Skips(tc.engine, tc.privileged)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Skips(%q, %q): err %v, want %q", tc.engine, tc.privileged, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(skips) != tc.want {
			t.Errorf("Skips(%q, %q) = %d skips, %v; want %d", tc.engine, tc.privileged, len(skips), err, tc.want)
			continue
		}
		hasPriv := false
		for _, s := range skips {
			hasPriv = hasPriv || s.Spec == "Security Context bucket runtime should support Privileged is true"
		}
		if hasPriv != tc.wantPriv {
			t.Errorf("Skips(%q, %q): privileged specs skipped %v, want %v", tc.engine, tc.privileged, hasPriv, tc.wantPriv)
		}
	}
}

// Every skip has a reason and names a spec no other skip names.
func TestSkipsAreDistinctAndExplained(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range append(append([]Skip(nil), offlineSkips...), privSkips...) {
		if seen[s.Spec] {
			t.Errorf("skipped twice: %q", s.Spec)
		}
		seen[s.Spec] = true
		if strings.TrimSpace(s.Reason) == "" || strings.HasPrefix(s.Spec, "[k8s.io]") {
			t.Errorf("skip %+v: want a reason and the spec without its [k8s.io] prefix", s)
		}
	}
}

// A skip's pattern matches its spec's full text and nothing longer or
// shorter, regexp characters in the text included.
func TestSkipPatternMatchesExactlyItsSpec(t *testing.T) {
	for _, s := range append(append([]Skip(nil), offlineSkips...), privSkips...) {
		re, err := regexp.Compile(s.Pattern())
		if err != nil {
			t.Fatalf("%q: %v", s.Pattern(), err)
		}
		full := "[k8s.io] " + s.Spec
		for text, want := range map[string]bool{
			full:                 true,
			full + " extra":      false,
			full[:len(full)-1]:   false,
			s.Spec:               false,
			"[k8s-io] " + s.Spec: false,
		} {
			if got := re.MatchString(text); got != want {
				t.Errorf("pattern %q on %q: %v, want %v", s.Pattern(), text, got, want)
			}
		}
	}
	args := skipArgs(offlineSkips[:1])
	if len(args) != 1 || args[0] != `-ginkgo.skip=\[k8s\.io\] Image Manager public image with tag should be pulled and removed \[Conformance\]$` {
		t.Errorf("skip args %q", args)
	}
	if f := focusArgs(offlineSkips[:1]); !strings.HasPrefix(f[0], "-ginkgo.focus=") || strings.TrimPrefix(f[0], "-ginkgo.focus=") != strings.TrimPrefix(args[0], "-ginkgo.skip=") {
		t.Errorf("focus args %q", f)
	}
}

func TestCheckDryRun(t *testing.T) {
	out := "critest version: v1.34.0\nRunning Suite: CRI validation\n\nWill run 18 of 113 specs\n"
	if err := checkDryRun(out, 18); err != nil {
		t.Errorf("18 of 18: %v", err)
	}
	err := checkDryRun(out, 19)
	if err == nil || !strings.Contains(err.Error(), "the 19 skips do not name 19 distinct specs") || !strings.Contains(err.Error(), "Will run 18 of 113 specs") {
		t.Errorf("18 selected for 19 skips: %v", err)
	}
	if err := checkDryRun("flag provided but not defined: -ginkgo.dry-run\n", 1); err == nil || !strings.Contains(err.Error(), "no \"Will run\" line") {
		t.Errorf("no Will run line: %v", err)
	}
}

func TestWantPassed(t *testing.T) {
	for _, tc := range []struct {
		engine, privileged string
		want               int
		ok                 bool
	}{
		{engine: "docker20", want: 75, ok: true},
		{engine: "docker29", want: wantPassed["docker29"], ok: true},
		{engine: "docker20", privileged: "run"},
		{engine: "docker29", privileged: "skip"},
		{engine: "docker20-runc143"},
	} {
		got, ok := WantPassed(tc.engine, tc.privileged)
		if got != tc.want || ok != tc.ok {
			t.Errorf("WantPassed(%q, %q) = %d, %v; want %d, %v", tc.engine, tc.privileged, got, ok, tc.want, tc.ok)
		}
		if ok && got <= 0 {
			t.Errorf("WantPassed(%q) = %d: a floor must be positive", tc.engine, got)
		}
	}
}
