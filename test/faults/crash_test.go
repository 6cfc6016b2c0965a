//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

const (
	cycleClients = 30
	minKills     = 3
	loadDeadline = 3 * time.Minute
)

// (1) netshim is SIGKILLed at random moments while 30 clients run, stop
// and remove pods with host ports, and restarted at once. The clients
// retry like kubelet; every cycle must complete.
func testSIGKILLDuringCycles(t *testing.T, w *world) {
	n := w.start(w.conflist())
	ctx, cancel := context.WithTimeout(t.Context(), loadDeadline)
	defer cancel()

	var kills atomic.Int32
	var killerDone atomic.Bool
	wait := w.load(ctx, cycleClients, "c", &killerDone)
	var killErr error
	func() {
		defer killerDone.Store(true)
		for kills.Load() < minKills {
			pause := time.NewTimer(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
			select {
			case <-ctx.Done():
				killErr = fmt.Errorf("only %d kills before the deadline", kills.Load())
				return
			case <-pause.C:
			}
			if err := n.Kill(); err != nil {
				killErr = err
				return
			}
			kills.Add(1)
			if err := n.Start(ctx); err != nil {
				killErr = fmt.Errorf("restart after kill %d: %w", kills.Load(), err)
				return
			}
		}
	}()
	wait()
	if killErr != nil {
		t.Fatalf("killer: %v\n%s", killErr, n.LogTail(40))
	}
	t.Logf("%d kills, %d cycles, failed calls by code: %s", kills.Load(), w.sc.runs.Load(), &w.codes)
	// Sandboxes nobody was told about (a RunPodSandbox whose answer the
	// kill lost and that the retry did not meet) are kubelet's to collect:
	// note them, then remove them through netshim.
	if left := w.mustSandboxes(); len(left) > 0 {
		t.Logf("%d sandbox(es) no client knows of are left; removing them through netshim", len(left))
	}
	w.removeAll()
}

// (2) netshim is SIGKILLed while a slow IPAM plugin is inside ADD. The
// plugin outlives netshim; the restarted netshim kills it before it
// serves (an ADD finishing after the start-up DEL would hold what it
// allocated with nobody left to free it). After the restart no sandbox
// may be READY without an IP, no such plugin may still run, and after
// Stop+Remove of all, nothing may be left (the runner's leak audit).
func testSIGKILLInsideSlowIPAM(t *testing.T, w *world) {
	bin := filepath.Join(w.sc.dir, "bin")
	marks := filepath.Join(w.sc.dir, "marks")
	if err := os.MkdirAll(marks, 0o755); err != nil {
		t.Fatal(err)
	}
	writeScript(t, filepath.Join(bin, "slow-ipam"), fmt.Sprintf(`# host-local, but ADD says it started and then takes its time
if [ "$CNI_COMMAND" = ADD ]; then
  : > %[1]s/start-$$
  sleep 2
fi
exec %[2]s/host-local
`, marks, w.suite.cniBinDir))
	n := w.start(w.conflist(harness.WithIPAM(w.hostLocalIPAM("slow-ipam"))), harness.WithCNIBinDir(bin+","+w.suite.cniBinDir))
	const rounds, perRound = 3, 3
	for r := range rounds {
		c := w.client()
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		for i := range perRound {
			cfg := w.podConfig(fmt.Sprintf("s%d-%d", r, i), 0)
			wg.Go(func() {
				cctx, ccancel := rpcCtx(ctx)
				defer ccancel()
				resp, err := c.Runtime.RunPodSandbox(cctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
				if err == nil {
					w.ledger.told(resp.PodSandboxId, cfg.Metadata.Name)
				}
			})
		}
		inside := func() bool { m, _ := filepath.Glob(filepath.Join(marks, "start-*")); return len(m) >= (r+1)*perRound }
		if !harness.Eventually(30*time.Second, inside) {
			t.Fatalf("round %d: the slow IPAM was not entered by all %d RunPodSandbox calls\n%s", r, perRound, n.LogTail(30))
		}
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		cancel()
		n.MustStart(t)
		// The orphaned plugins were killed by the restarted netshim. Only
		// ADDs count: the restarted netshim's own start-up teardown runs
		// DELs through the same script (briefly, before it execs
		// host-local) and may be doing so right now.
		if left := processesRunning(filepath.Join(bin, "slow-ipam"), "CNI_COMMAND=ADD"); len(left) > 0 {
			t.Errorf("round %d: orphaned slow IPAM plugins still run after the restart: pids %v", r, left)
		}
		for _, p := range w.mustSandboxes() {
			st := w.status(p.Id)
			if st.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY && st.GetNetwork().GetIp() == "" {
				t.Errorf("round %d: sandbox %s (%s) is READY without an IP after the restart", r, p.Id, p.GetMetadata().GetName())
			}
		}
		w.removeAll()
		w.sc.runs.Add(1)
	}
	if held := w.ipamHeld(); len(held) > 0 {
		t.Errorf("after Stop+Remove of every sandbox, host-local still holds %v", held)
	}
}

func (w *world) status(id string) *runtimeapi.PodSandboxStatus {
	w.t.Helper()
	ctx, cancel := rpcCtx(context.Background())
	defer cancel()
	resp, err := w.ns.CRI().Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		w.t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	return resp.Status
}

// (3) A private dockerd is stopped and started again while clients cycle
// pods. netshim reports the runtime not ready meanwhile and recovers by
// itself; every cycle completes.
func testDockerdRestartUnderLoad(t *testing.T, w *world) {
	d := harness.StartPrivateDockerd(t, harness.WithImages(pauseImage))
	w.start(w.conflist(), harness.WithDockerEndpoint(d.Endpoint()))
	ctx, cancel := context.WithTimeout(t.Context(), loadDeadline)
	defer cancel()
	const clients = 10
	var restarted atomic.Bool
	wait := w.load(ctx, clients, "d", &restarted)
	func() {
		defer restarted.Store(true)
		if !harness.EventuallyCtx(ctx, time.Minute, func() bool { return w.sc.runs.Load() >= clients/2 }) {
			t.Errorf("no load before the restart: %d cycles", w.sc.runs.Load())
			return
		}
		if err := d.Stop(); err != nil {
			t.Errorf("stopping the private dockerd: %v", err)
			return
		}
		if !harness.Eventually(10*time.Second, func() bool { return !w.runtimeReady() }) {
			t.Errorf("Status still reports RuntimeReady with dockerd stopped")
		}
		if err := d.Start(); err != nil {
			t.Errorf("starting the private dockerd again: %v\n%s", err, d.LogTail(20))
			return
		}
		if !harness.Eventually(30*time.Second, w.runtimeReady) {
			t.Errorf("RuntimeReady did not come back after dockerd did")
		}
	}()
	wait()
	t.Logf("%d cycles, failed calls by code: %s", w.sc.runs.Load(), &w.codes)
	w.removeAll()
}

// load starts clients that each cycle a pod with a host port of its own,
// at least once and on until until is set; the returned wait waits for
// them and fails the test for every client that could not complete.
func (w *world) load(ctx context.Context, clients int, prefix string, until *atomic.Bool) (wait func()) {
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		c := w.client()
		cfg := w.podConfig(fmt.Sprintf("%s%02d", prefix, i), w.hostPort(i))
		wg.Go(func() {
			for k := 0; k < 1 || !until.Load(); k++ {
				if err := w.cycle(ctx, c, cfg); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	return func() {
		w.t.Helper()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				w.t.Errorf("client %s%02d: %v", prefix, i, err)
			}
		}
	}
}

// runtimeReady reads the RuntimeReady condition (false also when netshim
// does not answer).
func (w *world) runtimeReady() bool {
	ctx, cancel := rpcCtx(context.Background())
	defer cancel()
	resp, err := w.ns.CRI().Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return false
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.Type == runtimeapi.RuntimeReady {
			return c.Status
		}
	}
	return false
}

// processesRunning returns the pids of live processes whose command line
// names path (a script's interpreter has it as an argument) and whose
// environment holds env ("NAME=value").
func processesRunning(path, env string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), path) {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(environ), "\x00"), env) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			s := string(stat)
			if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] == "Z" {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}
