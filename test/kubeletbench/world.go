package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/metrics"
	"github.com/netshim/netshim/pkg/podns"
	"github.com/netshim/netshim/test/harness"
)

// world is what every run shares: the host guard, the temp dir, the
// private dockerd with the images. Each run adds its own netshim and
// kubelet (measure).
type world struct {
	o       options
	guard   *harness.HostGuard
	tmp     string
	ipamDir string
	dockerd *harness.Dockerd
	procs   procFS
	// imagesTar holds the images saved from the private dockerd, for
	// each containerd run to import ("" without the containerd peer).
	imagesTar string
}

func newWorld(o options) (*world, error) {
	w := &world{o: o, procs: procFS{root: "/proc"}}
	g, err := harness.NewHostGuard(o.state, harness.WithGuardLog(func(f string, a ...any) {
		fmt.Printf("bench-kubelet: "+f+"\n", a...)
	}))
	if err != nil {
		return w, fmt.Errorf("cleaning up after an earlier run: %w", err)
	}
	w.guard = g
	return w, nil
}

// setUp checks the host, records what the world will change and starts
// the private dockerd with the images.
func (w *world) setUp(ctx context.Context) error {
	if err := preflight(); err != nil {
		return err
	}
	if w.o.containerdBinDir != "" {
		if err := checkNoHostImports(hostContainerdImports); err != nil {
			return err
		}
	}
	var err error
	if w.tmp, err = os.MkdirTemp("", "nskbench."); err != nil {
		return err
	}
	w.ipamDir = filepath.Join(w.tmp, "ipam")
	if err := errors.Join(
		w.guard.RecordTempDir(w.tmp),
		w.guard.WatchLink(bridgeName),
		w.guard.WatchCNIRules(networkName, subnetCIDR),
		w.guard.RemoveAtRestore(filepath.Join(harness.KubeletContainerLogsDir, "*_"+namespace+"_*.log")),
	); err != nil {
		return err
	}
	if w.o.artifacts != "" {
		if err := os.MkdirAll(w.o.artifacts, 0o755); err != nil {
			return err
		}
	}
	fmt.Println("==> private dockerd with the host engine's images")
	if err := ctx.Err(); err != nil {
		return err
	}
	// netshim's OCI wrapper is registered only when asked for (the
	// harness would also take it from $NETSHIM_OCI_BIN or beside
	// $NETSHIM_BIN): it decides what --sandbox-netns=auto does.
	dopts := []harness.DockerdOption{harness.WithImages(w.o.pauseImage, w.o.image), harness.WithoutOCIWrapper()}
	if w.o.netshimOCI != "" {
		dopts = append(dopts, harness.WithRuntime(harness.OCIWrapperRuntime, w.o.netshimOCI))
	}
	w.dockerd = harness.NewDockerd(filepath.Join(w.tmp, "docker"), dopts...)
	if err := os.MkdirAll(w.dockerd.Dir, 0o755); err != nil {
		return err
	}
	if err := w.dockerd.Start(); err != nil {
		return err
	}
	if err := w.guard.RecordProcess("dockerd", w.dockerdPid(), w.tmp); err != nil {
		return err
	}
	if err := w.dockerd.LoadImages(); err != nil {
		return err
	}
	if w.o.containerdBinDir == "" {
		return nil
	}
	// The containerd peer runs the very images netshim's runs do.
	w.imagesTar = filepath.Join(w.tmp, "images.tar")
	if out, err := w.dockerd.Docker("save", "-o", w.imagesTar, w.o.pauseImage, w.o.image); err != nil {
		return fmt.Errorf("docker save of the images for containerd: %w\n%s", err, out)
	}
	return nil
}

// preflight refuses to run where the world would collide with the host: a
// route into the test's subnet, or its bridge already there.
func preflight() error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridgeName)); err == nil {
		return fmt.Errorf("bridge %s exists already (another run? `ip link del %s` if none)", bridgeName, bridgeName)
	}
	overlap, err := harness.RoutesOverlapping(subnetCIDR)
	if err != nil {
		return err
	}
	if len(overlap) > 0 {
		return fmt.Errorf("%s, which the bench needs, overlaps a route here: %s", subnetCIDR, strings.Join(overlap, "; "))
	}
	return nil
}

