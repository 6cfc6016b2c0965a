//go:build kubelet

package e2ekubelet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/netshim/netshim/test/harness"
)

// The world's fixed names and addresses: a run holds the lock that
// serialises them (hack/e2e-kubelet.sh and the Docker lock around it).
const (
	bridgeName     = "nskub0"
	subnetCIDR     = "10.176.0.0/24"
	gatewayIP      = "10.176.0.1"
	networkName    = "nskub"
	namespaceName  = "netshim-e2e-kubelet"
	nodeName       = "netshim-e2e-node"
	hostPortNumber = 17890
	netshimStop    = 30 * time.Second
)

// world is what TestMain sets up for the checks: a private dockerd with the
// test images, netshim on it with a CNI bridge network, and kubelet
// standalone on netshim. Every piece is undone by tearDown, the host state
// kubelet changes by the guard.
type world struct {
	minor, gates, artifacts string
	podLogsDir              string
	netshimBin, kubeletBin  string
	cniBinDir, pauseImage   string
	busyboxImage            string
	netshimV                int
	// ociRunc is the runc netshim's OCI wrapper execs (E2E_OCI_RUNC, runc
	// 1.4.3): Debian's 1.1.5 makes no idmapped mounts, which the check of
	// a pod with hostUsers: false needs.
	ociRunc string

	tmp     string
	guard   *harness.HostGuard
	dockerd *harness.Dockerd
	netshim *harness.Netshim
	kubelet *harness.Kubelet
	env     *env

	teardownOnce sync.Once
	problems     []string
	summaryOnce  sync.Once
	failed       int
}

// theEnv is the world the checks run in; nil when there is none.
var theEnv *env

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// TestMain sets up the world when hack/e2e-kubelet.sh asks for it (it sets
// KUBELET_BIN), runs the checks, tears the world down and prints the
// summary the script and CI parse: `e2e-kubelet: N passed, N failed`.
// Without KUBELET_BIN the checks skip.
func TestMain(m *testing.M) {
	if os.Getenv("KUBELET_BIN") == "" {
		os.Exit(m.Run())
	}
	os.Exit(runWorld(m))
}

func runWorld(m *testing.M) int {
	w := &world{
		minor:        getenv("E2E_KUBELET_MINOR", "(unknown minor)"),
		gates:        os.Getenv("E2E_KUBELET_FEATURE_GATES"),
		artifacts:    os.Getenv("E2E_KUBELET_ARTIFACTS"),
		podLogsDir:   getenv("E2E_KUBELET_POD_LOGS_DIR", harness.DefaultPodLogsDir),
		netshimBin:   os.Getenv("NETSHIM_BIN"),
		kubeletBin:   os.Getenv("KUBELET_BIN"),
		cniBinDir:    getenv("CNI_BIN_DIR", "/usr/lib/cni"),
		pauseImage:   getenv("PAUSE_IMAGE", harness.DefaultPauseImage),
		busyboxImage: getenv("BUSYBOX_IMAGE", "netshim.local/busybox:latest"),
		ociRunc:      os.Getenv("E2E_OCI_RUNC"),
	}
	var err error
	if w.netshimV, err = strconv.Atoi(getenv("NETSHIM_V", "6")); err != nil {
		fmt.Fprintf(os.Stderr, "e2e-kubelet: NETSHIM_V: %v\n", err)
		return 2
	}
	resultsPath := ""
	if w.artifacts != "" {
		resultsPath = filepath.Join(w.artifacts, "results.txt")
	}

	// A signal (Ctrl-C, the script's SIGTERM) still tears the world down:
	// during the set-up by cancelling it (the main flow then tears down),
	// during the checks from here (they fail as the world goes away).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	checking := false
	var got os.Signal
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s, ok := <-sigs
		if !ok {
			return
		}
		fmt.Fprintf(os.Stderr, "e2e-kubelet: got %v; cleaning up\n", s)
		mu.Lock()
		got = s
		c := checking
		mu.Unlock()
		cancel()
		if c {
			w.tearDown()
			w.summary(resultsPath)
			os.Exit(128 + int(s.(syscall.Signal)))
		}
	}()

	rc := 0
	if err := w.setUp(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e-kubelet: %v\n", err)
		rc = 1
	} else {
		theEnv = w.env
		mu.Lock()
		checking = got == nil
		mu.Unlock()
		if checking {
			fmt.Println("==> checks (test/e2e-kubelet)")
			rc = m.Run()
		}
	}
	w.tearDown()
	if failed := w.summary(resultsPath); failed > 0 && rc == 0 {
		rc = 1
	}
	mu.Lock()
	defer mu.Unlock()
	if got != nil {
		rc = 128 + int(got.(syscall.Signal))
	}
	return rc
}

