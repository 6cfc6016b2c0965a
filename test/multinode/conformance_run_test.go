//go:build multinode

package multinode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	nodeconformance "github.com/netshim/netshim/test/node-conformance"
)

// runConformance runs a subset of Kubernetes' conformance suite ("full":
// every [Conformance] spec; "quick": QuickFocus) with e2e.test of the
// cluster's release (--provider=skeleton) against c, offline: its images
// from the lan's registry (KUBE_TEST_REPO_LIST), the control-plane node made
// schedulable as the suite wants every node to be. CONFORMANCE_FOCUS
// narrows the run. One line per spec, then `conformance-cluster: N passed,
// N failed, N skipped`; results and the suite's log in $CONFORMANCE_OUT.
// It fails on a failure outside SkipList, or on fewer passes than
// WantPassed.
func runConformance(t *testing.T, c *cluster, subset string) {
	want, ok := WantPassed[subset]
	if !ok {
		t.Fatalf("CONFORMANCE_SUBSET=%q: want full or quick", subset)
	}
	suite, ginkgo := binary(t, "E2E_TEST_BIN"), binary(t, "GINKGO_BIN")
	nodeImages := binary(t, "NODE_E2E_IMAGES")
	out := os.Getenv("CONFORMANCE_OUT")
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	procs := 8 // the suite mostly waits: 8 processes kept 2 cores busy
	if p := os.Getenv("CONFORMANCE_PROCS"); p != "" {
		if _, err := fmt.Sscan(p, &procs); err != nil || procs < 1 {
			t.Fatalf("CONFORMANCE_PROCS=%q: want a number of processes", p)
		}
	}
	timeout := 150 * time.Minute
	if d := os.Getenv("CONFORMANCE_TIMEOUT"); d != "" {
		var err error
		if timeout, err = time.ParseDuration(d); err != nil {
			t.Fatalf("CONFORMANCE_TIMEOUT=%q: %v", d, err)
		}
	}

	// Every node schedulable, as the suite expects of a cluster.
	c.kubectl(t, "taint", "nodes", c.nodes[0].Name, "node-role.kubernetes.io/control-plane-")

	// The suite's images, in the lan's registry under the paths
	// KUBE_TEST_REPO_LIST maps them to.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The full subset also runs the aggregator spec, whose images
	// (sample-apiserver, etcd) the quick one needs not build.
	push := []string{"push", c.pushVia}
	if subset == "full" {
		push = append(push, "cluster")
	}
	if o, err := exec.CommandContext(ctx, nodeImages, push...).CombinedOutput(); err != nil {
		t.Fatalf("pushing the suite's images: %v\n%s", err, o)
	}
	repoList := filepath.Join(out, "repo-list.yaml")
	rl, err := exec.Command(nodeImages, "repo-list", c.registry).Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(repoList, rl, 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(c.nodes[0].Dir, "root", "etc", "kubernetes", "admin.conf")

	focus := []string{regexp.QuoteMeta(ConformanceTag)}
	if subset == "quick" {
		focus = QuickFocus
	}
	if f := os.Getenv("CONFORMANCE_FOCUS"); f != "" {
		focus = []string{f}
		want = 1 // a narrowed run: at least one spec must pass
	}
	jsonReport := filepath.Join(out, "report.json")
	args := []string{fmt.Sprintf("--procs=%d", procs), "--no-color", "--timeout=" + timeout.String(),
		"--focus=" + strings.Join(focus, "|"), "--label-filter=Conformance", "--json-report=" + jsonReport}
	for _, s := range SkipList {
		args = append(args, "--skip="+s.Pattern)
	}
	args = append(args, suite, "--", "--provider=skeleton", "--kubeconfig="+kubeconfig,
		"--report-dir="+out, "--e2e-output-dir="+out, "--allowed-not-ready-nodes=0")
	logPath := filepath.Join(out, "e2e.log")
	rctx, rcancel := context.WithTimeout(context.Background(), timeout+5*time.Minute)
	defer rcancel()
	t.Logf("running e2e.test (log: %s)", logPath)
	wall, runErr := nodeconformance.RunSuite(rctx, out, logPath,
		[]string{"KUBE_TEST_REPO_LIST=" + repoList, "KUBECONFIG=" + kubeconfig}, ginkgo, args...)
	specs, err := nodeconformance.ReadReport(jsonReport, logPath, runErr)
	if err != nil {
		t.Fatal(err)
	}
	tally, err := nodeconformance.ClassifyTagged(specs, ConformanceTag, regexp.MustCompile(strings.Join(focus, "|")), SkipList)
	if err != nil {
		t.Fatal(err)
	}
	lines := tally.Lines()
	p, fl, s := tally.Counts()
	lines = append(lines, fmt.Sprintf("conformance-cluster: %d specs, wall time %s", p+fl+s, wall.Round(time.Second)))
	lines = append(lines, fmt.Sprintf("conformance-cluster: %d passed, %d failed, %d skipped", p, fl, s))
	text := strings.Join(lines, "\n") + "\n"
	fmt.Print(text)
	if err := os.WriteFile(filepath.Join(out, "results.txt"), []byte(text), 0o644); err != nil {
		t.Error(err)
	}
	switch {
	case fl > 0:
		t.Errorf("%d failure(s) outside the skip list, %d passed (suite exit: %v); log: %s", fl, p, runErr, logPath)
	case p < want:
		t.Errorf("%d passed, fewer than the %d a whole %s run passes (WantPassed in skips.go): specs skipped themselves or left the focus (suite exit: %v); log: %s",
			p, want, subset, runErr, logPath)
	case p > want && os.Getenv("CONFORMANCE_FOCUS") == "":
		t.Logf("%d passed, more than the %d pinned for %s in skips.go: raise WantPassed", p, want, subset)
	}
}
