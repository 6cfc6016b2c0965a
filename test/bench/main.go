// Command netshim-bench measures netshim against the Docker+CNI floor:
// sandbox lifecycle latency, concurrent lifecycle wall time, read latency
// and idle Docker traffic with many pods present, and memory. See
// docs/benchmarks.md; `make bench` runs it through hack/bench.sh.
//
// It needs root, a Docker engine, the pause image and the CNI plugins. It
// starts netshim on a temporary root with a Docker socket of its own (a
// counting proxy in front of the real one) and a bridge network of its own
// (nsbench0, 10.124.0.0/16), and removes everything it made when it ends,
// also on failure or interrupt.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/docker/docker/client"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
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
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.netshim, "netshim", "_output/netshim", "netshim binary to benchmark")
	flag.StringVar(&o.cniBinDir, "cni-bin-dir", "/usr/lib/cni", "directory of the CNI plugins (bridge, host-local, portmap, loopback)")
	flag.StringVar(&o.dockerSocket, "docker-socket", "/var/run/docker.sock", "the real Docker engine's socket")
	flag.StringVar(&o.pauseImage, "pause-image", "registry.k8s.io/pause:3.10", "pause image, present locally (hack/images.sh)")
	flag.IntVar(&o.pods, "pods", 110, "pods present for the read-latency, idle-traffic and memory figures")
	flag.IntVar(&o.seq, "seq", 30, "sequential RunPodSandbox samples (each interleaved with floor samples)")
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
	flag.Parse()
	return o
}

// bench is the state shared by the scenarios.
type bench struct {
	opts      options
	runID     string
	namespace string
	dir       string
	confList  []byte
	proxy     *countingProxy
	netshim   *harness.Netshim
	conn      *grpc.ClientConn
	rt        runtimeapi.RuntimeServiceClient
	docker    *client.Client
	floor     *floor
	report    *report

	podSeq atomic.Int64
	mu     sync.Mutex
	pods   map[string]bool // sandboxes created through netshim and not yet removed
	ownIDs map[string]bool // every sandbox created through netshim in this run
	// population is the --pods pods, present from the populate scenario
	// to the depopulate one.
	population []string
	popConfigs map[string]*runtimeapi.PodSandboxConfig // sandbox config of each population pod
	workloads  map[string]string                       // population pod -> its running container
	started    time.Time
}

