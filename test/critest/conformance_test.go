//go:build critest

package critest

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

const (
	// bridge and subnet are the run's own CNI network.
	bridge = "nsconf0"
	subnet = "10.125.0.0/16"
	// lockPath: one run at a time on this machine; the registry port, the
	// bridge and the host ports critest uses (12000-12003) are
	// machine-wide, and a run cleans what earlier runs left.
	lockPath = "/run/netshim-conformance.lock"
	// runTmp holds the runs' temp dirs (runDirPattern).
	runTmp = "/tmp"
	// ginkgoTimeout bounds critest's suite; critestDeadline, a little
	// longer, is when the test stops critest itself.
	ginkgoTimeout   = 45 * time.Minute
	critestDeadline = ginkgoTimeout + 5*time.Minute
	// critestStopDelay is how long critest gets to wind up after SIGTERM.
	critestStopDelay = 10 * time.Second
	// cleanupRPC bounds each CRI call of the cleanup.
	cleanupRPC = time.Minute
)

// final is the run's counts, printed by TestMain as the very last line,
// after every cleanup has run and said what it did.
var final *Counts

func TestMain(m *testing.M) {
	code := m.Run()
	if final != nil {
		fmt.Println(final.String())
	}
	os.Exit(code)
}

func logf(format string, args ...any) { fmt.Printf("conformance: "+format+"\n", args...) }

func warnf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "conformance: "+format+"\n", args...)
}

// config is the run's settings, from the environment hack/conformance.sh
// sets and the test binary's arguments after "--" (extra critest flags).
type config struct {
	root, out    string
	critest      string
	engine       string
	privileged   string
	registryPort int
	pauseImage   string
	netshimFlags []string
	critestArgs  []string
	// wantFocused is CRITEST_WANT_PASSED: the passed specs a run with
	// critestArgs must reach.
	wantFocused string
}

// wantPassed is the floor of passed specs for this run: the engine's for
// a full run (WantPassed), or CRITEST_WANT_PASSED for a run of some specs
// (make conformance-userns), which must give one.
func (c config) wantPassed() (int, bool) {
	if c.wantFocused != "" {
		n, err := strconv.Atoi(c.wantFocused)
		if err != nil || n <= 0 {
			return 1 << 30, true // a floor no run reaches: a typo fails the run
		}
		return n, true
	}
	if len(c.critestArgs) > 0 {
		return 0, false
	}
	return WantPassed(c.engine, c.privileged)
}

func loadConfig(t *testing.T) config {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c := config{
		root:        root,
		out:         filepath.Join(root, "_output"),
		critest:     os.Getenv("CRITEST_BIN"),
		engine:      envOr("ENGINE", "docker20"),
		privileged:  os.Getenv("PRIVILEGED"),
		pauseImage:  envOr("PAUSE_IMAGE", harness.DefaultPauseImage),
		critestArgs: flag.Args(),
		wantFocused: os.Getenv("CRITEST_WANT_PASSED"),
	}
	if c.critest == "" {
		c.critest = filepath.Join(c.out, "critest")
	}
	if st, err := os.Stat(c.critest); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("CRITEST_BIN=%s is not an executable (hack/build-crictl.sh critest builds it): %v", c.critest, err)
	}
	port, err := strconv.Atoi(envOr("REGISTRY_PORT", "5000"))
	if err != nil || port < 1 || port > 65535 {
		t.Fatalf("REGISTRY_PORT=%s: want a port number", os.Getenv("REGISTRY_PORT"))
	}
	c.registryPort = port
	c.netshimFlags = strings.Fields(os.Getenv("NETSHIM_FLAGS"))
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// rel is path relative to the checkout, for messages.
func (c config) rel(path string) string {
	if r, err := filepath.Rel(c.root, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// takeLock holds the run's lock until the test ends. hack/conformance.sh
// takes it itself (its builds and engine start are part of the run) and
// passes the descriptor in CONFORMANCE_LOCK_FD: locking that same open
// file again succeeds, and proves it is the lock.
func takeLock(t *testing.T) {
	t.Helper()
	if s := os.Getenv("CONFORMANCE_LOCK_FD"); s != "" {
		fd, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("CONFORMANCE_LOCK_FD=%s: not a descriptor", s)
		}
		if target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err != nil || target != lockPath {
			t.Fatalf("CONFORMANCE_LOCK_FD=%d is not %s (%q, %v)", fd, lockPath, target, err)
		}
		if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			t.Fatalf("another conformance run holds %s: %v", lockPath, err)
		}
		return
	}
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("another conformance run holds %s: %v", lockPath, err)
	}
}

// checkSkips fails the test unless every skip names exactly one spec of
// this critest: a dry run focused on the skips must select all of them.
func checkSkips(t *testing.T, c config, skips []Skip) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	args := append([]string{"-ginkgo.dry-run", "-ginkgo.no-color"}, focusArgs(skips)...)
	cmd := exec.CommandContext(ctx, c.critest, args...)
	// critest writes nothing of its own in a dry run, but runs from a
	// directory nobody minds.
	cmd.Dir = runTmp
	out, _ := cmd.CombinedOutput() // a dry run's status says nothing about the skips
	if err := checkDryRun(string(out), len(skips)); err != nil {
		t.Fatal(err)
	}
}

