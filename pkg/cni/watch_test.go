package cni

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netshim/netshim/pkg/network"
)

// reactBound is how fast a conf dir change must show in Status: the
// watcher is meant to react within a fraction of a second.
const reactBound = 2 * time.Second

// newWatchedPlugin returns a plugin on dir that can only learn of changes
// through fsnotify: its safety re-read is an hour away.
func newWatchedPlugin(t *testing.T, dir string) *Plugin {
	t.Helper()
	p := NewPlugin(Options{ConfDir: dir, BinDirs: []string{"/fake/bin"}, CacheDir: t.TempDir(), Exec: newFakeExec(),
		SyncPeriod: time.Hour, Debounce: 20 * time.Millisecond, GCPeriod: -1, probeFirewall: noFirewall})
	if err := p.Init(newFakeHost(), network.PluginConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// waitWithin polls cond for at most d and fails the test naming what did
// not happen, and how long it waited.
func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s did not happen within %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func networkName(p *Plugin) string {
	def, err := p.getDefaultNetwork()
	if err != nil {
		return ""
	}
	return def.list.Name
}

func statusContains(p *Plugin, subs ...string) bool {
	err := p.Status()
	if err == nil {
		return false
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			return false
		}
	}
	return true
}

func confList(name string) string {
	return `{"cniVersion":"1.0.0","name":"` + name + `","plugins":[{"type":"bridge","bridge":"br-` + name + `"}]}`
}

func TestWatchAddChangeRemoveBroken(t *testing.T) {
	dir := t.TempDir()
	p := newWatchedPlugin(t, dir)
	if !statusContains(p, "no network config found in "+dir) {
		t.Fatalf("Status = %v", p.Status())
	}

	// Add.
	writeFile(t, dir, "10-a.conflist", confList("net-a"))
	waitWithin(t, reactBound, "loading an added config", func() bool { return p.Status() == nil && networkName(p) == "net-a" })

	// Change in place.
	writeFile(t, dir, "10-a.conflist", confList("net-a2"))
	waitWithin(t, reactBound, "loading a changed config", func() bool { return networkName(p) == "net-a2" })

	// A broken file before it: reported as a warning, the valid one used.
	writeFile(t, dir, "05-broken.conflist", `{"cniVersion":"1.0.0","name":"x","plugins":[`)
	waitWithin(t, reactBound, "the skipped file to be reported", func() bool {
		w := p.Warnings()
		return len(w) == 1 && strings.Contains(w[0], "05-broken.conflist") && strings.Contains(w[0], "invalid CNI config skipped")
	})
	if err := p.Status(); err != nil || networkName(p) != "net-a2" {
		t.Fatalf("Status = %v, network %q", err, networkName(p))
	}

	// The valid one broken too: not ready, naming both files.
	writeFile(t, dir, "10-a.conflist", `{"cniVersion":"1.0.0","name":"y"}`)
	waitWithin(t, reactBound, "not ready naming the broken files", func() bool {
		return statusContains(p, "cni config uninitialized", "05-broken.conflist", "10-a.conflist")
	})
	if w := p.Warnings(); len(w) != 0 {
		t.Errorf("Warnings while not ready = %q", w)
	}

	// Fixed again, then removed.
	writeFile(t, dir, "10-a.conflist", confList("net-a3"))
	waitWithin(t, reactBound, "the fixed config", func() bool { return networkName(p) == "net-a3" })
	for _, f := range []string{"05-broken.conflist", "10-a.conflist"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	waitWithin(t, reactBound, "not ready after removal", func() bool { return statusContains(p, "no network config found in "+dir) })

	// An atomic replace (write a temp file, rename it into place), as
	// installers do.
	tmp := writeFile(t, dir, ".tmp-20-b", confList("net-b"))
	if err := os.Rename(tmp, filepath.Join(dir, "20-b.conflist")); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, reactBound, "loading a renamed-in config", func() bool { return networkName(p) == "net-b" })
}

func TestWatchConfDirCreatedLaterAndRemoved(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "etc", "cni", "net.d")
	p := newWatchedPlugin(t, dir)
	if !statusContains(p, "cni config uninitialized", dir) {
		t.Fatalf("Status = %v", p.Status())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "10-a.conflist", confList("net-a"))
	waitWithin(t, reactBound, "loading a config in a dir created after start", func() bool { return networkName(p) == "net-a" })

	if err := os.RemoveAll(filepath.Join(base, "etc")); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, reactBound, "not ready after the dir was removed", func() bool { return p.Status() != nil })

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "10-b.conflist", confList("net-b"))
	waitWithin(t, reactBound, "loading a config in the re-created dir", func() bool { return networkName(p) == "net-b" })
}

func TestWatchDebouncesBursts(t *testing.T) {
	dir := t.TempDir()
	p := NewPlugin(Options{ConfDir: dir, Exec: newFakeExec(), SyncPeriod: time.Hour, Debounce: 100 * time.Millisecond,
		GCPeriod: -1, probeFirewall: noFirewall})
	if err := p.Init(newFakeHost(), network.PluginConfig{}); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	start := p.reloads.Load()
	for i := range 30 {
		writeFile(t, dir, "10-a.conflist", confList("net-"+strings.Repeat("x", i+1)))
	}
	want := "net-" + strings.Repeat("x", 30)
	waitWithin(t, reactBound, "the last write of the burst to be loaded", func() bool { return networkName(p) == want })
	time.Sleep(300 * time.Millisecond) // no late reloads either
	if n := p.reloads.Load() - start; n > 3 {
		t.Errorf("30 writes in a burst caused %d reloads, want at most 3", n)
	}
}