// dockerdPid is the private dockerd's pid, from its pid file.
func (w *world) dockerdPid() int {
	data, _ := os.ReadFile(filepath.Join(w.dockerd.Dir, "docker.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if pid <= 1 {
		return 0
	}
	return pid
}

// describe is the set-up's line for the report.
func (w *world) describe() map[string]string {
	d := map[string]string{}
	if v, err := harness.RunCmd(w.o.kubelet, "--version"); err == nil {
		d["kubelet"] = strings.TrimSpace(v)
	}
	if w.dockerd != nil {
		if v, err := w.dockerd.Docker("version", "--format", "{{.Server.Version}} (API {{.Server.APIVersion}})"); err == nil {
			d["docker"] = strings.TrimSpace(v)
		}
	}
	if v, err := harness.RunCmd(w.o.netshim, "version"); err == nil {
		d["netshim"] = strings.TrimSpace(v)
	}
	if dir := w.o.containerdBinDir; dir != "" {
		if v, err := harness.RunCmd(filepath.Join(dir, "containerd"), "--version"); err == nil {
			d["containerd"] = strings.TrimSpace(v)
		}
		if v, err := harness.RunCmd(filepath.Join(dir, "runc"), "--version"); err == nil {
			d["runc"], _, _ = strings.Cut(strings.TrimSpace(v), "\n")
		}
	}
	return d
}

// tearDown stops and removes the private dockerd (with the shims and
// containers it may leave) and restores the host.
func (w *world) tearDown() error {
	fmt.Println("==> teardown")
	var errs []error
	if w.dockerd != nil {
		if w.o.artifacts != "" {
			copyFile(w.dockerd.LogPath(), filepath.Join(w.o.artifacts, "dockerd.log"))
		}
		errs = append(errs, w.dockerd.Remove())
	}
	if w.guard != nil {
		errs = append(errs, w.guard.Restore())
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridgeName)); err == nil {
		errs = append(errs, fmt.Errorf("bridge %s is still there", bridgeName))
	}
	if w.tmp != "" {
		if _, err := os.Stat(w.tmp); err == nil {
			errs = append(errs, fmt.Errorf("%s is still there", w.tmp))
		}
	}
	return errors.Join(errs...)
}

// runWorld is one run's runtime and kubelet.
type runWorld struct {
	dir, staticDir string
	rt             runtimeUnderTest
	kubelet        *harness.Kubelet
	manifests      []string
	artifacts      string
}

// startRun starts this run's runtime (netshim with the mode's flags, or
// containerd) and kubelet on it.
func (w *world) startRun(ctx context.Context, r run, rw *runWorld) error {
	rw.dir = filepath.Join(w.tmp, fmt.Sprintf("%s-r%d", r.mode.name, r.round))
	rw.staticDir = filepath.Join(rw.dir, "manifests")
	if w.o.artifacts != "" {
		rw.artifacts = filepath.Join(w.o.artifacts, fmt.Sprintf("%s-r%d", r.mode.name, r.round))
		if err := os.MkdirAll(rw.artifacts, 0o755); err != nil {
			return err
		}
	}
	rt := w.newRuntime(r.mode, rw.dir)
	rw.rt = rt
	if err := rt.start(ctx); err != nil {
		return err
	}
	return w.startKubelet(ctx, rw)
}

// startKubelet starts the run's kubelet on its runtime: the same options
// whatever the runtime (the harness gives --node-ip by default).
func (w *world) startKubelet(ctx context.Context, rw *runWorld) error {
	sync := w.o.syncFrequency.String()
	var err error
	rw.kubelet, err = harness.NewKubelet(
		harness.WithKubeletBinary(w.o.kubelet),
		harness.WithRuntimeEndpoint(rw.rt.endpoint()),
		harness.WithKubeletDir(filepath.Join(rw.dir, "kubelet")),
		harness.WithStaticPodPath(rw.staticDir),
		harness.WithNodeName(nodeName),
		harness.WithKubeletPorts(w.o.kubeletPort, w.o.healthzPort),
		harness.WithPodLogsDir(filepath.Join(rw.dir, "pods")),
		harness.WithKubeletVerbosity(w.o.kubeletV),
		harness.WithHostGuard(w.guard),
		harness.WithKubeletConfig(func(cfg map[string]any) { kubeletConfigEdits(cfg, sync, w.o.maxPods) }),
	)
	if err != nil {
		return err
	}
	kctx, kcancel := context.WithTimeout(ctx, harness.KubeletStartTimeout+5*time.Second)
	defer kcancel()
	return rw.kubelet.Start(kctx)
}