func critestVersion(c config) string {
	cmd := exec.Command(c.critest, "-version")
	cmd.Dir = runTmp
	out, _ := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "critest version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "(unknown version)"
}

func TestConformance(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("must run as root")
	}
	c := loadConfig(t)
	takeLock(t)
	skips, err := Skips(c.engine, c.privileged)
	if err != nil {
		t.Fatal(err)
	}
	checkSkips(t, c, skips)

	// A Ctrl-C or SIGTERM stops what runs (critest, a push) and lets the
	// cleanups below run; signals during the cleanups are held off until
	// the end (this is registered first, so it runs last).
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	t.Cleanup(stopSignals)
	cli := harness.EngineCLI("")

	tmp, err := os.MkdirTemp(runTmp, "nsconf.")
	if err != nil {
		t.Fatal(err)
	}
	// Searchable by others, as /run/netshim is: a pod with hostUsers:
	// false reaches its image under the netns dir in it.
	if err := os.Chmod(tmp, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeWorld(tmp) })

	if pid, err := harness.StopPackageRegistry(harness.PackageRegistryPidFile); err != nil {
		t.Fatalf("stopping the docker-registry service of the Debian package: %v", err)
	} else if pid != 0 {
		logf("stopped the docker-registry service (PID %d) the Debian package started", pid)
	}

	// The registry, with critest's images, for its -registry-prefix.
	reg, err := harness.NewRegistry(
		harness.WithRegistryPort(c.registryPort),
		harness.WithRegistryDir(filepath.Join(tmp, "registry")),
		harness.WithRegistryLogFile(filepath.Join(c.out, "conformance-registry.log")),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := reg.Close(cctx); err != nil {
			warnf("cleanup: registry: %v", err)
		}
	})
	logf("starting docker-registry on %s", reg.Addr())
	if err := reg.Start(ctx); err != nil {
		t.Fatalf("%v\n(REGISTRY_PORT picks another port than %d)", err, c.registryPort)
	}
	list, err := harness.RunCmd(filepath.Join(c.root, "hack", "critest-images.sh"), "list")
	if err != nil {
		t.Fatalf("hack/critest-images.sh list: %v\n%s", err, list)
	}
	images, err := parseImageList(list)
	if err != nil {
		t.Fatal(err)
	}
	if err := pushImages(ctx, reg, cli, images); err != nil {
		t.Fatalf("pushing critest's images to %s: %v", reg.Prefix(), err)
	}
	logf("pushed critest's images to %s", reg.Prefix())

	// What a run killed before its cleanup left (the lock says no run is
	// active): its containers, temp dir and bridge.
	for _, stale := range staleRunDirs(runTmp, tmp) {
		if err := removeLeftoverContainers(cli, stale, logf); err != nil {
			warnf("cleaning %s: %v", stale, err)
		}
		if err := os.RemoveAll(stale); err != nil {
			warnf("cleaning %s: %v", stale, err)
		}
	}
	if err := deleteBridge(); err != nil {
		t.Fatal(err)
	}

	imagesFile := filepath.Join(tmp, "images.yaml")
	if err := writeImagesFile(imagesFile, reg); err != nil {
		t.Fatal(err)
	}

	// After netshim has stopped (cleanups run last-registered first): the
	// containers of the run's pods that netshim did not remove.
	t.Cleanup(func() {
		if _, err := cli.Docker("version", "--format", "{{.Server.Version}}"); err != nil {
			warnf("cleanup: the Docker engine does not answer: leftover containers of the run not checked")
			return
		}
		if err := removeLeftoverContainers(cli, tmp, logf); err != nil {
			warnf("cleanup: %v", err)
		}
	})

	netshimLog := filepath.Join(c.out, "conformance-netshim.log")
	logf("starting netshim on %s (log: %s)", filepath.Join(tmp, "netshim.sock"), c.rel(netshimLog))
	ns := harness.StartNetshim(t,
		harness.WithDir(tmp),
		harness.WithLogFile(netshimLog),
		harness.WithPauseImage(c.pauseImage),
		harness.WithVerbosity(2),
		harness.WithOwnProcessGroup(),
		harness.WithCNIConfig(
			harness.WithBridge(bridge),
			harness.WithSubnets(subnet),
			harness.WithIPAMDataDir(filepath.Join(tmp, "ipam")),
			harness.WithDefaultRoute(),
			harness.WithHairpin(true),
			harness.WithPlugins(map[string]any{"type": "firewall"}),
			harness.WithFileName("10-nsconf.conflist"),
		),
		harness.WithArgs(c.netshimFlags...),
	)
	// Before netshim stops: the pods critest left, removed through netshim
	// so that their CNI attachments are released.
	t.Cleanup(func() { removePods(ns, tmp) })

	logf("skipping %d specs this machine (engine %s) cannot pass:", len(skips), c.engine)
	for _, s := range skips {
		fmt.Printf("  skip: [k8s.io] %s\n        reason: %s\n", s.Spec, s.Reason)
	}
	critestLog := filepath.Join(c.out, "conformance.log")
	logf("running critest %s (full output: %s)", critestVersion(c), c.rel(critestLog))
	args := append([]string{
		"--runtime-endpoint", "unix://" + ns.Sock,
		"--image-endpoint", "unix://" + ns.Sock,
		"--test-images-file", imagesFile,
		"-registry-prefix=" + reg.Prefix(),
		"-ginkgo.no-color", "-ginkgo.v", "-ginkgo.timeout=" + ginkgoTimeout.String(),
	}, skipArgs(skips)...)
	args = append(args, c.critestArgs...)
	start := time.Now()
	output, critestErr := runCritest(ctx, c.critest, tmp, args, critestLog)
	elapsed := time.Since(start)

	fmt.Println()
	for _, l := range summary(output) {
		fmt.Println(l)
	}
	fmt.Println()
	counts, ok := parseCounts(output)
	if !ok {
		t.Fatalf("critest exited (%v) with no ginkgo summary (see %s)", critestErr, c.rel(critestLog))
	}
	logf("critest took %ds; netshim log: %s", int(elapsed.Seconds()), c.rel(netshimLog))
	final = &counts
	if ctx.Err() != nil {
		t.Errorf("interrupted")
	}
	if counts.Failed > 0 || critestErr != nil {
		t.Errorf("critest: %d failed, exit status: %v", counts.Failed, critestErr)
	}
	if want, ok := c.wantPassed(); ok {
		switch {
		case counts.Passed < want:
			t.Errorf("critest: %d passed, fewer than the %d this run passes on %s: specs that passed are now skipped or gone (is a feature no longer advertised?)", counts.Passed, want, c.engine)
		case counts.Passed > want:
			logf("critest: %d passed, more than the %d pinned for %s in test/critest/skips.go: raise it", counts.Passed, want, c.engine)
		}
	}
}

