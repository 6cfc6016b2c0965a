//go:build nodeconformance

package nodeconformance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// The fixed things a run uses: one run at a time on a machine (preflight
// refuses to start beside another).
const (
	bridge       = "nsnode0"
	podCIDR      = "10.178.0.0/24"
	registryAddr = "127.0.0.1:5000"
	// registryName is how the images are named: Docker treats localhost
	// registries as insecure (plain HTTP) without configuration.
	registryName = "localhost:5000"
	kubeletRoot  = "/var/lib/kubelet" // the suite's, fixed (services.KubeletRootDirectory)
	podLogsDir   = "/var/log/pods"
	ctrLogsDir   = "/var/log/containers"
)

// kubeletPorts are the ports the suite's kubelet listens on: API,
// read-only (the suite turns it on), healthz.
var kubeletPorts = []int{10250, 10255, 10248}

// env is what the Makefile passes.
type env struct {
	suite   string // e2e_node.test
	binDir  string // --k8s-bin-dir: holds kubelet
	root    string // the checkout (hack/node-e2e-images.sh)
	out     string // report dir
	subset  string // full or quick
	focus   string // NODE_CONFORMANCE_FOCUS: narrows the run further (iterating, shards)
	except  string // NODE_CONFORMANCE_EXCEPT: leaves specs out of the run (shards); not skips
	timeout time.Duration
	ginkgo  string // GINKGO_BIN: the ginkgo CLI, for parallel processes
	procs   int
	// ociRunc is the runc netshim's OCI wrapper execs in the private
	// engine (NODE_CONFORMANCE_OCI_RUNC, runc 1.4.3): the suite's pods with
	// hostUsers: false need one that makes idmapped mounts.
	ociRunc string
}

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func loadEnv(t *testing.T) env {
	t.Helper()
	e := env{
		suite:   os.Getenv("NODE_E2E_BIN"),
		binDir:  os.Getenv("K8S_BIN_DIR"),
		root:    os.Getenv("NETSHIM_ROOT"),
		out:     os.Getenv("NODE_CONFORMANCE_OUT"),
		subset:  getenv("NODE_CONFORMANCE_SUBSET", "full"),
		focus:   os.Getenv("NODE_CONFORMANCE_FOCUS"),
		except:  os.Getenv("NODE_CONFORMANCE_EXCEPT"),
		timeout: 50 * time.Minute,
		ginkgo:  os.Getenv("GINKGO_BIN"),
		procs:   1,
		ociRunc: os.Getenv("NODE_CONFORMANCE_OCI_RUNC"),
	}
	if v := os.Getenv("NODE_CONFORMANCE_PROCS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("NODE_CONFORMANCE_PROCS=%q: want a positive number", v)
		}
		e.procs = n
	}
	if e.procs > 1 && e.ginkgo == "" {
		t.Fatal("NODE_CONFORMANCE_PROCS > 1 needs the ginkgo CLI in GINKGO_BIN")
	}
	if v := os.Getenv("NODE_CONFORMANCE_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("NODE_CONFORMANCE_TIMEOUT=%q: %v", v, err)
		}
		e.timeout = d
	}
	for k, v := range map[string]string{"NODE_E2E_BIN": e.suite, "K8S_BIN_DIR": e.binDir, "NETSHIM_ROOT": e.root, "NODE_CONFORMANCE_OUT": e.out} {
		if v == "" {
			t.Fatalf("%s is not set (run `make node-conformance`)", k)
		}
	}
	if _, err := os.Stat(filepath.Join(e.binDir, "kubelet")); err != nil {
		t.Fatalf("K8S_BIN_DIR=%s holds no kubelet: %v", e.binDir, err)
	}
	for k, v := range map[string]string{"NODE_CONFORMANCE_FOCUS": e.focus, "NODE_CONFORMANCE_EXCEPT": e.except} {
		if _, err := regexp.Compile(v); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	if e.subset != "full" && e.subset != "quick" {
		t.Fatalf("NODE_CONFORMANCE_SUBSET=%q: want full or quick", e.subset)
	}
	if e.subset == "quick" && e.except == "" {
		e.except = QuickExcept
	}
	return e
}

