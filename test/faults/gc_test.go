//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

const (
	// gcDeadline is netshim's deadline for the plugins' CNI GC call
	// (pkg/cni defaultGCTimeout), which no flag changes.
	gcDeadline = time.Minute
	// gcPodStartBound bounds each RunPodSandbox made while the plugins'
	// GC hangs. A pod start takes 1 to 3 s on the CI machines (the other
	// scenarios' pods), 5 s or so when other suites load them; before
	// 5a69a5d every pod start waited for the GC to give up, at
	// --cni-timeout (3 min), and the GC's own deadline is now 1 min: 15 s
	// is five times a normal start and a quarter of the GC deadline.
	gcPodStartBound = 15 * time.Second
	// gcEnterBound bounds the wait for GC to be in the hanging plugin:
	// at start-up it runs right after the first sync with the engine, and
	// after a pod start preempted it, gcRetryPeriod (1 s) later.
	gcEnterBound = 30 * time.Second
	// gcKillSlack is how long past gcDeadline the hanging plugin may
	// still run: netshim kills it at the deadline, libcni reaps it.
	gcKillSlack = 20 * time.Second
)

// (8) The plugins' CNI GC hangs (a cniVersion 1.1.0 chain whose last
// plugin, portmap behind a wrapper, sleeps on GC). GC runs right after
// netshim's start-up sync, exactly when kubelet recreates a node's pods:
// every RunPodSandbox made while GC hangs must succeed well within
// gcPodStartBound (each preempts the GC, whose plugin netshim kills), one
// at a time and several at once; a GC left alone is killed at its own
// deadline (gcDeadline, not --cni-timeout's 3 minutes). Before 5a69a5d
// GC held a lock the ADDs waited for, with no deadline of theirs: every
// pod start was parked until the plugins' GC ended at --cni-timeout.
func testCNIGCNeverParksPodStarts(t *testing.T, w *world) {
	v11 := os.Getenv("CNI_V11_BIN_DIR")
	if v11 == "" {
		t.Fatal("CNI_V11_BIN_DIR is not set: CNI GC needs the plugins v1.9.1 of hack/cni-plugins.sh (make e2e-faults sets it to _output/cni-1.9.1); Debian's speak no cniVersion 1.1.0")
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join(v11, p)); err != nil {
			t.Fatalf("CNI_V11_BIN_DIR=%s lacks %s (hack/cni-plugins.sh): %v", v11, p, err)
		}
	}
	bin := filepath.Join(w.sc.dir, "bin")
	marks := filepath.Join(w.sc.dir, "marks")
	if err := os.MkdirAll(marks, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered before netshim's cleanup, so run after it: a sleeper
	// netshim did not kill (a failure) must not outlive the scenario.
	t.Cleanup(func() { killHung(t, marks) })
	writeScript(t, filepath.Join(bin, "hang-gc-portmap"), fmt.Sprintf(`# portmap, except that its CNI GC says it started and then hangs
if [ "$CNI_COMMAND" = GC ]; then
  echo $$ > %[1]s/pid-$$
  exec sleep 600
fi
exec %[2]s/portmap
`, marks, v11))
	n := w.start(w.conflist(harness.WithCNIVersion("1.1.0"), harness.WithoutPortmap(),
		harness.WithPlugins(map[string]any{"type": "hang-gc-portmap", "capabilities": map[string]bool{"portMappings": true}})),
		harness.WithCNIBinDir(bin+","+v11))
	c := n.CRI()

	// hung waits for a GC that sits in the hanging plugin, netshim's child.
	hung := func(what string) gcSleeper {
		t.Helper()
		var s gcSleeper
		if !harness.Eventually(gcEnterBound, func() bool {
			all := gcSleepers(marks, n.Pid())
			if len(all) == 0 {
				return false
			}
			s = all[len(all)-1]
			return true
		}) {
			t.Fatalf("%s: no CNI GC of netshim's (pid %d) entered the hanging plugin within %s\n%s", what, n.Pid(), gcEnterBound, n.LogTail(30))
		}
		return s
	}
	var mu sync.Mutex
	var failed []string
	run := func(name string, port int, during gcSleeper) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), gcPodStartBound)
		defer cancel()
		cfg := w.podConfig(name, w.hostPort(port))
		resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		took := time.Since(start)
		if err != nil {
			w.codes.add(err)
			mu.Lock()
			failed = append(failed, name)
			mu.Unlock()
			t.Errorf("pod %s: RunPodSandbox made while CNI GC hung in its plugin (pid %d) failed after %s: %v; want success within %s", name, during.pid, took.Round(time.Millisecond), err, gcPodStartBound)
			return
		}
		w.ledger.told(resp.PodSandboxId, name)
		w.sc.runs.Add(1)
		t.Logf("pod %s: RunPodSandbox made while CNI GC hung (pid %d) took %s", name, during.pid, took.Round(time.Millisecond))
	}

	// One at a time, each while a GC hangs: the start-up one, then the
	// one the GC loop retries after the previous pod preempted it.
	for i := range 3 {
		s := hung(fmt.Sprintf("before pod %d", i))
		run(fmt.Sprintf("gc%d", i), i, s)
		// The pod's ADD preempted the GC: netshim killed its plugin.
		if !harness.Eventually(10*time.Second, func() bool { return !s.alive() }) {
			t.Errorf("the CNI GC plugin (pid %d) still runs 10 s after a pod start that preempted it", s.pid)
		}
	}
	// Several at once, as kubelet recreates a node's pods after a reboot.
	burst := hung("before the burst")
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { run(fmt.Sprintf("gcburst%d", i), 10+i, burst) })
	}
	wg.Wait()

	// Left alone, a hanging GC is killed at its own deadline.
	s := hung("after the pods")
	if !harness.Eventually(time.Until(s.started.Add(gcDeadline+gcKillSlack)), func() bool { return !s.alive() }) {
		t.Errorf("the CNI GC plugin (pid %d, started %s ago) still runs, %s past netshim's %s GC deadline", s.pid, time.Since(s.started).Round(time.Second), gcKillSlack, gcDeadline)
	} else if lived := time.Since(s.started); lived < gcDeadline-2*time.Second {
		t.Errorf("the CNI GC plugin (pid %d) was gone after %s, before the %s GC deadline, with no pod start to preempt it", s.pid, lived.Round(time.Second), gcDeadline)
	} else {
		t.Logf("netshim killed the hanging CNI GC plugin (pid %d) after %s", s.pid, lived.Round(time.Second))
	}
	log, _ := os.ReadFile(n.LogPath)
	if !strings.Contains(string(log), "the plugins' GC was killed at its deadline") {
		t.Errorf("netshim's log does not report the GC killed at its deadline\n%s", n.LogTail(30))
	}

	// Every pod is up, with its address, and no start failed.
	if len(failed) > 0 {
		t.Errorf("%d pod start(s) failed while CNI GC hung: %v (codes: %s)", len(failed), failed, &w.codes)
	}
	for _, p := range w.mustSandboxes() {
		if st := w.status(p.Id); st.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY || st.GetNetwork().GetIp() == "" {
			t.Errorf("sandbox %s (%s) is %s with IP %q, want READY with an IP", p.Id, p.GetMetadata().GetName(), st.GetState(), st.GetNetwork().GetIp())
		}
	}
	w.removeAll()
}

// gcSleeper is a hanging plugin's GC: its PID and when it wrote it.
type gcSleeper struct {
	pid     int
	started time.Time
}

// alive says whether the sleeper still runs (not a zombie, and not
// another program that reused its PID).
func (s gcSleeper) alive() bool { return sleeperAlive(s.pid) }

// gcSleepers lists the hanging plugins whose PIDs are in dir (pid-*) that
// run as children of parent, oldest first.
func gcSleepers(dir string, parent int) []gcSleeper {
	files, _ := filepath.Glob(filepath.Join(dir, "pid-*"))
	var out []gcSleeper
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(f), "pid-"))
		if err != nil || !sleeperAlive(pid) || ppid(pid) != parent {
			continue
		}
		out = append(out, gcSleeper{pid: pid, started: fi.ModTime()})
	}
	// Glob sorts by name, not by time.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].started.Before(out[j-1].started); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// sleeperAlive says whether pid is a live `sleep 600`, as the hanging
// plugins exec.
func sleeperAlive(pid int) bool {
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || string(cmd) != "sleep\x00600\x00" {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// ppid is pid's parent, 0 if unknown.
func ppid(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}