// scenario is one measurement. Scenarios run in order on one netshim and
// share the bench; a failing one is reported and the rest still run,
// except that cleanup always runs last.
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
	started := time.Now()
	b := &bench{opts: o, runID: newUID()[:8], pods: map[string]bool{}, ownIDs: map[string]bool{},
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
	if m := b.proxy.mark(); m.errors > 0 {
		b.report.note("The counting proxy failed to forward %d Docker requests.", m.errors)
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
	if o.pods < 1 || o.seq < 1 || o.concurrent < 1 || o.populateConc < 1 || o.calls < 1 {
		return errors.New("--pods, --seq, --concurrent, --populate-concurrency and --calls must be positive")
	}
	return nil
}

// setUp writes the network config, starts the proxy and netshim and
// connects to both engines.
func (b *bench) setUp(ctx context.Context) error {
	o := b.opts
	if err := prepareBridge(); err != nil {
		return err
	}
	for _, d := range []string{"net.d", "root", "cache", "floorcache", "ipam", "pods"} {
		if err := os.MkdirAll(filepath.Join(b.dir, d), 0o755); err != nil {
			return err
		}
	}
	var err error
	b.confList, err = benchConfList(filepath.Join(b.dir, "ipam"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.dir, "net.d", "10-nsbench.conflist"), b.confList, 0o644); err != nil {
		return err
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
	b.floor, err = newFloor(b.docker, []string{o.cniBinDir}, filepath.Join(b.dir, "floorcache"), b.confList, o.pauseImage, b.runID)
	if err != nil {
		return err
	}

	b.proxy, err = startProxy(filepath.Join(b.dir, "docker.sock"), o.dockerSocket)
	if err != nil {
		return fmt.Errorf("starting the counting Docker proxy: %w", err)
	}
	logPath := o.netshimLog
	if logPath == "" {
		logPath = filepath.Join(b.dir, "netshim.log")
	}
	b.netshim, err = harness.NewNetshim(
		harness.WithBinary(o.netshim),
		harness.WithDir(b.dir),
		harness.WithSocket(filepath.Join(b.dir, "ns.sock")),
		harness.WithCNIConfDir(filepath.Join(b.dir, "net.d")),
		harness.WithCNICacheDir(filepath.Join(b.dir, "cache")),
		harness.WithLogFile(logPath),
		harness.WithDockerEndpoint("unix://"+b.proxy.path),
		harness.WithCNIBinDir(o.cniBinDir),
		harness.WithPauseImage(o.pauseImage),
		harness.WithVerbosity(1),
		harness.WithOwnProcessGroup(),
		harness.WithStartTimeout(o.startTimeout),
	)
	if err != nil {
		return err
	}
	if err := b.netshim.Start(ctx); err != nil {
		return fmt.Errorf("%w; last log lines:\n%s", err, b.netshim.LogTail(30))
	}
	v := b.netshim.Version()
	b.conn = b.netshim.CRI().Conn
	b.rt = runtimeapi.NewRuntimeServiceClient(b.conn)
	st, err := b.rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return fmt.Errorf("CRI Status: %w", err)
	}
	for _, c := range st.GetStatus().GetConditions() {
		if !c.Status {
			return fmt.Errorf("netshim is not ready: %s %s: %s", c.Type, c.Reason, c.Message)
		}
	}

	b.report.header = machineHeader(v, sv.Version, sv.APIVersion, o)
	return nil
}

// call runs one CRI call with the per-call deadline and returns its
// in-process duration.
func (b *bench) call(ctx context.Context, f func(ctx context.Context) error) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, b.opts.callTimeout)
	defer cancel()
	start := time.Now()
	err := f(cctx)
	return time.Since(start), err
}

// runPod runs one sandbox through netshim.
func (b *bench) runPod(ctx context.Context, cfg *runtimeapi.PodSandboxConfig) (string, time.Duration, error) {
	var id string
	d, err := b.call(ctx, func(ctx context.Context) error {
		r, err := b.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err == nil {
			id = r.PodSandboxId
		}
		return err
	})
	if err != nil {
		return "", 0, fmt.Errorf("RunPodSandbox %s: %w", cfg.GetMetadata().GetName(), err)
	}
	b.mu.Lock()
	b.pods[id] = true
	b.ownIDs[id] = true
	b.mu.Unlock()
	return id, d, nil
}