// preflight refuses to start on a host where the run would clash with
// something: a kubelet (ports, pod logs) or a bridge of the same name.
func preflight(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("node conformance needs root")
	}
	for _, p := range append(kubeletPorts, 5000) {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
		if err != nil {
			t.Fatalf("port %d is in use (a kubelet or registry still running?): %v", p, err)
		}
		l.Close()
	}
	for _, d := range []string{podLogsDir, kubeletRoot} {
		files, err := Leftovers(d, 5)
		if err != nil {
			t.Fatalf("looking for another kubelet's files: %v", err)
		}
		if len(files) > 0 {
			t.Fatalf("%s holds files of another kubelet, which the suite's kubelet would take over (remove them first): %s", d, strings.Join(files, " "))
		}
	}
	if _, err := os.Stat("/sys/class/net/" + bridge); err == nil {
		if out, err := harness.RunCmd("ip", "link", "del", bridge); err != nil {
			t.Fatalf("bridge %s is left from an earlier run and cannot be deleted: %v\n%s", bridge, err, out)
		}
	}
}

// guardHost records what the suite's kubelet changes on the host so that
// it is put back after the run, also after a run that was killed.
func guardHost(t *testing.T, out string) {
	t.Helper()
	g := harness.GuardHost(t, filepath.Join(out, "host-state"))
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	check(g.SaveSysctls(harness.KubeletSysctls...))
	// kubelet's QoS cgroups, and those it is told to use for itself and
	// the system (none: see kubeletFlags).
	check(g.WatchCgroups(append(harness.KubeletCgroupNames, "kubelet", "system", "docker-daemon")...))
	if _, err := os.Stat(kubeletRoot); errors.Is(err, os.ErrNotExist) {
		// The suite creates it and kubelet mounts volumes under it.
		check(g.RecordTempDir(kubeletRoot))
	} else {
		check(g.RecordMounts(kubeletRoot))
	}
	check(g.WatchDirs(podLogsDir, ctrLogsDir, "/var/lib/kubelet/device-plugins"))
	check(g.RemoveAtRestore(podLogsDir + "/*"))
	check(g.RemoveAtRestore(ctrLogsDir + "/*"))
	check(g.WatchLink(bridge))
}

// startRegistry runs Debian's docker-registry on registryAddr (the
// harness's Registry) with its storage in dir, until the test ends.
func startRegistry(t *testing.T, dir string) {
	t.Helper()
	r := harness.StartRegistry(t, harness.WithRegistryAddr(registryAddr), harness.WithRegistryDir(dir))
	if r.Prefix() != registryName {
		t.Fatalf("the registry names its images %s, the test images are pushed as %s", r.Prefix(), registryName)
	}
}

// kubeletConfig is the suite's --kubelet-config-file: the suite's own
// defaults (test/e2e_node/jenkins/default-kubelet-config.yaml) and what
// this machine needs.
func kubeletConfig() string {
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /
# This machine runs cgroup v1 only.
failCgroupV1: false
failSwapOn: false
podCIDR: "` + podCIDR + `"
volumeStatsAggPeriod: 10s
fileCheckFrequency: 10s
evictionPressureTransitionPeriod: 30s
# A shared build machine: its disk must not put the node under pressure.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
evictionMinimumReclaim:
  nodefs.available: 1%
serializeImagePulls: false
# Root here lacks CAP_SYS_RESOURCE: kubelet cannot lower its own score.
oomScoreAdj: 0
# No KUBE-* chains of kubelet's own in the host's iptables.
makeIPTablesUtilChains: false
# The test images must stay: the registry is the only source.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`
}

// kubeletFlags override what the suite sets for a kubelet that is not a
// systemd unit: --system-cgroups=/system would move every process of the
// host's root cgroup into a new cgroup, --kubelet-cgroups and
// --runtime-cgroups make more. The empty values leave the host's cgroups
// alone.
var kubeletFlags = "--system-cgroups= --kubelet-cgroups= --runtime-cgroups="

// runtimeclassHandler is the RuntimeClass handler the suite's specs
// expect on the node.
const runtimeclassHandler = "test-handler"

// featureGates are the gates of the suite and of the kubelet it starts:
// the configuration netshim's README asks of a Docker node. Without
// PodAndContainerStatsFromCRI kubelet takes pod network stats and
// /metrics/cadvisor from its cAdvisor, which has had no Docker handler
// since kubelet 1.24 and so knows no pod on this node; with it both come
// from netshim (ListPodSandboxStats, ListPodSandboxMetrics), and the
// suite's cAdvisor-only spec (ContainerMetrics) skips itself.
const featureGates = "PodAndContainerStatsFromCRI=true"

