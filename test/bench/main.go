// Command netshim-bench measures netshim against the Docker+CNI floor:
// sandbox lifecycle latency, concurrent lifecycle wall time, read latency
// and idle Docker traffic with many pods present, and memory. See
// docs/benchmarks.md; `make bench` runs it through hack/bench.sh.
//
// It needs root, a Docker engine, the pause image and the CNI plugins. It
// starts netshim on a temporary root with a Docker socket of its own (a
// counting proxy in front of the real one) and a bridge network of its own
// (nsbench0, 10.124.0.0/16), and removes everything it made when it ends,
// also on failure or interrupt. For the sequential RunPodSandbox rounds it
// runs two more netshims, in the pinned and the pause-less sandbox netns
// modes, and repeats the rounds on a slow CNI chain (the bridge chain with
// test/tools/cni-sleep appended).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/docker/docker/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type options struct {
	netshim       string
	cniBinDir     string
	dockerSocket  string
	pauseImage    string
	pods          int
	seq           int
	concurrent    int
	populateConc  int
	calls         int
	idle          time.Duration
	out           string
	netshimLog    string
	requestsLog   string
	startTimeout  time.Duration
	callTimeout   time.Duration
	cleanupBudget time.Duration
	cniSleep      string
	netshimOCI    string
	slowSleep     time.Duration
	requirePinned bool
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.netshim, "netshim", "_output/netshim", "netshim binary to benchmark")
	flag.StringVar(&o.cniBinDir, "cni-bin-dir", "/usr/lib/cni", "directory of the CNI plugins (bridge, host-local, portmap, loopback)")
	flag.StringVar(&o.dockerSocket, "docker-socket", "/var/run/docker.sock", "the real Docker engine's socket")
	flag.StringVar(&o.pauseImage, "pause-image", "registry.k8s.io/pause:3.10", "pause image, present locally (hack/images.sh)")
	flag.IntVar(&o.pods, "pods", 110, "pods present for the read-latency, idle-traffic and memory figures")
	flag.IntVar(&o.seq, "seq", 30, "sequential RunPodSandbox rounds per CNI chain (each round: one pod of each netshim mode and of the floor, interleaved)")
	flag.IntVar(&o.concurrent, "concurrent", 20, "RunPodSandbox calls issued at once")
	flag.IntVar(&o.populateConc, "populate-concurrency", 4, "parallel RunPodSandbox calls when creating the --pods pods")
	flag.IntVar(&o.calls, "calls", 1000, "ListPodSandbox and PodSandboxStatus calls for the latency percentiles")
	flag.DurationVar(&o.idle, "idle", 10*time.Second, "how long to count netshim's Docker requests while idle")
	flag.StringVar(&o.out, "out", "", "also write the markdown table to this file")
	flag.StringVar(&o.netshimLog, "netshim-log", "", "write netshim's log here (default: in the temporary directory, removed at the end)")
	flag.StringVar(&o.requestsLog, "requests-log", "", "write every Docker request netshim made (ms since start, kind, object) to this file")
	flag.DurationVar(&o.startTimeout, "start-timeout", 30*time.Second, "how long netshim may take to answer CRI Version")
	flag.DurationVar(&o.callTimeout, "call-timeout", 2*time.Minute, "deadline of one CRI call")
	flag.DurationVar(&o.cleanupBudget, "cleanup-timeout", 5*time.Minute, "how long cleanup may take")
	flag.StringVar(&o.cniSleep, "cni-sleep", "_output/cni-sleep", "the test CNI plugin appended to the chain for the slow-chain rounds (go build -o _output/cni-sleep ./test/tools/cni-sleep)")
	flag.StringVar(&o.netshimOCI, "netshim-oci", "_output/netshim-oci", "netshim-oci built with the netshim under test; the bench notes it when the engine's runtime netshim-oci is another binary")
	flag.DurationVar(&o.slowSleep, "slow-chain-sleep", 150*time.Millisecond, "how long cni-sleep's ADD sleeps in the slow-chain rounds; 0 leaves those rounds out")
	flag.BoolVar(&o.requirePinned, "require-pinned", false, "fail, instead of leaving the pinned- and pause-less-mode rows out, when those sandbox netns modes cannot be measured (the engine has no runtime netshim-oci)")
	flag.Parse()
	return o
}

