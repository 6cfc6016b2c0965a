package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	for _, tc := range []struct {
		args []string
		want string
	}{
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
