// Command netshim-kubelet-bench measures netshim under a real kubelet
// running many static pods (issue 13): for each netshim configuration
// (--mode), the time from dropping the manifests into kubelet's static pod
// dir until every container runs (and until each pod's container started,
// p50 and p99), kubelet's PLEG relist mean and the runtime stack's CPU and
// memory while the pods run and nothing changes,
// and the time the teardown takes once the manifests are gone. `make
// bench-kubelet` runs it through hack/bench-kubelet.sh; docs/benchmarks.md
// has the figures.
//
// With --containerd-bin-dir, containerd's own CRI plugin (a fresh
// containerd per run, under the same kubelet, pods, images and CNI
// network) joins the rotation as the column "containerd", the peer each
// netshim mode gets a ratio to (containerd.go, runtime.go).
//
// It needs root, the host's Docker engine holding the local images
// (hack/images.sh), a kubelet binary and the CNI plugins. The world is the
// harness's (test/harness): a private dockerd with the images loaded, and
// per run a fresh netshim (or containerd) and a fresh standalone kubelet on
// it, with a CNI bridge network of its own (nsbenchk0, 10.183.0.0/24).
// Everything it made is removed when it ends, also on failure or
// interrupt; a run killed before that is cleaned up by the next (the state
// file).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The world's fixed names and addresses; the caller holds the lock that
// serialises Docker work on the machine, so no other run owns them.
const (
	bridgeName  = "nsbenchk0"
	networkName = "nskbench"
	subnetCIDR  = "10.183.0.0/24"
	gatewayIP   = "10.183.0.1"
	namespace   = "netshim-kbench"
	nodeName    = "netshim-kbench-node"
)

// Limits on --pods: kubelet admits at most maxPods pods (its default
// without --max-pods), and host-local hands out the subnet's addresses but
// the network's, the gateway's and the broadcast one (10.183.0.2-254).
const (
	kubeletDefaultMaxPods = 110
	subnetPodAddresses    = 253
)

type options struct {
	netshim, kubelet, netshimOCI string
	cniBinDir                    string
	containerdBinDir             string
	pauseImage, image            string
	pods, rounds, maxPods        int
	hold, settle                 time.Duration
	upTimeout, downTimeout       time.Duration
	syncFrequency                time.Duration
	netshimV, kubeletV           int
	kubeletPort, healthzPort     int
	metricsPort                  int
	profile                      bool
	modes                        modeFlags
	out, artifacts, state        string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("netshim-kubelet-bench", flag.ContinueOnError)
	fs.StringVar(&o.netshim, "netshim", "_output/netshim", "netshim binary")
	fs.StringVar(&o.kubelet, "kubelet", os.Getenv("KUBELET_BIN"), "kubelet binary (default $KUBELET_BIN)")
	fs.StringVar(&o.netshimOCI, "netshim-oci", "", "register this binary as runtime netshim-oci on the private dockerd (what netshim's pinned netns mode runs sandboxes with); empty: none")
	fs.StringVar(&o.cniBinDir, "cni-bin-dir", "/usr/lib/cni", "directory of the CNI plugins (bridge, host-local, portmap, firewall)")
	fs.StringVar(&o.pauseImage, "pause-image", "registry.k8s.io/pause:3.10", "pause image, in the host's engine (hack/images.sh)")
	fs.StringVar(&o.image, "image", "netshim.local/busybox:latest", "the pods' image, in the host's engine (hack/images.sh)")
	fs.StringVar(&o.containerdBinDir, "containerd-bin-dir", "", "directory holding containerd, containerd-shim-runc-v2, ctr and runc (hack/docker29.sh build-containerd): "+
		"adds the column \"containerd\", containerd's own CRI plugin under the same kubelet and pods, to the rotation, and each netshim column's ratio to it; empty: none")
	fs.IntVar(&o.pods, "pods", 50, fmt.Sprintf("static pods, one container each (at most %d: the subnet's addresses; above %d needs --max-pods)", subnetPodAddresses, kubeletDefaultMaxPods))
	fs.IntVar(&o.maxPods, "max-pods", 0, fmt.Sprintf("kubelet's maxPods (0: kubelet's default, %d); e.g. --pods 250 --max-pods 250", kubeletDefaultMaxPods))
	fs.IntVar(&o.rounds, "rounds", 1, "runs of every mode; each round starts one mode later than the one before")
	fs.DurationVar(&o.hold, "hold", 2*time.Minute, "how long the pods run, nothing changing, while CPU and PLEG are measured")
	fs.DurationVar(&o.settle, "settle", 15*time.Second, "wait between all containers running and the hold, so that kubelet's start-up syncs of the pods are not in it")
	fs.DurationVar(&o.upTimeout, "up-timeout", 5*time.Minute, "how long the pods may take to run (50 take seconds; give 250 on a busy 2-core machine more, e.g. 10m)")
	fs.DurationVar(&o.downTimeout, "down-timeout", 5*time.Minute, "how long the pods may take to be gone once their manifests are (kubelet removes them at its container GC, every minute)")
	fs.DurationVar(&o.syncFrequency, "sync-frequency", time.Minute, "kubelet's syncFrequency (its default is 1m; the e2e's 10s syncs every pod 6 times as often)")
	fs.IntVar(&o.netshimV, "netshim-v", 0, "netshim's -v (0: what the package ships)")
	fs.IntVar(&o.kubeletV, "kubelet-v", 2, "kubelet's -v")
	fs.IntVar(&o.kubeletPort, "kubelet-port", 10350, "kubelet's port (127.0.0.1; /metrics is read there)")
	fs.IntVar(&o.healthzPort, "kubelet-healthz-port", 10348, "kubelet's healthz port (127.0.0.1)")
	fs.IntVar(&o.metricsPort, "netshim-metrics-port", 10351, "netshim's --metrics-bind-address port (127.0.0.1; with --profile also --enable-profiling, for pprof)")
	fs.BoolVar(&o.profile, "profile", false, "take a CPU profile of netshim over each hold, and a heap profile at its end (pprof), into the artifacts dir")
	fs.Var(&o.modes, "mode", "a netshim configuration besides \"default\" (no extra flag), as NAME='--flag1 --flag2'; repeatable")
	fs.StringVar(&o.out, "out", "", "also write the markdown table to this file")
	fs.StringVar(&o.artifacts, "artifacts", "", "keep each run's netshim and kubelet logs (and profiles) under this directory")
	fs.StringVar(&o.state, "state", "", "state file recording what the run changed on the host, so that a killed run is cleaned up by the next")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	if o.kubelet == "" {
		errs = append(errs, errors.New("no kubelet: pass --kubelet or set KUBELET_BIN"))
	}
	if o.pods < 1 || o.rounds < 1 {
		errs = append(errs, errors.New("--pods and --rounds must be at least 1"))
	}
	errs = append(errs, checkPodLimits(o.pods, o.maxPods)...)
	if o.hold < time.Second {
		errs = append(errs, errors.New("--hold must be at least 1s (pprof takes whole seconds)"))
	}
	if o.settle < 0 || o.upTimeout <= 0 || o.downTimeout <= 0 || o.syncFrequency <= 0 {
		errs = append(errs, errors.New("--settle must not be negative; --up-timeout, --down-timeout and --sync-frequency must be positive"))
	}
	if o.profile && o.artifacts == "" {
		errs = append(errs, errors.New("--profile needs --artifacts (where the profiles go)"))
	}
	for _, p := range []*string{&o.netshim, &o.kubelet, &o.netshimOCI, &o.containerdBinDir, &o.out, &o.artifacts, &o.state} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				errs = append(errs, err)
			}
			*p = abs
		}
	}
	exes := []string{o.netshim, o.kubelet, o.netshimOCI}
	if o.containerdBinDir != "" {
		for _, b := range containerdBinaries {
			exes = append(exes, filepath.Join(o.containerdBinDir, b))
		}
	}
	for _, p := range exes {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			errs = append(errs, fmt.Errorf("%s is not an executable file", p))
		}
	}
	return o, errors.Join(errs...)
}