// runCritest runs critest in dir, its output going whole to logPath and,
// one line per finished spec, to stdout; it returns the output and
// critest's exit status. A cancelled ctx sends critest SIGTERM, which
// ginkgo takes as an interrupt: it runs its cleanups and reports.
func runCritest(ctx context.Context, bin, dir string, args []string, logPath string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, critestDeadline)
	defer cancel()
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logFile.Close()
	pr, pw := io.Pipe()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = critestStopDelay
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting %s: %w", bin, err)
	}
	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		done <- err
	}()
	var out strings.Builder
	filter := &specLines{}
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		l := sc.Text()
		out.WriteString(l)
		out.WriteByte('\n')
		fmt.Fprintln(logFile, l)
		if s, ok := filter.line(l); ok {
			fmt.Println(s)
		}
	}
	if err := sc.Err(); err != nil {
		// Drain, so that critest is not blocked on a full pipe.
		_, _ = io.Copy(logFile, pr)
	}
	return out.String(), <-done
}

// writeImagesFile is critest's --test-images-file: the images its specs
// run containers from, by their names in the registry.
func writeImagesFile(path string, reg *harness.Registry) error {
	busybox, err := reg.Name(defaultTestImage)
	if err != nil {
		return err
	}
	nginx, err := reg.Name(webServerImage)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(fmt.Sprintf("defaultTestContainerImage: %s\nwebServerTestImage: %s\n", busybox, nginx)), 0o644)
}

// removePods stops and removes, through netshim, the sandboxes of this
// run critest left behind.
func removePods(ns *harness.Netshim, dir string) {
	cri := ns.CRI()
	if cri == nil {
		return
	}
	for _, id := range runSandboxes(dir) {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupRPC)
		if _, err := cri.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			warnf("cleanup: StopPodSandbox %s: %v", id, err)
		}
		if _, err := cri.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			warnf("cleanup: RemovePodSandbox %s: %v", id, err)
		}
		cancel()
	}
}

// deleteBridge deletes the run's bridge if it exists.
func deleteBridge() error {
	if _, err := net.InterfaceByName(bridge); err != nil {
		return nil
	}
	if out, err := harness.RunCmd("ip", "link", "del", bridge); err != nil {
		return fmt.Errorf("ip link del %s: %w\n%s", bridge, err, out)
	}
	return nil
}

// removeWorld is the last cleanup: the bridge, a warning for the CNI
// plugins' rules of pods that were not torn down, the temp dir.
func removeWorld(tmp string) {
	if err := deleteBridge(); err != nil {
		warnf("cleanup: %v", err)
	}
	prefix := strings.TrimSuffix(subnet, ".0.0/16") + "."
	if out, err := harness.RunCmd("iptables-save"); err == nil && strings.Contains(out, prefix) {
		warnf("warning: iptables rules for %s are left (pods not torn down by netshim)", subnet)
	}
	if err := os.RemoveAll(tmp); err != nil {
		warnf("cleanup: %v", err)
	}
}
