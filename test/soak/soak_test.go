//go:build soak

package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/netshim/netshim/test/harness"
)

const (
	pauseImage    = harness.DefaultPauseImage
	workloadImage = "netshim.local/busybox:latest"
	// hostPortBase: every fourth pod maps a host port, from a pool of one
	// per worker above the mode's base (modeNetwork).
	hostPortBase = 32100
)

// soakModes are the sandbox modes, in the order that numbers their
// networks.
var soakModes = []string{"docker", "pinned", "pauseless"}

// network is one mode's: its own bridge, a /22 (room for every pod a run
// holds at once and for the addresses host-local keeps a while after a
// release) and host ports, so that runs of different modes can go on at
// the same time (SOAK_MODES=docker and SOAK_MODES=pinned from two
// shells) without meeting.
type network struct {
	bridge, subnet, mac string
	portBase            int32
}

func modeNetwork(mode string) network {
	i := slices.Index(soakModes, mode)
	return network{
		bridge:   fmt.Sprintf("nssoak%d", i),
		subnet:   fmt.Sprintf("10.126.%d.0/22", 4*i),
		mac:      fmt.Sprintf("02:6e:73:73:6b:%02x", i+1),
		portBase: int32(hostPortBase + 100*i),
	}
}

// config is the soak's environment (make soak sets it).
type config struct {
	netshim   string  // NETSHIM_BIN
	cniBinDir string  // CNI_BIN_DIR
	audit     string  // LEAK_AUDIT: test/e2e/leak-audit.sh
	minutes   float64 // SOAK_MINUTES per mode
	modes     []string
	rate      float64 // SOAK_RATE: lifecycles started per second, steady
	burst     int     // SOAK_BURST: lifecycles started at once, every minute
	workers   int     // SOAK_WORKERS: lifecycles in flight at most
	seed      uint64  // SOAK_SEED
	report    string  // SOAK_REPORT: a Markdown table of the results
	state     string  // SOAK_STATE: the host guards' state files (.MODE appended)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func loadConfig(t *testing.T) config {
	t.Helper()
	c := config{
		netshim:   os.Getenv("NETSHIM_BIN"),
		cniBinDir: envOr("CNI_BIN_DIR", "/usr/lib/cni"),
		audit:     envOr("LEAK_AUDIT", "../e2e/leak-audit.sh"),
		modes:     strings.Fields(envOr("SOAK_MODES", "docker pinned pauseless")),
		report:    os.Getenv("SOAK_REPORT"),
		state:     envOr("SOAK_STATE", filepath.Join(os.TempDir(), "netshim-soak.state")),
	}
	num := func(name, def string) float64 {
		v, err := strconv.ParseFloat(envOr(name, def), 64)
		if err != nil || v <= 0 {
			t.Fatalf("soak: %s=%q: want a positive number", name, os.Getenv(name))
		}
		return v
	}
	c.minutes = num("SOAK_MINUTES", "3")
	c.rate = num("SOAK_RATE", "1")
	c.burst = int(num("SOAK_BURST", "8"))
	c.workers = int(num("SOAK_WORKERS", "16"))
	c.seed = uint64(time.Now().UnixNano())
	if s := os.Getenv("SOAK_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("soak: SOAK_SEED=%q: %v", s, err)
		}
		c.seed = v
	}
	if c.netshim == "" {
		t.Fatal("soak: NETSHIM_BIN is not set: run `make soak` as root")
	}
	if os.Geteuid() != 0 {
		t.Fatal("soak: must run as root")
	}
	for _, m := range c.modes {
		if !slices.Contains(soakModes, m) {
			t.Fatalf("soak: SOAK_MODES: %q is not a sandbox mode (docker, pinned, pauseless)", m)
		}
	}
	for _, f := range []string{c.netshim, c.audit, filepath.Join(c.cniBinDir, "bridge"), filepath.Join(c.cniBinDir, "host-local"), filepath.Join(c.cniBinDir, "portmap")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("soak: %v", err)
		}
	}
	if harness.OCIWrapperBin() == "" {
		t.Fatal("soak: netshim-oci is not next to NETSHIM_BIN (make build): the pinned and pause-less modes need it")
	}
	for _, img := range []string{pauseImage, workloadImage} {
		if out, err := harness.RunCmd("docker", "image", "inspect", "--format", "{{.Id}}", img); err != nil {
			t.Fatalf("soak: image %s is missing (hack/images.sh): %v\n%s", img, err, out)
		}
	}
	return c
}