func TestNodeConformance(t *testing.T) {
	// Registered first, so it runs last: the failures are then the end
	// of the output, after the logs other cleanups show, which is the
	// part of a CI log one sees.
	var failures []string
	t.Cleanup(func() {
		if t.Failed() && len(failures) > 0 {
			t.Logf("node conformance: the specs that failed (their logs: e2e_node.log above):\n%s", strings.Join(failures, "\n"))
		}
	})
	e := loadEnv(t)
	preflight(t)
	if err := os.MkdirAll(e.out, 0o755); err != nil {
		t.Fatal(err)
	}
	guardHost(t, e.out)
	work, err := os.MkdirTemp("", "nsnode")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	// Searchable by others, as /run/netshim and /var/lib/kubelet's
	// parents are: a pod with hostUsers: false reaches its image and
	// volumes under them.
	if err := os.Chmod(work, 0o711); err != nil {
		t.Fatal(err)
	}

	t.Log("starting the loopback registry and pushing the test images")
	startRegistry(t, work)
	if out, err := harness.RunCmd(filepath.Join(e.root, "hack/node-e2e-images.sh"), "push", registryName); err != nil {
		t.Fatalf("pushing the test images: %v\n%s", err, out)
	}
	repoList := filepath.Join(work, "repo-list.yaml")
	out, err := harness.RunCmd(filepath.Join(e.root, "hack/node-e2e-images.sh"), "repo-list", registryName)
	if err != nil {
		t.Fatalf("repo list: %v\n%s", err, out)
	}
	if err := os.WriteFile(repoList, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Log("starting the private dockerd and netshim")
	// The RuntimeClass specs (PodOverhead among them) run pods with the
	// handler the suite expects every test node to have configured,
	// "test-handler" (e2eruntimeclass.PreconfiguredRuntimeClassHandler;
	// Kubernetes' node e2e images configure it in containerd): here a
	// Docker runtime of that name, the engine's runc.
	if e.ociRunc == "" {
		t.Fatal("NODE_CONFORMANCE_OCI_RUNC is not set: the suite's pods with hostUsers: false need a runc that makes idmapped mounts behind netshim's OCI wrapper (make node-conformance sets runc 1.4.3)")
	}
	dockerd := harness.StartPrivateDockerd(t, harness.WithImages(harness.DefaultPauseImage),
		harness.WithRuntime(runtimeclassHandler, ""), harness.WithOCIWrapperRunc(e.ociRunc))
	ns := harness.StartNetshim(t,
		harness.WithDockerEndpoint(dockerd.Endpoint()),
		harness.WithCNIConfig(
			harness.WithBridge(bridge),
			harness.WithSubnets(podCIDR),
			harness.WithIPAMDataDir(filepath.Join(work, "ipam")),
			harness.WithDefaultRoute(),
			// Docker's FORWARD policy is DROP here: pod-to-pod traffic
			// needs the firewall plugin's ACCEPT rules.
			harness.WithPlugins(map[string]any{"type": "firewall"}),
		),
		harness.WithLogFile(filepath.Join(e.out, "netshim.log")),
		harness.WithOwnProcessGroup(),
	)
	// Runs before netshim stops: every pod the suite left goes through
	// netshim, so that CNI DEL removes its iptables rules and IP.
	t.Cleanup(func() { removeAllPods(t, ns) })

	pathDir, err := ShadowPath(filepath.Join(work, "path"), os.Getenv("PATH"), "systemd-run")
	if err != nil {
		t.Fatal(err)
	}
	kcfg := filepath.Join(work, "kubelet-config.yaml")
	if err := os.WriteFile(kcfg, []byte(kubeletConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	reportDir := filepath.Join(e.out, "report")
	_ = os.RemoveAll(reportDir)
	if err := os.MkdirAll(reportDir, 0o755); err != nil {
		t.Fatal(err)
	}
	jsonReport := filepath.Join(reportDir, "report.json")

	focus := []string{`\[NodeConformance\]`}
	if e.subset == "quick" {
		focus = QuickFocus
	}
	if e.focus != "" {
		focus = []string{e.focus}
	}
	skips := SkipList
	ep := "unix://" + ns.Sock
	suiteArgs := []string{
		"--container-runtime-endpoint=" + ep,
		"--image-service-endpoint=" + ep,
		"--k8s-bin-dir=" + e.binDir,
		"--kubelet-config-file=" + kcfg,
		"--kubelet-flags=" + kubeletFlags,
		"--feature-gates=" + featureGates,
		// The suite's pre-pull takes every image of its list, several of
		// which cannot be made here (hack/node-e2e-images.sh blocked): the
		// specs pull what they use from the loopback registry instead.
		"--prepull-images=false",
		"--report-dir=" + reportDir,
	}
	ginkgoArgs := []string{
		"json-report=" + jsonReport,
		"no-color",
		"timeout=" + e.timeout.String(),
		"focus=" + strings.Join(focus, "|"),
	}
	for _, s := range skips {
		ginkgoArgs = append(ginkgoArgs, "skip="+s.Pattern)
	}
	if e.except != "" {
		ginkgoArgs = append(ginkgoArgs, "skip="+e.except)
	}
	if e.subset == "quick" || e.focus != "" {
		// ginkgo ORs focus regexps: the label keeps a narrowed run to the
		// conformance set (the framework labels each spec it tags), and
		// the features netshim has that the set does not test: user
		// namespaces and supplemental groups policies.
		ginkgoArgs = append(ginkgoArgs, "label-filter="+QuickLabels)
	}
	bin, args := e.suite, suiteArgs
	if e.procs > 1 {
		// The ginkgo CLI runs the suite binary in e.procs processes; the
		// first one starts the API server and kubelet for all, and the
		// [Serial] specs run alone at the end.
		bin, args = e.ginkgo, []string{fmt.Sprintf("--procs=%d", e.procs)}
		for _, a := range ginkgoArgs {
			args = append(args, "--"+a)
		}
		args = append(append(args, e.suite, "--"), suiteArgs...)
	} else {
		for _, a := range ginkgoArgs {
			args = append(args, "--ginkgo."+a)
		}
	}
	logPath := filepath.Join(e.out, "e2e_node.log")
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout+5*time.Minute)
	defer cancel()
	t.Logf("running %s (log: %s)", filepath.Base(e.suite), logPath)
	// PATH: the suite's own; SIGTERM on a timeout stops its kubelet and
	// API server.
	wall, runErr := RunSuite(ctx, work, logPath, []string{"PATH=" + pathDir, "KUBE_TEST_REPO_LIST=" + repoList}, bin, args...)
	specs, err := ReadReport(jsonReport, logPath, runErr)
	if err != nil {
		t.Fatal(err)
	}
	var focusRE *regexp.Regexp
	if e.subset == "quick" || e.focus != "" {
		focusRE = regexp.MustCompile(strings.Join(focus, "|"))
	}
	if e.except != "" {
		// Specs left out of this run are not counted at all.
		exceptRE := regexp.MustCompile(e.except)
		kept := specs[:0]
		for _, sp := range specs {
			if sp.NodeType != "It" || !exceptRE.MatchString(sp.Name) {
				kept = append(kept, sp)
			}
		}
		specs = kept
	}
	var also []string
	if e.subset == "quick" || e.focus != "" {
		also = QuickFeatureTags // the features QuickLabels adds
	}
	tally, err := ClassifyTagged(specs, ConformanceTag, focusRE, skips, also...)
	if err != nil {
		t.Fatal(err)
	}
	lines := tally.Lines()
	for _, l := range lines {
		if strings.HasPrefix(l, "FAIL ") {
			failures = append(failures, l)
		}
	}
	if e.focus == "" && e.except == "" {
		for _, s := range tally.UnusedSkips {
			lines = append(lines, fmt.Sprintf("NOTE skip list entry %q matched no spec of this run", s.Pattern))
		}
	}
	p, fl, s := tally.Counts()
	lines = append(lines, fmt.Sprintf("node-conformance (%s): %d specs, wall time %s", e.subset, p+fl+s, wall.Round(time.Second)))
	lines = append(lines, tally.SummaryLine())
	text := strings.Join(lines, "\n") + "\n"
	fmt.Print(text)
	if err := os.WriteFile(filepath.Join(e.out, "results.txt"), []byte(text), 0o644); err != nil {
		t.Error(err)
	}
	if fl > 0 {
		t.Errorf("%d failure(s) outside the skip list (suite exit: %v); log: %s", fl, runErr, logPath)
	}
}

// removeAllPods stops and removes every sandbox netshim knows.
func removeAllPods(t *testing.T, ns *harness.Netshim) {
	cri := ns.CRI()
	if cri == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Logf("cleanup: ListPodSandbox: %v", err)
		return
	}
	for _, p := range resp.Items {
		if _, err := cri.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Logf("cleanup: StopPodSandbox %s: %v", p.Id, err)
		}
		if _, err := cri.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Logf("cleanup: RemovePodSandbox %s: %v", p.Id, err)
		}
	}
}