// kubeletConfigEdits are the bench's changes to the harness's kubelet
// config: syncFrequency, and maxPods when --max-pods is given (0 leaves
// kubelet's default, 110).
func kubeletConfigEdits(cfg map[string]any, syncFrequency string, maxPods int) {
	cfg["syncFrequency"] = syncFrequency
	if maxPods > 0 {
		cfg["maxPods"] = maxPods
	}
}

// stopRun removes what is left of the run's pods (after a failure: the
// manifests, then through the runtime), stops kubelet and the runtime,
// keeps their logs, checks that the run left nothing behind and removes
// the run's dir.
func (w *world) stopRun(rw *runWorld) error {
	var errs []error
	errs = append(errs, removeManifests(rw.manifests))
	if rw.kubelet != nil {
		errs = append(errs, rw.kubelet.Stop())
		if rw.artifacts != "" {
			copyFile(rw.kubelet.LogPath, filepath.Join(rw.artifacts, "kubelet.log"))
		}
	}
	if rw.rt != nil {
		errs = append(errs, rw.rt.stop(rw.artifacts))
	}
	errs = append(errs, removeRunDir(rw.dir))
	return errors.Join(errs...)
}

// audit checks that no pod of a netshim run left anything: containers in the
// private engine (all of its containers are the bench's), checkpoints in
// netshim's root, pinned network namespaces in its netns dir, IPs in
// host-local's store, veths on the bridge, the portmap and firewall
// plugins' rules.
func (w *world) audit(netshimRoot, netnsDir string) error {
	var leaks []string
	if out, err := w.dockerd.Docker("ps", "-aq"); err != nil {
		leaks = append(leaks, fmt.Sprintf("docker ps: %v", err))
	} else if ids := strings.Fields(out); len(ids) > 0 {
		leaks = append(leaks, fmt.Sprintf("%d container(s) left in the private engine", len(ids)))
	}
	if cps, _ := os.ReadDir(filepath.Join(netshimRoot, "sandbox")); len(cps) > 0 {
		leaks = append(leaks, fmt.Sprintf("%d checkpoint(s) left in %s/sandbox", len(cps), netshimRoot))
	}
	// Pinner.List leaves out netshim's key (podns.KeyFile), which stays.
	if nss, _ := podns.NewPinner(netnsDir).List(); len(nss) > 0 {
		leaks = append(leaks, fmt.Sprintf("%d pinned netns left in %s", len(nss), netnsDir))
	}
	return leakError(append(leaks, w.networkLeaks()...))
}

// networkLeaks are what the run's pods left of their network, whatever
// the runtime: IPs in host-local's store, veths on the bridge, the
// portmap and firewall plugins' rules.
func (w *world) networkLeaks() []string {
	var leaks []string
	_, subnet, _ := net.ParseCIDR(subnetCIDR)
	entries, _ := os.ReadDir(filepath.Join(w.ipamDir, networkName))
	for _, e := range entries {
		if ip := net.ParseIP(e.Name()); ip != nil && subnet.Contains(ip) {
			leaks = append(leaks, "host-local still holds "+e.Name())
		}
	}
	if ports, _ := os.ReadDir(filepath.Join("/sys/class/net", bridgeName, "brif")); len(ports) > 0 {
		leaks = append(leaks, fmt.Sprintf("%d veth(s) left on %s", len(ports), bridgeName))
	}
	if rules, err := harness.CNIRulesLeft(networkName, subnetCIDR); err != nil {
		leaks = append(leaks, fmt.Sprintf("listing CNI rules: %v", err))
	} else if len(rules) > 0 {
		leaks = append(leaks, fmt.Sprintf("CNI rules left: %s", strings.Join(rules, "; ")))
	}
	return leaks
}

// leakError is the audit's error, nil when nothing leaked.
func leakError(leaks []string) error {
	if len(leaks) > 0 {
		return fmt.Errorf("leak audit: %s", strings.Join(leaks, "; "))
	}
	return nil
}