// bench is the state shared by the scenarios.
type bench struct {
	opts      options
	runID     string
	namespace string
	dir       string
	confList  []byte // the bridge chain
	slowList  []byte // the slow chain; nil when --slow-chain-sleep is 0
	binDirs   []string
	docker    *client.Client
	floor     *floor
	report    *report

	// The netshim in the default sandbox netns mode: every scenario runs
	// against it (b.rt, b.proxy, b.runPod ... are its).
	*instance
	// pinned is the netshim in the pinned mode, for the sequential
	// rounds only; nil when that mode is not measured, and pinnedSkip
	// then says why.
	pinned     *instance
	pinnedSkip string
	// pauseless is the netshim in the pause-less mode, for the
	// sequential rounds only, like pinned; nil when not measured, and
	// pauselessSkip then says why (it needs what the pinned mode needs).
	pauseless     *instance
	pauselessSkip string
	wrapperPath   string // the engine's runtime netshim-oci
	// broken, when set, stops the run: what the later scenarios would
	// measure is not what they say (e.g. the bridge chain could not be
	// restored after the slow one).
	broken string

	podSeq atomic.Int64
	// population is the --pods pods, present from the populate scenario
	// to the depopulate one.
	population []string
	popConfigs map[string]*runtimeapi.PodSandboxConfig // sandbox config of each population pod
	workloads  map[string]string                       // population pod -> its running container
	started    time.Time
}

// scenario is one measurement. Scenarios run in order on the default-mode
// netshim and share the bench; a failing one is reported and the rest
// still run, except that cleanup always runs last.
type scenario struct {
	name string
	run  func(ctx context.Context, b *bench) error
}

// clientGCPercent keeps the bench's own garbage collector out of the
// latency tails it measures: decoding 1000 answers of 48 kB makes a lot of
// garbage, and a collection in the client is not netshim's latency.
const clientGCPercent = 1000

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(clientGCPercent)
	}
	o := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Not deferred: a second signal during cleanup must not kill us half-way,
	// so the handler stays installed until cleanup is done.
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "netshim-bench: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("must run as root (it creates containers, a bridge and network namespaces' interfaces)")
	}
	if err := checkInputs(&o); err != nil {
		return err
	}
	if o.slowSleep == 0 {
		fmt.Println("netshim-bench: --slow-chain-sleep 0: the slow-chain rounds are left out")
	}
	started := time.Now()
	b := &bench{opts: o, runID: newUID()[:8],
		popConfigs: map[string]*runtimeapi.PodSandboxConfig{}, workloads: map[string]string{}, report: newReport()}
	b.namespace = "nsbench-" + b.runID
	b.started = started

	b.dir, err = os.MkdirTemp("", "nsbench")
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), o.cleanupBudget)
		defer cancel()
		if cerr := b.cleanup(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup: %w", cerr))
		}
	}()

	if err := b.setUp(ctx); err != nil {
		return err
	}

	var failed []string
	for _, s := range scenarios() {
		if ctx.Err() != nil {
			break
		}
		if b.broken != "" {
			b.report.note("The scenarios from %q on did not run: %s", s.name, b.broken)
			failed = append(failed, "stopped before "+s.name)
			break
		}
		if b.netshim.Exited() {
			b.report.note("netshim exited during the run (%v); the scenarios from %q on did not run. Last log lines: %s", b.netshim.WaitErr(), s.name, oneLine(errors.New(b.netshim.LogTail(10))))
			failed = append(failed, "netshim exited before "+s.name)
			break
		}
		fmt.Printf("== %s\n", s.name)
		t := time.Now()
		if serr := s.run(ctx, b); serr != nil {
			fmt.Fprintf(os.Stderr, "scenario %q failed: %v\n", s.name, serr)
			b.report.note("Scenario %q failed: %v", s.name, oneLine(serr))
			failed = append(failed, s.name)
		}
		fmt.Printf("   (%s)\n", time.Since(t).Round(100*time.Millisecond))
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	for _, in := range b.instances() {
		if m := in.proxy.mark(); m.errors > 0 {
			b.report.note("The counting proxy of the %s netshim failed to forward %d Docker requests.", in.name, m.errors)
		}
	}
	b.report.note("Run took %s (set-up, all scenarios; cleanup excluded).", time.Since(started).Round(time.Second))

	md := b.report.markdown()
	fmt.Println()
	fmt.Print(md)
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", o.out, err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("scenarios failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// checkInputs fails early, with the fix, on what the bench cannot do
// without.
func checkInputs(o *options) error {
	abs, err := filepath.Abs(o.netshim)
	if err != nil {
		return err
	}
	o.netshim = abs
	if st, err := os.Stat(o.netshim); err != nil || st.IsDir() {
		return fmt.Errorf("netshim binary %s not found (go build -o _output/netshim ./cmd/netshim)", o.netshim)
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(o.cniBinDir, p)); err != nil {
			return fmt.Errorf("CNI plugin %s not in %s (apt-get install containernetworking-plugins)", p, o.cniBinDir)
		}
	}
	if o.slowSleep < 0 {
		return fmt.Errorf("--slow-chain-sleep %s is negative", o.slowSleep)
	}
	if o.slowSleep > 0 {
		if o.cniSleep, err = filepath.Abs(o.cniSleep); err != nil {
			return err
		}
		if st, err := os.Stat(o.cniSleep); err != nil || st.IsDir() {
			return fmt.Errorf("CNI plugin %s not found (go build -o _output/cni-sleep ./test/tools/cni-sleep), or give --slow-chain-sleep 0 to leave the slow chain out", o.cniSleep)
		}
	}
	if o.pods < 1 || o.seq < 1 || o.concurrent < 1 || o.populateConc < 1 || o.calls < 1 {
		return errors.New("--pods, --seq, --concurrent, --populate-concurrency and --calls must be positive")
	}
	return nil
}