// TestSoak runs the churn in each mode, one after the other, and prints a
// line per mode and a summary; SOAK_REPORT gets the table.
func TestSoak(t *testing.T) {
	cfg := loadConfig(t)
	fmt.Printf("soak: %g min per mode, modes %s, %g lifecycles/s with bursts of %d a minute, at most %d in flight, seed %d\n",
		cfg.minutes, strings.Join(cfg.modes, " "), cfg.rate, cfg.burst, cfg.workers, cfg.seed)
	var results []*result
	for i, mode := range cfg.modes {
		r := &result{mode: mode, minutes: cfg.minutes}
		results = append(results, r)
		ok := t.Run(mode, func(t *testing.T) {
			runMode(t, cfg, mode, cfg.seed+uint64(i), r)
		})
		if !ok {
			r.fail("the run failed (see above)")
		}
		fmt.Println(r.line())
	}
	passed := 0
	for _, r := range results {
		if r.passed() {
			passed++
		}
	}
	fmt.Printf("soak: %d passed, %d failed\n", passed, len(results)-passed)
	if cfg.report != "" {
		if err := os.WriteFile(cfg.report, []byte(markdown(results)), 0o644); err != nil {
			t.Errorf("writing %s: %v", cfg.report, err)
		}
	}
}

// world is one mode's run: its engine, netshim and what it counts.
type world struct {
	t      *testing.T
	cfg    config
	mode   string
	net    network
	ns     string // the pods' namespace
	dir    string
	ipam   string
	engine *harness.Dockerd
	shim   *harness.Netshim
	addr   string // netshim's metrics endpoint
	rng    *rand.Rand
	rngMu  sync.Mutex
	res    *result
	ports  chan int32
	// abort stops the load early: a killed netshim or dockerd that does
	// not come back leaves nothing to measure.
	abort context.CancelFunc

	mu  sync.Mutex
	seg int // netshim's start count: the samples' segment
	// segStart is when the running netshim started: its first samples are
	// its warm-up (caches filling, the heap finding its size) and are not
	// fitted.
	segStart time.Time
}

func (w *world) intn(n int) int {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return w.rng.IntN(n)
}

// segment is the running netshim's start count and start time.
func (w *world) segment() (int, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seg, w.segStart
}

func (w *world) newSegment() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seg++
	w.segStart = time.Now()
}

