package idmount

import (
	"os"
	"testing"
)

func TestKernelAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    bool
	}{
		{"6.18.44-fc-v1272", true},
		{"5.19.0", true},
		{"5.18.17-generic", false},
		{"4.19.0-26-amd64", false},
		{"6", false},
		{"x.y", false},
	} {
		if got := kernelAtLeast(tc.release, minKernelMajor, minKernelMinor); got != tc.want {
			t.Errorf("kernelAtLeast(%q) = %v, want %v", tc.release, got, tc.want)
		}
	}
}

// Probe on this machine's filesystem (ext4, Linux 6.18) as root: the
// kernel and the filesystem take idmapped mounts.
func TestProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("making a user namespace with other ids needs root (the unit tests run as root)")
	}
	if err := Probe(t.TempDir()); err != nil {
		t.Errorf("Probe: %v", err)
	}
	if err := Probe("/nonexistent/netshim"); err == nil {
		t.Error("Probe of a directory that does not exist succeeded")
	}
}