// setUp builds the world; what it made before a failure is undone by
// tearDown, which runs anyway.
func (w *world) setUp(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return errors.New("must run as root")
	}
	for k, v := range map[string]string{"E2E_KUBELET_ARTIFACTS": w.artifacts, "NETSHIM_BIN": w.netshimBin} {
		if v == "" {
			return fmt.Errorf("%s is not set (hack/e2e-kubelet.sh sets it)", k)
		}
	}
	gates, err := harness.ParseFeatureGates(w.gates)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(w.artifacts, 0o755); err != nil {
		return err
	}

	// Leftovers of a run that died before its cleanup (the caller holds
	// the lock, so no other run owns them).
	state := getenv("E2E_KUBELET_STATE", filepath.Join(filepath.Dir(filepath.Dir(w.artifacts)), "e2e-kubelet.state"))
	g, err := harness.NewHostGuard(state, harness.WithGuardLog(func(f string, a ...any) {
		fmt.Printf("e2e-kubelet: "+f+"\n", a...)
	}))
	if err != nil {
		return err
	}
	w.guard = g
	if err := w.removeLeftovers(); err != nil {
		return err
	}
	if err := w.preflight(); err != nil {
		return err
	}

	if w.tmp, err = os.MkdirTemp("", "nskub."); err != nil {
		return err
	}
	// Searchable by others, as /run/netshim is: a pod with hostUsers:
	// false reaches its image under netshim's netns dir in it.
	if err := os.Chmod(w.tmp, 0o711); err != nil {
		return err
	}
	podLogs := func(ns string) string { return filepath.Join(w.podLogsDir, ns+"_*") }
	if err := errors.Join(
		g.RecordTempDir(w.tmp),
		g.WatchLink(bridgeName),
		g.WatchCNIRules(networkName, subnetCIDR),
		g.RemoveAtRestore(podLogs(namespaceName)),
		g.RemoveAtRestore(filepath.Join(harness.KubeletContainerLogsDir, "*_"+namespaceName+"_*.log")),
	); err != nil {
		return err
	}

	// kubelet first, unstarted: its preflight (ports, device plugin
	// socket, pod logs dir) fails before anything runs.
	staticDir := filepath.Join(w.tmp, "manifests")
	netshimDir := filepath.Join(w.tmp, "netshim")
	ipamDir := filepath.Join(w.tmp, "ipam")
	netshimSock := filepath.Join(netshimDir, "netshim.sock")
	w.kubelet, err = harness.NewKubelet(
		harness.WithKubeletBinary(w.kubeletBin),
		harness.WithRuntimeEndpoint(netshimSock),
		harness.WithKubeletDir(filepath.Join(w.tmp, "kubelet")),
		harness.WithStaticPodPath(staticDir),
		harness.WithNodeName(nodeName),
		harness.WithFeatureGates(gates),
		harness.WithPodLogsDir(w.podLogsDir),
		harness.WithHostGuard(g),
	)
	if err != nil {
		return err
	}
	if err := w.kubelet.Preflight(); err != nil {
		return err
	}

	fmt.Println("==> private dockerd with the host engine's images")
	if err := ctx.Err(); err != nil {
		return err
	}
	if w.ociRunc == "" {
		return errors.New("E2E_OCI_RUNC is not set: the OCI wrapper needs a runc that makes idmapped mounts (hack/e2e-kubelet.sh sets runc 1.4.3)")
	}
	w.dockerd = harness.NewDockerd(filepath.Join(w.tmp, "docker"), harness.WithImages(w.pauseImage, w.busyboxImage), harness.WithOCIWrapperRunc(w.ociRunc))
	if err := os.MkdirAll(w.dockerd.Dir, 0o755); err != nil {
		return err
	}
	if err := w.dockerd.Start(); err != nil {
		return err
	}
	if err := g.RecordProcess("dockerd", w.dockerdPid(), w.tmp); err != nil {
		return err
	}
	if err := w.dockerd.LoadImages(); err != nil {
		return err
	}

	fmt.Printf("==> CNI network %s (bridge %s, %s), netshim\n", networkName, bridgeName, subnetCIDR)
	if err := ctx.Err(); err != nil {
		return err
	}
	w.netshim, err = harness.NewNetshim(
		harness.WithBinary(w.netshimBin),
		harness.WithDir(netshimDir),
		harness.WithDockerEndpoint(w.dockerd.Endpoint()),
		harness.WithCNIBinDir(w.cniBinDir),
		harness.WithPauseImage(w.pauseImage),
		harness.WithVerbosity(w.netshimV),
		harness.WithOwnProcessGroup(),
		harness.WithArgs("--network-plugin", "cni", "--writable-layer-measure-interval", "10s"),
		harness.WithCNIConfig(
			harness.WithNetworkName(networkName),
			harness.WithBridge(bridgeName),
			harness.WithHairpin(false),
			harness.WithIPAM(map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": subnetCIDR, "gateway": gatewayIP}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": ipamDir,
			}),
			harness.WithFirewall(),
		),
	)
	if err != nil {
		return err
	}
	nctx, ncancel := context.WithTimeout(ctx, harness.StartTimeout+5*time.Second)
	defer ncancel()
	err = w.netshim.Start(nctx)
	if pid := w.netshim.Pid(); pid > 0 {
		err = errors.Join(err, g.RecordProcess("netshim", pid, w.tmp))
	}
	if err != nil {
		return fmt.Errorf("%w\n%s", err, w.netshim.LogTail(20))
	}

	version, _ := harness.RunCmd(w.kubeletBin, "--version")
	fmt.Printf("==> kubelet %s standalone (root dir %s), feature gates: %s\n",
		strings.TrimSpace(version), w.kubelet.RootDir(), orDefaults(w.gates))
	if data, err := w.kubelet.ConfigJSON(); err == nil {
		_ = os.WriteFile(filepath.Join(w.artifacts, "kubelet-config.json"), data, 0o644)
	}
	kctx, kcancel := context.WithTimeout(ctx, harness.KubeletStartTimeout+5*time.Second)
	defer kcancel()
	if err := w.kubelet.Start(kctx); err != nil {
		return err
	}

	_, subnet, _ := net.ParseCIDR(subnetCIDR)
	w.env = &env{
		sock:       netshimSock,
		staticDir:  staticDir,
		kubeletURL: w.kubelet.URL(),
		healthzURL: w.kubelet.HealthzURL(),
		namespace:  namespaceName,
		node:       nodeName,
		image:      w.busyboxImage,
		gateway:    gatewayIP,
		subnet:     subnet,
		ipamDir:    filepath.Join(ipamDir, networkName),
		podLogsDir: w.podLogsDir,
		results:    filepath.Join(w.artifacts, "results.txt"),
		artifacts:  w.artifacts,
		hostPort:   hostPortNumber,
		kubelet:    w.kubelet,
		gates:      w.gates,
		criStats:   gates["PodAndContainerStatsFromCRI"],
	}
	return nil
}