func runMode(t *testing.T, cfg config, mode string, seed uint64, r *result) {
	dir, err := os.MkdirTemp("", "nssoak")
	if err != nil {
		t.Fatal(err)
	}
	guard := harness.GuardHost(t, cfg.state+"."+mode)
	nw := modeNetwork(mode)
	for _, err := range []error{guard.RecordTempDir(dir), guard.WatchLink(nw.bridge), guard.WatchCNIRules(nw.bridge, nw.subnet)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	w := &world{t: t, cfg: cfg, mode: mode, net: nw, ns: "nssoak-" + mode, dir: dir, ipam: filepath.Join(dir, "ipam"),
		rng: rand.New(rand.NewPCG(seed, 0x50a6)), res: r, ports: make(chan int32, cfg.workers)}
	for i := range cfg.workers {
		w.ports <- nw.portBase + int32(i)
	}
	// The bridge is made here, with an address of its own, as a node's is
	// before its pods: a bridge that took its first port's MAC has none
	// once that port is gone, and the bridge plugin then fails every ADD.
	_, _ = harness.RunCmd("ip", "link", "del", nw.bridge)
	harness.MustRun(t, "ip", "link", "add", "name", nw.bridge, "address", nw.mac, "type", "bridge")

	w.engine = harness.StartPrivateDockerd(t, harness.WithImages(pauseImage, workloadImage))
	w.addr = freeLoopbackAddr(t)
	w.shim = harness.StartNetshim(t,
		harness.WithBinary(cfg.netshim),
		harness.WithDir(filepath.Join(dir, "ns")),
		harness.WithCNIBinDir(cfg.cniBinDir),
		harness.WithCNIConfig(harness.WithBridge(nw.bridge), harness.WithSubnets(nw.subnet), harness.WithIPAMDataDir(w.ipam)),
		harness.WithDockerEndpoint(w.engine.Endpoint()),
		harness.WithSandboxNetNS(mode),
		harness.WithCleanupNamespace(w.ns),
		harness.WithVerbosity(1),
		// Profiling for the live heap (a heap profile taken after a
		// collection), on loopback.
		harness.WithArgs("--metrics-bind-address", w.addr, "--enable-profiling"),
	)
	w.newSegment()

	d := time.Duration(cfg.minutes * float64(time.Minute))
	kills := Schedule(d, KillsPerKind(cfg.minutes), w.rng)
	start := time.Now()
	loadCtx, stopLoad := context.WithTimeout(t.Context(), d)
	defer stopLoad()
	w.abort = stopLoad

	var bg sync.WaitGroup
	bg.Go(func() { w.sample(loadCtx) })
	bg.Go(func() { w.kill(loadCtx, start, kills) })
	w.drive(loadCtx) // returns once the load stopped and every lifecycle ended
	stopLoad()
	bg.Wait()
	r.elapsed = time.Since(start)

	w.collect()
	if err := w.shim.Stop(syscall.SIGTERM); err != nil {
		r.fail(fmt.Sprintf("stopping netshim: %v", err))
	}
	w.audit()
	w.fit()
	if !r.passed() {
		t.Errorf("soak %s: %s", mode, strings.Join(r.failures, "; "))
	}
}

// freeLoopbackAddr is a free TCP port on 127.0.0.1 for netshim's metrics.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// collect removes, through netshim, the sandboxes no client knows of
// (one a killed netshim made but whose answer was lost), as kubelet's
// garbage collection would.
func (w *world) collect() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if !w.shim.Running() {
		if err := w.shim.Start(ctx); err != nil {
			w.res.fail(fmt.Sprintf("netshim does not start after the load: %v", err))
			return
		}
	}
	left, err := w.listPods(ctx)
	if err != nil {
		w.res.fail(fmt.Sprintf("listing the sandboxes left: %v", err))
		return
	}
	w.res.collected = len(left)
	for attempt := 0; len(left) > 0 && attempt < 5; attempt++ {
		if err := w.shim.RemovePods(ctx, w.ns); err != nil {
			w.t.Logf("collecting the sandboxes left (attempt %d): %v", attempt+1, err)
		}
		if left, err = w.listPods(ctx); err != nil {
			break
		}
	}
	if len(left) > 0 || err != nil {
		w.res.fail(fmt.Sprintf("%d sandbox(es) could not be removed through netshim after the load (%v)", len(left), err))
	}
}

var auditCounts = regexp.MustCompile(`(?m)^leak-audit: counts (.*)$`)

// audit runs the leak audit on what the run made, against the private
// engine, and books its verdict.
func (w *world) audit() {
	nsDir := filepath.Join(w.dir, "ns")
	args := []string{w.cfg.audit, "--no-defaults", "--ipam-dir", w.ipam, "--root-dir", filepath.Join(nsDir, "root"),
		"--cache-dir", filepath.Join(nsDir, "cnicache"), "--netns-dir", filepath.Join(nsDir, "netns"),
		"--bridge", w.net.bridge, "--cni-network", w.net.bridge, "--container-filter", "label=netshim.io/pod-namespace=" + w.ns}
	// The audit's iptables and veth checks see the whole host: on a
	// machine where other suites run beside the soak, SOAK_AUDIT_LOCK
	// names the lock they hold while they run (the developers' guide's
	// flock), so that the audit sees none of their pods.
	if lock := os.Getenv("SOAK_AUDIT_LOCK"); lock != "" {
		f, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			w.res.fail(fmt.Sprintf("the audit's lock: %v", err))
			return
		}
		defer f.Close()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			w.res.fail(fmt.Sprintf("the audit's lock %s: %v", lock, err))
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+w.engine.Endpoint())
	out, err := cmd.CombinedOutput()
	if m := auditCounts.FindSubmatch(out); m != nil {
		w.res.leakCount = string(m[1])
	}
	var leaks []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "LEAK ") {
			leaks = append(leaks, l)
		}
	}
	w.res.leaks = len(leaks)
	switch ee, _ := err.(*exec.ExitError); {
	case err == nil:
	case ee != nil && ee.ExitCode() == 1:
		w.res.fail(fmt.Sprintf("the leak audit found %d leak(s):\n%s", len(leaks), strings.Join(leaks, "\n")))
	default:
		w.res.fail(fmt.Sprintf("the leak audit did not run: %v\n%s", err, out))
	}
}
