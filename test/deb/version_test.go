package deb

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the netshim checkout the test runs in (go test runs in the
// package's directory).
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "hack/version.sh")); err != nil {
		t.Fatalf("no netshim checkout at %s: %v", root, err)
	}
	return root
}

// mapVersion runs hack/version.sh's pure mapping.
func mapVersion(t *testing.T, describe, date string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(t), "hack/version.sh"), "map", describe, date)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", errors.New(strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// Every form `git describe --tags --always --dirty` gives maps to a version
// dpkg accepts, and what cannot be one is refused with a reason.
func TestDebianVersion(t *testing.T) {
	for _, tc := range []struct {
		describe, date, want string
	}{
		{"v1.2.3", "", "1.2.3"},
		{"1.2.3", "", "1.2.3"},
		{"v1.2.3-dirty", "", "1.2.3+dirty"},
		{"v1.2.3-4-gabc1234", "", "1.2.3+4.gabc1234"},
		{"v1.2.3-4-gabc1234-dirty", "", "1.2.3+4.gabc1234+dirty"},
		{"v1.2.3-rc.1", "", "1.2.3~rc.1"},
		{"v1.2.3-rc.1-12-g0123456789ab", "", "1.2.3~rc.1+12.g0123456789ab"},
		{"8b3248a", "20261124", "0.0~git20261124.8b3248a"},
		{"8b3248a-dirty", "20261124", "0.0~git20261124.8b3248a+dirty"},
		// Refused: a hash without its date, a tag that is no version.
		{"8b3248a", "", ""},
		{"release_1", "", ""},
		{"nightly", "", ""},
	} {
		got, err := mapVersion(t, tc.describe, tc.date)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("map %q %q = %q, want an error", tc.describe, tc.date, got)
		case tc.want == "" && !strings.Contains(err.Error(), tc.describe):
			t.Errorf("map %q %q: error %q does not name the input", tc.describe, tc.date, err)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("map %q %q = %q, %v; want %q", tc.describe, tc.date, got, err, tc.want)
		}
	}
}

// dpkg orders the mapped versions as the commits go: untagged history, a
// pre-release, its release, commits after the release, the next release;
// a dirty tree comes after its commit.
func TestDebianVersionOrder(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg on this machine")
	}
	for _, chain := range [][][2]string{
		{
			{"1111111", "20250101"},
			{"2222222", "20250102"},
			{"v0.1.0-rc.1", ""},
			{"v0.1.0-rc.1-3-g3333333", ""},
			{"v0.1.0", ""},
			{"v0.1.0-2-g4444444", ""},
			{"v0.1.0-10-g5555555", ""},
			{"v0.2.0", ""},
		},
		{{"2222222", "20250102"}, {"2222222-dirty", "20250102"}},
		{{"v0.1.0", ""}, {"v0.1.0-dirty", ""}},
		{{"v0.1.0-2-g4444444", ""}, {"v0.1.0-2-g4444444-dirty", ""}},
	} {
		var prev string
		for _, v := range chain {
			got, err := mapVersion(t, v[0], v[1])
			if err != nil {
				t.Fatalf("map %q: %v", v[0], err)
			}
			if prev != "" {
				if out, err := exec.Command("dpkg", "--compare-versions", prev, "lt", got).CombinedOutput(); err != nil {
					t.Errorf("dpkg does not order %s before %s (from %s): %v %s", prev, got, v[0], err, out)
				}
			}
			prev = got
		}
	}
}

// The checkout's own version (the Makefile's VERSION) is a valid one.
func TestCheckoutVersion(t *testing.T) {
	out, err := exec.Command(filepath.Join(repoRoot(t), "hack/version.sh")).Output()
	if err != nil {
		t.Fatalf("hack/version.sh: %v", err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" || v[0] < '0' || v[0] > '9' || strings.Contains(v, "-") {
		t.Fatalf("hack/version.sh = %q: want a Debian native version (a digit first, no hyphen)", v)
	}
}
