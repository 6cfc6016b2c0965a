package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseFlags(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "bin")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--netshim", exe, "--kubelet", exe}
	o, err := parseFlags(append(base, "--hold", "20s", "--mode", "pinned=--sandbox-netns=pinned", "--rounds", "2"))
	if err != nil {
		t.Fatal(err)
	}
	if o.hold != 20*time.Second || o.rounds != 2 || o.pods != 50 || len(o.modes.all()) != 2 || o.syncFrequency != time.Minute {
		t.Errorf("options = %+v", o)
	}
	if got := o.columns(); len(got) != 2 || o.maxPods != 0 {
		t.Errorf("without --containerd-bin-dir: columns %v, max pods %d", got, o.maxPods)
	}

	// The containerd peer: a directory holding its four binaries.
	bins := filepath.Join(dir, "ctrd")
	if err := os.MkdirAll(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range containerdBinaries {
		if err := os.WriteFile(filepath.Join(bins, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	o, err = parseFlags(append(base, "--containerd-bin-dir", bins, "--pods", "250", "--max-pods", "250"))
	if err != nil {
		t.Fatal(err)
	}
	cols := o.columns()
	if o.containerdBinDir != bins || o.pods != 250 || o.maxPods != 250 || len(cols) != 2 ||
		cols[1].name != containerdMode || cols[1].kind != kindContainerd {
		t.Errorf("with the peer: options %+v, columns %v", o, cols)
	}
	if err := os.Remove(filepath.Join(bins, "ctr")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(base, "--containerd-bin-dir", bins), filepath.Join(bins, "ctr") + " is not an executable"},
		{append(base, "--containerd-bin-dir", dir+"/none"), "containerd is not an executable"},
		{append(base, "--pods", "111"), "more than kubelet's default maxPods (110): raise --max-pods"},
		{append(base, "--pods", "200", "--max-pods", "150"), "more than --max-pods (150)"},
		{append(base, "--pods", "254", "--max-pods", "300"), "more than the 253 addresses"},
		{append(base, "--max-pods", "-1"), "must not be negative"},
		{append(base, "--mode", "containerd=--x"), "containerd peer's column"},
		{[]string{"--netshim", exe}, "no kubelet"},
		{append(base, "--pods", "0"), "at least 1"},
		{append(base, "--hold", "500ms"), "at least 1s"},
		{append(base, "--settle", "-1s"), "must not be negative"},
		{append(base, "--profile"), "--profile needs --artifacts"},
		{append(base, "--netshim-oci", plain), "not an executable"},
		{append(base, "--mode", "x"), "want NAME="},
		{append(base, "extra"), "unexpected arguments"},
	} {
		_, err := parseFlags(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestKubeletConfigEdits(t *testing.T) {
	cfg := map[string]any{}
	kubeletConfigEdits(cfg, "1m0s", 0)
	if _, ok := cfg["maxPods"]; ok || cfg["syncFrequency"] != "1m0s" {
		t.Errorf("no --max-pods: %v, want kubelet's default maxPods", cfg)
	}
	kubeletConfigEdits(cfg, "10s", 250)
	if cfg["maxPods"] != 250 || cfg["syncFrequency"] != "10s" {
		t.Errorf("--max-pods 250: %v", cfg)
	}
}

// An inherited descriptor (here opened without O_CLOEXEC, as flock(1)
// hands its lock down) is not passed on to what the bench starts.
func TestKeepInheritedFilesToSelf(t *testing.T) {
	fd, err := unix.Open(filepath.Join(t.TempDir(), "lock"), unix.O_CREAT|unix.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cloexec := func() bool {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			t.Fatal(err)
		}
		return flags&unix.FD_CLOEXEC != 0
	}
	if cloexec() {
		t.Fatal("opened with FD_CLOEXEC")
	}
	keepInheritedFilesToSelf("/proc/self/fd")
	if !cloexec() {
		t.Error("the inherited descriptor would be passed on to a child")
	}
	if flags, _ := unix.FcntlInt(0, unix.F_GETFD, 0); flags&unix.FD_CLOEXEC != 0 {
		t.Error("stdin was marked close-on-exec")
	}
}
