//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// The bandwidth annotations reach the CNI bandwidth plugin as the
// "bandwidth" capability: a tbf qdisc with the requested rate appears on
// the pod's host veth (ingress shaping; egress goes through an ifb
// device), and an invalid annotation is refused with InvalidArgument
// before anything is created.
func TestNetworkBandwidth(t *testing.T) {
	e := newEnv(t, envOptions{extraPlugins: []map[string]any{
		{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}},
	}})
	if _, err := os.Stat(filepath.Join(e.cfg.cniBinDir, "bandwidth")); err != nil {
		t.Fatalf("the bandwidth plugin is missing from %s: %v", e.cfg.cniBinDir, err)
	}
	e.start()

	ifbBefore := ifbDevices(t)
	id, _ := e.runPodWith("shaped", harness.WithPodAnnotations(map[string]string{
		"kubernetes.io/ingress-bandwidth": "10M",
		"kubernetes.io/egress-bandwidth":  "10M",
	}))
	veth := e.hostVeth(id)
	if !strings.Contains(strings.Join(e.vethsOnBridge(), " "), veth) {
		t.Fatalf("host veth %s from the CNI result is not on bridge %s (%v)", veth, e.bridge, e.vethsOnBridge())
	}
	qdiscs := mustRun(t, "tc", "qdisc", "show", "dev", veth)
	var tbf string
	for _, l := range strings.Split(qdiscs, "\n") {
		if strings.Contains(l, "qdisc tbf") {
			tbf = l
		}
	}
	if tbf == "" || !strings.Contains(tbf, "rate 10Mbit") {
		t.Fatalf("tc qdisc show dev %s: want a tbf qdisc with rate 10Mbit:\n%s", veth, qdiscs)
	}
	if !strings.Contains(qdiscs, "qdisc ingress") {
		t.Errorf("tc qdisc show dev %s: no ingress qdisc (egress shaping redirects through it):\n%s", veth, qdiscs)
	}
	var ifbs []string
	for _, d := range ifbDevices(t) {
		if !slices.Contains(ifbBefore, d) {
			ifbs = append(ifbs, d)
		}
	}
	if len(ifbs) != 1 {
		t.Errorf("ifb devices made for the shaped pod: %v, want one (egress shaping)", ifbs)
	}
	t.Logf("host veth %s: %s; ifb %v", veth, strings.TrimSpace(tbf), ifbs)

	// An unshaped pod gets no tbf.
	plain, _ := e.runPodWith("plain")
	plainVeth := e.hostVeth(plain)
	if q := mustRun(t, "tc", "qdisc", "show", "dev", plainVeth); strings.Contains(q, "tbf") {
		t.Errorf("a pod without bandwidth annotations has a tbf qdisc on %s:\n%s", plainVeth, q)
	}

	for _, bad := range []map[string]string{
		{"kubernetes.io/ingress-bandwidth": "lots"},
		{"kubernetes.io/egress-bandwidth": "lots"},
	} {
		ctx, cancel := e.rpcCtx()
		_, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: e.podConfig("invalid", harness.WithPodAnnotations(bad))})
		cancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "lots") {
			t.Errorf("RunPodSandbox with %v: %v, want InvalidArgument naming the value", bad, err)
		}
	}
	if left := dockerIDs(t, "label=netshim.io/pod-namespace="+e.namespace, "label=netshim.io/pod-name=invalid"); len(left) > 0 {
		t.Errorf("the refused pod left containers: %v", left)
	}

	e.mustCrictl("stopp", id)
	if out, err := runCmd("ip", "link", "show", veth); err == nil {
		t.Errorf("host veth %s still exists after stopp:\n%s", veth, out)
	}
	for _, d := range ifbDevices(t) {
		if slices.Contains(ifbs, d) {
			t.Errorf("ifb device %s of the shaped pod remains after stopp", d)
		}
	}
}

// ifbDevices lists the host's ifb devices (the bandwidth plugin's egress
// shapers).
func ifbDevices(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, l := range strings.Split(mustRun(t, "ip", "-o", "link", "show", "type", "ifb"), "\n") {
		if f := strings.Fields(l); len(f) >= 2 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			names = append(names, name)
		}
	}
	return names
}