// checkPodLimits refuses a pod count the run could never bring up: more
// than kubelet admits (--max-pods, else its default) or than the subnet
// has addresses for.
func checkPodLimits(pods, maxPods int) []error {
	var errs []error
	if maxPods < 0 {
		errs = append(errs, errors.New("--max-pods must not be negative"))
	}
	limit, from := maxPods, "--max-pods"
	if maxPods == 0 {
		limit, from = kubeletDefaultMaxPods, "kubelet's default maxPods"
	}
	if maxPods >= 0 && pods > limit {
		errs = append(errs, fmt.Errorf("--pods %d is more than %s (%d): raise --max-pods", pods, from, limit))
	}
	if pods > subnetPodAddresses {
		errs = append(errs, fmt.Errorf("--pods %d is more than the %d addresses of %s", pods, subnetPodAddresses, subnetCIDR))
	}
	return errs
}

// columns are the modes this bench runs: netshim's, and the containerd
// peer when asked for.
func (o options) columns() []mode { return columns(o.modes.all(), o.containerdBinDir != "") }

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "netshim-kubelet-bench: %v\n", err)
		os.Exit(2)
	}
	keepInheritedFilesToSelf("/proc/self/fd")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The handler stays until the world is torn down: a second signal
	// must not kill the bench half-way through its cleanup.
	err = benchmark(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "netshim-kubelet-bench: %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		os.Exit(1)
	}
}

// benchmark sets up the world, runs the schedule, tears the world down and
// prints the report; it fails if a run failed or the teardown left
// something.
func benchmark(ctx context.Context, o options) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("must run as root (it runs dockerd, kubelet and a CNI bridge)")
	}
	w, err := newWorld(o)
	defer func() {
		if terr := w.tearDown(); terr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", terr))
		}
	}()
	if err != nil {
		return err
	}
	if err := w.setUp(ctx); err != nil {
		return err
	}
	rep := newReport(o, w.describe())
	var failed []string
	for _, r := range schedule(o.columns(), o.rounds) {
		if ctx.Err() != nil {
			break
		}
		fmt.Printf("==> %s\n", r)
		res := w.measure(ctx, r)
		rep.add(res)
		if res.err != nil {
			fmt.Fprintf(os.Stderr, "run %s failed: %v\n", r, res.err)
			failed = append(failed, r.String())
		} else {
			fmt.Printf("    %s\n", res.summary())
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	md := rep.markdown()
	fmt.Println()
	fmt.Print(md)
	if o.out != "" {
		if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", o.out, err)
		}
	}
	for _, line := range rep.netshimCPULines() {
		fmt.Println(line)
	}
	if len(failed) > 0 {
		return fmt.Errorf("runs failed: %s", strings.Join(failed, "; "))
	}
	return nil
}

// keepInheritedFilesToSelf marks the descriptors the bench inherited
// beyond stdin, stdout and stderr close-on-exec. Go's exec closes only the
// descriptors Go opened: an inherited one, such as the machine's lock that
// `flock /tmp/netshim-docker.lock make bench-kubelet` hands down, would
// otherwise stay open in every daemon the bench starts (dockerd, its
// containerd, the containerd peer), so that a bench killed while they run
// left the lock held by them, and the next bench, which cleans them up,
// waiting for it forever. The bench itself keeps the lock until it exits.
func keepInheritedFilesToSelf(fdDir string) {
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
