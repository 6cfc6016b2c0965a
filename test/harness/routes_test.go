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
	// Class E (240.0.0.0/4, reserved) is routed nowhere.
	got, err := RoutesOverlapping("240.0.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("routes overlapping 240.0.0.0/24: %q, want none", got)
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
	// A route the host has is found by its own destination.
	if len(all) > 0 {
		dst := strings.Fields(all[0])[0]
		if got, err := RoutesOverlapping(dst); err != nil || len(got) == 0 {
			t.Errorf("RoutesOverlapping(%s) = %q, %v; want the route %q", dst, got, err, all[0])
		}
	}
	if _, err := RoutesOverlapping("not-a-cidr"); err == nil {
		t.Error("a bad CIDR: no error")
	}
}