func (b *bench) stopPod(ctx context.Context, id string) (time.Duration, error) {
	d, err := b.call(ctx, func(ctx context.Context) error {
		_, err := b.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("StopPodSandbox %s: %w", id, err)
	}
	return d, nil
}

func (b *bench) removePod(ctx context.Context, id string) (time.Duration, error) {
	d, err := b.call(ctx, func(ctx context.Context) error {
		_, err := b.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("RemovePodSandbox %s: %w", id, err)
	}
	b.mu.Lock()
	delete(b.pods, id)
	b.mu.Unlock()
	return d, nil
}

// requestsSince returns the Docker requests netshim made since from, those
// about containers of others (another netshim on the same engine: its
// events reach ours too) apart.
func (b *bench) requestsSince(from mark) requestCounts {
	return b.proxy.between(from, b.proxy.mark(), b.foreign)
}

// foreign says whether a request's object is a container ID that is not
// one of this run's sandboxes. Names and image references count as ours.
func (b *bench) foreign(object string) bool {
	if len(object) != 64 || strings.Trim(object, "0123456789abcdef") != "" {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.ownIDs[object]
}

// noteForeign adds a note when requests about other netshims' containers
// were left out of a figure.
func (b *bench) noteForeign(when string, c requestCounts) {
	if n := c.foreignTotal(); n > 0 {
		b.report.note("Left out %s: %d Docker requests about containers not of this run (another netshim's pods on the same engine, which this netshim's events watch sees): %s.",
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

// cleanup removes everything the run made: netshim's pods (through
// netshim), floor pods, netshim itself, the proxy, any container of the run
// Docker still has, the bridge and the temporary directory.
func (b *bench) cleanup(ctx context.Context) error {
	var errs []error
	if b.rt != nil && b.netshim != nil && b.netshim.Running() {
		if err := b.removeAllPods(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if b.floor != nil {
		if err := b.floor.cleanup(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	// Stop closes netshim's client connection too.
	if b.netshim != nil {
		if err := b.netshim.Stop(syscall.SIGTERM); err != nil {
			errs = append(errs, err)
		}
	}
	if b.proxy != nil {
		b.proxy.close()
		if b.opts.requestsLog != "" {
			if err := writeFile(b.opts.requestsLog, func(f *os.File) error { return b.proxy.writeLog(f, b.started) }); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := b.removeLeftoverSandboxes(ctx); err != nil {
		errs = append(errs, err)
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

// removeAllPods stops and removes, through netshim, every pod of this run:
// those the bench knows and any netshim lists with the run's label (a
// RunPodSandbox whose answer was lost).
func (b *bench) removeAllPods(ctx context.Context) error {
	b.mu.Lock()
	ids := map[string]bool{}
	for id := range b.pods {
		ids[id] = true
	}
	b.mu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	r, err := b.rt.ListPodSandbox(lctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{runLabel: b.runID}}})
	cancel()
	if err == nil {
		for _, p := range r.Items {
			ids[p.Id] = true
		}
	}
	if len(ids) == 0 {
		return err
	}
	fmt.Printf("cleanup: removing %d pods through netshim\n", len(ids))
	list := make([]string, 0, len(ids))
	for id := range ids {
		list = append(list, id)
	}
	return errors.Join(err, forEach(list, 4, func(id string) error {
		if _, err := b.stopPod(ctx, id); err != nil {
			return err
		}
		_, err := b.removePod(ctx, id)
		return err
	}))
}

// removeLeftoverSandboxes force-removes sandbox containers of this run that
// netshim could not remove (it died, or timed out), after a DEL from
// netshim's CNI cache so that nothing else is left to release.
func (b *bench) removeLeftoverSandboxes(ctx context.Context) error {
	if b.floor == nil {
		return nil
	}
	cni := newCNI([]string{b.opts.cniBinDir}, filepath.Join(b.dir, "cache"))
	return b.floor.removeLabelled(ctx, "label."+runLabel+"="+b.runID, cni)
}

func machineHeader(v *runtimeapi.VersionResponse, dockerVersion, dockerAPI string, o options) []string {
	cpu := runtime.NumCPU()
	return []string{
		fmt.Sprintf("netshim benchmark, %s", time.Now().UTC().Format("2006-01-02 15:04 MST")),
		"",
		fmt.Sprintf("- machine: %d CPUs, %s memory, %s, kernel %s", cpu, memTotal(), osName(), kernel()),
		fmt.Sprintf("- Docker engine %s (API %s); CRI %s via netshim (runtime %s %s)", dockerVersion, dockerAPI, v.GetRuntimeApiVersion(), v.GetRuntimeName(), v.GetRuntimeVersion()),
		fmt.Sprintf("- CNI plugins: %s from %s; network: bridge %s, host-local %s, portmap", pluginVersion(o.cniBinDir), o.cniBinDir, bridgeName, benchSubnet),
		fmt.Sprintf("- pause image %s; %d sequential samples, %d concurrent, %d pods present, %d read calls, %s idle window", o.pauseImage, o.seq, o.concurrent, o.pods, o.calls, o.idle),
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