func orDefaults(gates string) string {
	if gates == "" {
		return "defaults"
	}
	return gates
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

// removeLeftovers removes what an earlier run of this test left that no
// state file names: its bridge, its pod logs, its log symlinks.
func (w *world) removeLeftovers() error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridgeName)); err == nil {
		fmt.Printf("e2e-kubelet: removing bridge %s left by an earlier run\n", bridgeName)
		if out, err := harness.RunCmd("ip", "link", "del", bridgeName); err != nil {
			return fmt.Errorf("removing bridge %s: %w: %s", bridgeName, err, out)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(w.podLogsDir, namespaceName+"_*"))
	links, _ := filepath.Glob(filepath.Join(harness.KubeletContainerLogsDir, "*_"+namespaceName+"_*.log"))
	for _, d := range dirs {
		fmt.Printf("e2e-kubelet: removing %s left by an earlier run\n", d)
	}
	for _, p := range append(dirs, links...) {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// preflight refuses to run where the world would collide with the host:
// the hostPort taken, or a route to the test's subnet.
func (w *world) preflight() error {
	l, err := net.Listen("tcp", net.JoinHostPort("0.0.0.0", strconv.Itoa(hostPortNumber)))
	if err != nil {
		return fmt.Errorf("port %d, the test pod's hostPort, is in use: %w", hostPortNumber, err)
	}
	l.Close()
	// Routes that contain the subnet (but the default one) or lie in it.
	overlap, err := harness.RoutesOverlapping(subnetCIDR)
	if err != nil {
		return err
	}
	if len(overlap) > 0 {
		return fmt.Errorf("%s, which the test needs, overlaps a route here: %s", subnetCIDR, strings.Join(overlap, "; "))
	}
	return nil
}

// problem records what went wrong in the teardown.
func (w *world) problem(format string, args ...any) {
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

// problemErr records each error joined in err.
func (w *world) problemErr(what string, err error) {
	if err == nil {
		return
	}
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		for _, e := range j.Unwrap() {
			w.problemErr(what, e)
		}
		return
	}
	w.problem("%s: %s", what, strings.ReplaceAll(err.Error(), "\n", " "))
}

// tearDown stops kubelet, removes the pods it left through netshim, stops
// netshim and the private dockerd, keeps their logs, and restores the
// host. It runs once, whoever calls it first (TestMain or a signal).
func (w *world) tearDown() {
	w.teardownOnce.Do(w.doTearDown)
}

func (w *world) doTearDown() {
	fmt.Println("==> cleanup")
	if w.env != nil {
		if ms, _ := filepath.Glob(filepath.Join(w.env.staticDir, "*.yaml")); len(ms) > 0 {
			for _, m := range ms {
				os.Remove(m)
			}
		}
	}
	if w.kubelet != nil {
		w.problemErr("kubelet", w.kubelet.Stop())
		w.copyArtifact(w.kubelet.LogPath, "kubelet.log")
	}
	if w.netshim != nil {
		if w.netshim.Running() {
			ctx, cancel := context.WithTimeout(context.Background(), harness.RPCTimeout)
			if n, err := w.removePods(ctx); err != nil {
				w.problemErr("removing the pods kubelet left", err)
			} else if n > 0 {
				fmt.Printf("e2e-kubelet: removed %d pod(s) kubelet left behind\n", n)
			}
			cancel()
		}
		w.problemErr("netshim", w.netshim.Stop(syscall.SIGTERM))
		w.copyArtifact(w.netshim.LogPath, "netshim.log")
		w.recordRPCs()
	}
	if w.dockerd != nil {
		// Remove deletes the log with the engine's dir: keep it first.
		if out, err := w.dockerd.Docker("ps", "-aq"); err == nil && strings.TrimSpace(out) != "" {
			if out, err := w.dockerd.Docker(append([]string{"rm", "-f"}, strings.Fields(out)...)...); err != nil {
				w.problem("removing the private dockerd's containers: %v: %s", err, strings.TrimSpace(out))
			}
		}
		w.problemErr("private dockerd", w.dockerd.Stop())
		w.copyArtifact(w.dockerd.LogPath(), "dockerd.log")
		w.problemErr("private dockerd", w.dockerd.Remove())
	}
	if w.guard != nil {
		w.problemErr("restoring the host", w.guard.Restore())
	}
	// What must be gone now.
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridgeName)); err == nil {
		w.problem("bridge %s is still there", bridgeName)
	}
	if left, _ := filepath.Glob(filepath.Join(w.podLogsDir, namespaceName+"_*")); len(left) > 0 {
		w.problem("pod logs left in %s: %s", w.podLogsDir, strings.Join(left, " "))
	}
}

