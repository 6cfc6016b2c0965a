package soak

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestGauge(t *testing.T) {
	text := "# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\ngo_goroutines 57\ngo_goroutines_other 3\nprocess_open_fds 12\n"
	if v, err := gauge(text, "go_goroutines"); err != nil || v != 57 {
		t.Errorf("go_goroutines = %v, %v; want 57", v, err)
	}
	if _, err := gauge(text, "go_threads"); err == nil {
		t.Errorf("a missing metric gave no error")
	}
	if _, err := gauge("go_goroutines x\n", "go_goroutines"); err == nil {
		t.Errorf("a malformed value gave no error")
	}
}

func TestHeapAlloc(t *testing.T) {
	profile := "heap profile: 3: 4096 [10: 8192] @ heap/1048576\n1: 1024 [1: 1024] @ 0x1 0x2\n\n# runtime.MemStats\n# Alloc = 5242880\n# TotalAlloc = 99\n# HeapAlloc = 5242880\n# HeapSys = 9\n"
	if v, err := heapAlloc(profile); err != nil || v != 5242880 {
		t.Errorf("HeapAlloc = %v, %v; want 5242880", v, err)
	}
	if _, err := heapAlloc("heap profile: 0: 0 [0: 0] @ heap/1\n"); err == nil {
		t.Errorf("a profile without the footer gave no error")
	}
}

func TestProcReadings(t *testing.T) {
	proc := t.TempDir()
	dir := filepath.Join(proc, "42")
	if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, fd := range []string{"0", "1", "2", "7"} {
		if err := os.WriteFile(filepath.Join(dir, "fd", fd), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	status := "Name:\tnetshim\nVmPeak:\t  900000 kB\nVmRSS:\t   51200 kB\nThreads:\t12\n"
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := rssBytes(proc, 42); err != nil || v != 51200*1024 {
		t.Errorf("rss = %v, %v; want %d", v, err, 51200*1024)
	}
	if v, err := openFDs(proc, 42); err != nil || v != 4 {
		t.Errorf("fds = %v, %v; want 4", v, err)
	}
	if _, err := rssBytes(proc, 43); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rss of a gone process: %v, want ErrNotExist", err)
	}
}

func TestTally(t *testing.T) {
	var tl Tally
	if got := tl.String(); got != "none" {
		t.Errorf("empty tally = %q", got)
	}
	tl.Add("RunPodSandbox", nil)
	tl.Add("StopPodSandbox", status.Error(codes.Unavailable, "down"))
	tl.Add("RunPodSandbox", status.Error(codes.Unknown, "x"))
	tl.Add("RunPodSandbox", status.Error(codes.Unavailable, "down"))
	tl.Add("RunPodSandbox", status.Error(codes.Unavailable, "down"))
	tl.Add("RunPodSandbox", errors.New("not a status"))
	if got, want := tl.String(), "RunPodSandbox Unavailable=2 Unknown=2; StopPodSandbox Unavailable=1"; got != want {
		t.Errorf("tally = %q, want %q", got, want)
	}
	if tl.Total() != 5 {
		t.Errorf("total = %d, want 5", tl.Total())
	}
}
