package harness

import (
	"os/exec"
	"strings"
	"testing"
)

func TestRoutesOverlapping(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8)")
	}
	// TEST-NET-1 (RFC 5737) is routed nowhere.
	got, err := RoutesOverlapping("192.0.2.0/24")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("routes overlapping 192.0.2.0/24: %q, want none", got)
	}
	// Every route lies in 0.0.0.0/0; the default route is not listed.
	all, err := RoutesOverlapping("0.0.0.0/0")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if strings.HasPrefix(r, "default") {
			t.Errorf("the default route is listed: %q", r)
		}
	}
	if _, err := RoutesOverlapping("not-a-cidr"); err == nil {
		t.Error("a bad CIDR: no error")
	}
}