// measure is one run: start the runtime and kubelet, drop the manifests,
// wait for the pods, hold, remove the manifests, wait for the pods to go,
// stop.
func (w *world) measure(ctx context.Context, r run) (res result) {
	res.run = r
	var rw runWorld
	defer func() {
		if err := w.stopRun(&rw); err != nil {
			res.err = errors.Join(res.err, fmt.Errorf("cleanup: %w", err))
		}
	}()
	if err := w.startRun(ctx, r, &rw); err != nil {
		res.err = err
		return res
	}
	rt := rw.rt.runtimeClient()
	st := rw.rt.stack(rw.kubelet.Pid())

	// Drop -> all running.
	start := time.Now()
	paths, err := writeManifests(rw.staticDir, namespace, w.o.image, w.o.pods)
	rw.manifests = paths
	if err != nil {
		res.err = fmt.Errorf("writing the manifests: %w", err)
		return res
	}
	n := w.o.pods
	res.up, _, err = waitFor(ctx, rt, namespace, start, w.o.upTimeout, 200*time.Millisecond, func(v podView) bool {
		return v.ready == n && v.running == n
	})
	if err != nil {
		res.err = fmt.Errorf("pods up: %w", err)
		return res
	}
	w.measureStarted(ctx, rt, start, &res)
	fmt.Printf("    %d pods running after %s; settling %s\n", n, res.up.Round(10*time.Millisecond), w.o.settle)
	if err := sleepCtx(ctx, w.o.settle); err != nil {
		res.err = err
		return res
	}

	// The hold.
	if err := w.hold(ctx, rt, st, rw, &res); err != nil {
		res.err = fmt.Errorf("hold: %w", err)
		return res
	}

	// Manifests gone -> all stopped -> all removed.
	start = time.Now()
	if err := removeManifests(rw.manifests); err != nil {
		res.err = err
		return res
	}
	res.stopped, _, err = waitFor(ctx, rt, namespace, start, w.o.downTimeout, 200*time.Millisecond, func(v podView) bool {
		return v.ready == 0 && v.running == 0
	})
	if err != nil {
		res.err = fmt.Errorf("pods stopping: %w", err)
		return res
	}
	res.gone, _, err = waitFor(ctx, rt, namespace, start, w.o.downTimeout, 500*time.Millisecond, func(v podView) bool {
		return v.sandboxes == 0 && v.containers == 0
	})
	if err != nil {
		res.err = fmt.Errorf("pods going: %w", err)
	}
	return res
}

// measureStarted reads, once all run, when each pod's container started
// (its CRI StartedAt) after the drop: the p50 and p99 over the pods. A
// failure is a note, not the run's: the other figures stand.
func (w *world) measureStarted(ctx context.Context, rt runtimeapi.RuntimeServiceClient, drop time.Time, res *result) {
	started, err := startedAfter(ctx, rt, namespace, drop)
	if err != nil {
		res.notes = append(res.notes, fmt.Sprintf("containers' StartedAt: %v", err))
		return
	}
	res.startedP50, res.startedOK = percentile(started, 50)
	res.startedP99, _ = percentile(started, 99)
}

// hold samples the stack's CPU and kubelet's metrics, waits the hold with
// nothing changing (taking a CPU profile of netshim meanwhile if asked),
// samples again and measures memory.
func (w *world) hold(ctx context.Context, rt runtimeapi.RuntimeServiceClient, st stack, rw runWorld, res *result) error {
	nsURL := rw.rt.netshimURL()
	before, err := viewPods(ctx, rt, namespace)
	if err != nil {
		return err
	}
	k0, n0, err := scrapeBoth(ctx, rw.kubelet.URL(), nsURL)
	if err != nil {
		return err
	}
	c0, err := st.sampleCPU(w.procs)
	if err != nil {
		return err
	}
	t0 := time.Now()
	fmt.Printf("    holding %s\n", w.o.hold)
	profDone := make(chan error, 1)
	prof := w.o.profile && nsURL != "" // pprof is netshim's
	if prof {
		go func() { profDone <- w.profile(ctx, filepath.Join(rw.artifacts, "netshim.cpu.pprof")) }()
	} else {
		profDone <- nil
	}
	if err := sleepCtx(ctx, w.o.hold); err != nil {
		return err
	}
	c1, err := st.sampleCPU(w.procs)
	if err != nil {
		return err
	}
	res.holdWall = time.Since(t0)
	k1, n1, err := scrapeBoth(ctx, rw.kubelet.URL(), nsURL)
	if err != nil {
		return err
	}
	if res.pss, err = st.samplePSS(w.procs); err != nil {
		return err
	}
	if prof {
		// The heap as the PSS was taken: what netshim's share of it holds.
		if err := w.fetchPprof(ctx, "heap", filepath.Join(rw.artifacts, "netshim.heap.pprof")); err != nil {
			res.notes = append(res.notes, fmt.Sprintf("heap profile: %v", err))
		}
	}
	var gone int
	res.cpu, gone = cpuBetween(c0, c1)
	if gone > 0 {
		res.notes = append(res.notes, fmt.Sprintf("%d stack process(es) exited during the hold (their CPU is not counted)", gone))
	}
	res.pleg, res.plegOK = plegMean(k0, k1)
	if nsURL != "" {
		res.rpcs = countsBetween(n0, n1, netshimRPCs)
		res.dockerCalls = countsBetween(n0, n1, netshimDockerCalls)
	}
	after, err := viewPods(ctx, rt, namespace)
	if err != nil {
		return err
	}
	if ch := changedDuring(before, after); len(ch) > 0 {
		res.notes = append(res.notes, "pods changed during the hold: "+strings.Join(ch, ", "))
	}
	if err := <-profDone; err != nil {
		res.notes = append(res.notes, fmt.Sprintf("CPU profile: %v", err))
	}
	return nil
}