// setUp writes the network configs, starts the netshims (each behind its
// own counting proxy) and connects to the engine.
func (b *bench) setUp(ctx context.Context) error {
	o := b.opts
	if err := prepareBridge(); err != nil {
		return err
	}
	for _, d := range []string{"net.d", "root", "cache", "floorcache", "ipam", "pods", "pinned", "pauseless"} {
		if err := os.MkdirAll(filepath.Join(b.dir, d), 0o755); err != nil {
			return err
		}
	}
	var err error
	b.confList, err = benchConfList(filepath.Join(b.dir, "ipam"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.dir, "net.d", bridgeConfName), b.confList, 0o644); err != nil {
		return err
	}
	b.binDirs = []string{o.cniBinDir}
	if o.slowSleep > 0 {
		b.slowList, err = slowConfList(b.confList, filepath.Base(o.cniSleep), o.slowSleep)
		if err != nil {
			return err
		}
		b.binDirs = append(b.binDirs, filepath.Dir(o.cniSleep))
	}

	b.docker, err = client.NewClientWithOpts(client.WithHost("unix://"+o.dockerSocket), client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	sv, err := b.docker.ServerVersion(ctx)
	if err != nil {
		return fmt.Errorf("the Docker engine on %s does not answer (hack/dockerd.sh start): %w", o.dockerSocket, err)
	}
	if _, err := b.docker.ImageInspect(ctx, o.pauseImage); err != nil {
		return fmt.Errorf("pause image %s is not present (hack/images.sh): %w", o.pauseImage, err)
	}
	b.floor, err = newFloor(b.docker, b.binDirs, filepath.Join(b.dir, "floorcache"), b.confList, o.pauseImage, b.runID)
	if err != nil {
		return err
	}

	info, err := b.docker.Info(ctx)
	if err != nil {
		return fmt.Errorf("docker info: %w", err)
	}
	b.pinnedSkip = pinnedUnavailable(slices.Collect(maps.Keys(info.Runtimes)))
	b.pauselessSkip = b.pinnedSkip
	if b.pinnedSkip == "" {
		b.wrapperPath = info.Runtimes[ociRuntime].Path
		if note := wrapperNote(b.wrapperPath, o.netshimOCI); note != "" {
			fmt.Fprintf(os.Stderr, "netshim-bench: %s\n", note)
			b.report.note("%s.", strings.TrimSuffix(note, "."))
		}
	}
	if b.pinnedSkip != "" {
		if o.requirePinned {
			return fmt.Errorf("--require-pinned: %s", b.pinnedSkip)
		}
		fmt.Fprintf(os.Stderr, "netshim-bench: the pinned- and pause-less-mode rows are left out: %s\n", b.pinnedSkip)
		b.report.note("The pinned and pause-less sandbox netns modes were not measured: %s.", b.pinnedSkip)
	}
	logPath := o.netshimLog
	if logPath == "" {
		logPath = filepath.Join(b.dir, "netshim.log")
	}
	// The default mode is given explicitly: netshim's own default (auto)
	// is the pinned mode on an engine that has netshim-oci.
	b.instance, err = startInstance(ctx, o, instanceConfig{name: "default", mode: modeDocker, dir: b.dir,
		confDir: filepath.Join(b.dir, "net.d"), cniBinDirs: b.binDirs, logPath: logPath})
	if err != nil {
		return err
	}
	if b.pinnedSkip == "" {
		b.pinned, err = startInstance(ctx, o, instanceConfig{name: "pinned", mode: modePinned, dir: filepath.Join(b.dir, "pinned"),
			confDir: filepath.Join(b.dir, "net.d"), cniBinDirs: b.binDirs, logPath: modeLogPath(o.netshimLog, b.dir, "pinned")})
		if err != nil {
			return err
		}
	}
	if b.pauselessSkip == "" {
		// startInstance checks that netshim says new pods get this mode;
		// that each of the bench's pods really got no pause container is
		// checked as the rounds make them (checkPauseless).
		b.pauseless, err = startInstance(ctx, o, instanceConfig{name: "pauseless", mode: modePauseless, dir: filepath.Join(b.dir, "pauseless"),
			confDir: filepath.Join(b.dir, "net.d"), cniBinDirs: b.binDirs, logPath: modeLogPath(o.netshimLog, b.dir, "pauseless")})
		if err != nil {
			return err
		}
	}

	b.report.header = machineHeader(b.netshim.Version(), sv.Version, sv.APIVersion, o, b.modesLine())
	return nil
}

// instances are the netshims the run started.
func (b *bench) instances() []*instance {
	var out []*instance
	for _, in := range []*instance{b.instance, b.pinned, b.pauseless} {
		if in != nil {
			out = append(out, in)
		}
	}
	return out
}

// noteForeign adds a note when requests about other netshims' containers
// were left out of a figure.
func (b *bench) noteForeign(when string, c requestCounts) {
	if n := c.foreignTotal(); n > 0 {
		b.report.note("Left out %s: %d Docker requests about containers that are not this netshim's (the other netshim's pods in the sequential rounds, or another netshim's on the same engine: its events watch sees every netshim pod): %s.",
			when, n, fmtKinds(requestCounts{byKind: c.foreign}, 1))
	}
}

// nextPodName returns a pod name unique within the run.
func (b *bench) nextPodName(prefix string) string {
	return fmt.Sprintf("%s-%03d", prefix, b.podSeq.Add(1))
}

// forEach runs f on every item with at most conc in flight, and returns
// the first error (all items are still attempted).
func forEach[T any](items []T, conc int, f func(T) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, conc)
	for _, it := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(it); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// cleanup removes everything the run made: the netshims' pods (through
// their netshim), floor pods, the netshims themselves, the proxies, any
// container of the run Docker still has, pod netns mounts a netshim left,
// the bridge and the temporary directory.
func (b *bench) cleanup(ctx context.Context) error {
	var errs []error
	for _, in := range b.instances() {
		if in.rt != nil && in.netshim.Running() {
			if err := in.removeAllPods(ctx, b.runID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if b.floor != nil {
		if err := b.floor.cleanup(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, in := range b.instances() {
		if err := in.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if b.instance != nil && b.opts.requestsLog != "" {
		if err := writeFile(b.opts.requestsLog, func(f *os.File) error { return b.proxy.writeLog(f, b.started) }); err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.removeLeftoverSandboxes(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, in := range b.instances() {
		if err := unmountUnder(in.netnsDir); err != nil {
			errs = append(errs, err)
		}
	}
	if b.docker != nil {
		b.docker.Close()
	}
	if err := deleteBridge(); err != nil {
		errs = append(errs, err)
	}
	if b.dir != "" {
		if err := os.RemoveAll(b.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeLeftoverSandboxes force-removes sandbox containers of this run that
// their netshim could not remove (it died, or timed out), after a DEL from
// that netshim's CNI cache so that nothing else is left to release.
// A pause-less sandbox has no container: what a dead netshim leaves of one
// is its pinned namespaces and /dev/shm, which cleanup detaches
// (unmountUnder; its netns, and with it its veth, ends with the last
// reference), and its address in the run's IPAM directory, which goes
// with the temporary directory.
func (b *bench) removeLeftoverSandboxes(ctx context.Context) error {
	if b.floor == nil {
		return nil
	}
	var errs []error
	for _, in := range b.instances() {
		cni := newCNI(b.binDirs, in.cacheDir)
		errs = append(errs, b.floor.removeLabelled(ctx, cni, "label."+runLabel+"="+b.runID, "label."+instanceLabel+"="+in.name))
	}
	return errors.Join(errs...)
}

func machineHeader(v *runtimeapi.VersionResponse, dockerVersion, dockerAPI string, o options, modes string) []string {
	cpu := runtime.NumCPU()
	return []string{
		fmt.Sprintf("netshim benchmark, %s", time.Now().UTC().Format("2006-01-02 15:04 MST")),
		"",
		fmt.Sprintf("- machine: %d CPUs, %s memory, %s, kernel %s", cpu, memTotal(), osName(), kernel()),
		fmt.Sprintf("- Docker engine %s (API %s); CRI %s via netshim (runtime %s %s)", dockerVersion, dockerAPI, v.GetRuntimeApiVersion(), v.GetRuntimeName(), v.GetRuntimeVersion()),
		fmt.Sprintf("- CNI plugins: %s from %s; network: bridge %s, host-local %s, portmap", pluginVersion(o.cniBinDir), o.cniBinDir, bridgeName, benchSubnet),
		fmt.Sprintf("- pause image %s; %d sequential rounds per chain, %d concurrent, %d pods present, %d read calls, %s idle window", o.pauseImage, o.seq, o.concurrent, o.pods, o.calls, o.idle),
		"- " + modes,
	}
}

func writeFile(path string, write func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
