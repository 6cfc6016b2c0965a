//go:build cluster

package e2ecluster

// This file's name sorts last: go test runs the tests of a package in the
// order of its files, so this audit runs after every check.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// TestLeakAudit: once every test namespace is gone, netshim runs no pod,
// and nothing a pod held is left: no container in the engine, no held IP,
// no veth, no per-pod iptables rule, no checkpoint, no cached CNI result
// (test/e2e/leak-audit.sh against the private engine and netshim's
// directories), and no pod log directory.
func TestLeakAudit(t *testing.T) {
	if !harness.Eventually(teardownTimeout, func() bool {
		out, err := w.cp.Kubectl("get", "namespaces", "-o", "name")
		return err == nil && !strings.Contains(out, "namespace/"+nsPrefix)
	}) {
		out, _ := w.cp.Kubectl("get", "namespaces")
		t.Fatalf("test namespaces still there after %s:\n%s", teardownTimeout, out)
	}
	// Sandboxes go at kubelet's container GC, once a minute.
	var sandboxes []*runtimeapi.PodSandbox
	var containers []*runtimeapi.Container
	if !harness.Eventually(teardownTimeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		defer cancel()
		ps, err := w.cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return false
		}
		cs, err := w.cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return false
		}
		sandboxes, containers = ps.Items, cs.Containers
		return len(sandboxes) == 0 && len(containers) == 0
	}) {
		t.Fatalf("%s after the namespaces went, netshim still has %d sandbox(es) and %d container(s): %v %v",
			teardownTimeout, len(sandboxes), len(containers), sandboxes, containers)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The script's iptables check is host-wide (other runs' leftovers
	// would count): the rules of this cluster are those naming its CIDR.
	cmd := exec.CommandContext(ctx, w.auditBin, "--no-defaults",
		"--ipam-dir", w.ipamDir,
		"--root-dir", w.netshim.RootDir,
		"--cache-dir", w.netshim.CacheDir,
		"--bridge", bridge,
		"--skip", "iptables")
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+w.dockerd.Endpoint())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("leak audit: %v\n%s", err, out)
	} else {
		t.Logf("leak audit:\n%s", out)
	}

	// Per-pod rules (firewall's CNI-FORWARD accepts, portmap's DNATs,
	// ...) name a pod address; only the masquerade rules of the pod CIDR
	// itself stay while netshim runs.
	for _, l := range clusterRules() {
		if !strings.Contains(l, masqChain) {
			t.Errorf("iptables rule left: %s", l)
		}
	}

	if entries, err := os.ReadDir(w.podLogs); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), nsPrefix) {
				t.Errorf("pod log directory left: %s", filepath.Join(w.podLogs, e.Name()))
			}
		}
	}
}