// removePods stops and removes every sandbox of the test's namespace
// through netshim, and says how many there were.
func (w *world) removePods(ctx context.Context) (int, error) {
	client := w.netshim.CRI()
	if client == nil {
		return 0, errors.New("netshim is not running")
	}
	sbs, err := (&cri{rt: client.Runtime}).podSandboxes(namespaceName)
	if err != nil || len(sbs) == 0 {
		return 0, err
	}
	return len(sbs), w.netshim.RemovePods(ctx, namespaceName)
}

func (w *world) copyArtifact(src, name string) {
	data, err := os.ReadFile(src)
	if err != nil {
		return
	}
	if err := os.WriteFile(filepath.Join(w.artifacts, name), data, 0o644); err != nil {
		w.problem("keeping %s: %v", name, err)
	}
}

// recordRPCs writes netshim's RPC table to the artifacts and, with
// EventedPLEG, checks that kubelet followed netshim's event stream (which
// netshim logs when the stream ends: kubelet is stopped by now).
func (w *world) recordRPCs() {
	data, err := os.ReadFile(w.netshim.LogPath)
	if err != nil {
		return
	}
	stats := parseRPCs(string(data))
	_ = os.WriteFile(filepath.Join(w.artifacts, "rpcs.txt"), []byte(stats.table()), 0o644)
	gates, _ := harness.ParseFeatureGates(w.gates)
	results := filepath.Join(w.artifacts, "results.txt")
	if !gates["EventedPLEG"] || w.env == nil {
		return
	}
	if fi, err := os.Stat(results); err != nil || fi.Size() == 0 {
		return
	}
	line := "FAIL evented-pleg: kubelet ran with EventedPLEG=true but netshim logged no GetContainerEvents stream"
	if n := stats.mentions["GetContainerEvents"]; n > 0 {
		line = fmt.Sprintf("PASS evented-pleg: kubelet subscribed to GetContainerEvents (%d stream(s)); restart and teardown above ran with EventedPLEG", n)
	}
	appendLine(results, line)
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e-kubelet: %v\n", err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

// summary prints the RPC table, the checks' results, the cleanup's own
// check and the last line, once; it returns how many failed.
func (w *world) summary(resultsPath string) int {
	w.summaryOnce.Do(func() { w.failed = w.printSummary(resultsPath) })
	return w.failed
}

func (w *world) printSummary(resultsPath string) int {
	if w.artifacts != "" {
		if table, err := os.ReadFile(filepath.Join(w.artifacts, "rpcs.txt")); err == nil {
			fmt.Println("==> netshim RPCs during the run: kubelet's, plus the checks' own polling (Version, ListPodSandbox,")
			fmt.Printf("    PodSandboxStatus, ListContainers, ContainerStatus); full log: %s\n", filepath.Join(w.artifacts, "netshim.log"))
			fmt.Print(string(table))
		}
	}
	fmt.Printf("==> results (kubelet %s, feature gates: %s)\n", w.minor, orDefaults(w.gates))
	passed, failed := 0, 0
	var lines []string
	if f, err := os.Open(resultsPath); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		f.Close()
	}
	if len(lines) == 0 {
		line := fmt.Sprintf("FAIL checks: the checks did not run (setup failed; see above and %s/)", w.artifacts)
		lines = append(lines, line)
		if resultsPath != "" {
			appendLine(resultsPath, line)
		}
	}
	cleanup := "PASS cleanup: kubelet, netshim and the private dockerd stopped on SIGTERM; bridge, mounts, kubepods cgroups, pod logs, kubelet's device-plugin dir and the temp dir removed; sysctls restored"
	if len(w.problems) > 0 {
		cleanup = "FAIL cleanup: " + strings.Join(w.problems, "; ")
	}
	if resultsPath != "" {
		appendLine(resultsPath, cleanup)
	}
	for _, l := range append(lines, cleanup) {
		fmt.Println(l)
		switch {
		case strings.HasPrefix(l, "PASS"):
			passed++
		case strings.HasPrefix(l, "FAIL"):
			failed++
		}
	}
	fmt.Printf("e2e-kubelet: %d passed, %d failed\n", passed, failed)
	return failed
}