// scrapeBoth reads kubelet's metrics and netshim's; netshim's are nil
// when netshimURL is "" (the containerd peer's run).
func scrapeBoth(ctx context.Context, kubeletURL, netshimURL string) (kubelet, netshim samples, err error) {
	if kubelet, err = scrape(ctx, kubeletURL+"/metrics", kubeletWanted); err != nil {
		return nil, nil, fmt.Errorf("kubelet's metrics: %w", err)
	}
	if _, ok := kubelet[plegRelistCount]; !ok {
		return nil, nil, fmt.Errorf("kubelet's metrics have no %s", plegRelistCount)
	}
	if netshimURL == "" {
		return kubelet, nil, nil
	}
	if netshim, err = scrape(ctx, netshimURL+"/metrics", netshimWanted); err != nil {
		return nil, nil, fmt.Errorf("netshim's metrics: %w", err)
	}
	return kubelet, netshim, nil
}

// netshimURL is netshim's metrics and pprof endpoint.
func (w *world) netshimURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(w.o.metricsPort))
}

// profile saves a CPU profile of netshim over the hold. netshim samples
// for at most metrics.MaxProfileDuration per request, so a longer hold is
// profiled in windows one after the other, merged into one profile.
func (w *world) profile(ctx context.Context, path string) error {
	windows := int((w.o.hold + metrics.MaxProfileDuration - 1) / metrics.MaxProfileDuration)
	ctx, cancel := context.WithTimeout(ctx, w.o.hold+time.Duration(windows)*30*time.Second)
	defer cancel()
	var parts []*profile.Profile
	for left := w.o.hold; left >= time.Second; {
		secs := int(min(left, metrics.MaxProfileDuration) / time.Second)
		var buf bytes.Buffer
		if err := w.fetchPprofTo(ctx, fmt.Sprintf("profile?seconds=%d", secs), &buf); err != nil {
			return err
		}
		p, err := profile.Parse(&buf)
		if err != nil {
			return fmt.Errorf("parsing netshim's CPU profile: %w", err)
		}
		parts = append(parts, p)
		left -= time.Duration(secs) * time.Second
	}
	merged, err := profile.Merge(parts)
	if err != nil {
		return fmt.Errorf("merging netshim's CPU profiles: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := merged.Write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fetchPprof saves netshim's /debug/pprof/<what> to path.
func (w *world) fetchPprof(ctx context.Context, what, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := w.fetchPprofTo(ctx, what, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fetchPprofTo copies netshim's /debug/pprof/<what> to dst.
func (w *world) fetchPprofTo(ctx context.Context, what string, dst io.Writer) error {
	url := fmt.Sprintf("%s/debug/pprof/%s", w.netshimURL(), what)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	_, err = io.Copy(dst, resp.Body)
	return err
}

// sleepCtx waits d, or less if ctx ends (then its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func copyFile(src, dst string) {
	data, err := os.ReadFile(src)
	if err != nil {
		return
	}
	_ = os.WriteFile(dst, data, 0o644)
}
