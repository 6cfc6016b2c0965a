package testutil

import (
	"os"
	"testing"
)

func TestProcState(t *testing.T) {
	if s := ProcState(os.Getpid()); s != "R" && s != "S" {
		t.Errorf("ProcState(self) = %q, want R or S", s)
	}
	if s := ProcState(1 << 30); s != "" {
		t.Errorf("ProcState(no such pid) = %q, want empty", s)
	}
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("cond polled %d times, want 3", n)
	}
}
