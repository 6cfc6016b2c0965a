//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// A pod with hostPort → containerPort 80 running busybox httpd answers on
// the host's bridge-facing address (the bridge gateway) through portmap's
// DNAT; after stopp the DNAT rule and the pod's DNAT chain are gone and
// the port no longer answers.
func TestNetworkHostPort(t *testing.T) {
	requireWorkloadImage(t)
	e := newEnv(t, envOptions{})
	e.start()
	hostPort := e.hostPort(8)
	podID, podCfg := e.runPodWith("web", harness.WithHostPort(80, hostPort, runtimeapi.Protocol_TCP))
	podIP := e.podIPs(podID)[0]
	e.startContainer(podID, podCfg, "httpd",
		harness.WithCommand("sh", "-c", "mkdir -p /www && echo hello-from-"+podID[:12]+" >/www/index.html && exec httpd -f -p 80 -h /www"))

	rules := natRules(t)
	dnat := grepRules(dnatRulesFor(rules, hostPort), fmt.Sprintf("--to-destination %s:80", podIP))
	if len(dnat) == 0 {
		t.Fatalf("iptables -t nat: no DNAT of host port %d to %s:80: %q", hostPort, podIP, rulesForPort(rules, hostPort))
	}
	var dnChain string
	for _, r := range grepRules(rules, podID) {
		if m := dnChainRE.FindStringSubmatch(r); m != nil {
			dnChain = m[1]
		}
	}

	url := fmt.Sprintf("http://%s:%d/", e.gateway(), hostPort)
	var body string
	var err error
	if !poll(10*time.Second, func() bool { body, err = curlURL(url); return err == nil }) {
		t.Fatalf("curl %s: %v\n%s", url, err, body)
	}
	if want := "hello-from-" + podID[:12]; strings.TrimSpace(body) != want {
		t.Fatalf("curl %s = %q, want %q", url, body, want)
	}
	t.Logf("curl %s (→ %s:80) = %q", url, podIP, strings.TrimSpace(body))

	e.mustCrictl("stopp", podID)
	rules = natRules(t)
	if left := dnatRulesFor(rules, hostPort); len(left) > 0 {
		t.Errorf("iptables -t nat: DNAT rules for host port %d remain after stopp: %q", hostPort, left)
	}
	if left := grepRules(rules, podID); len(left) > 0 {
		t.Errorf("iptables -t nat: rules naming sandbox %s remain after stopp: %q", podID, left)
	}
	if dnChain != "" {
		if left := grepRules(rules, dnChain); len(left) > 0 {
			t.Errorf("iptables -t nat: chain %s remains after stopp: %q", dnChain, left)
		}
	}
	if out, err := curlURL(url); err == nil {
		t.Errorf("curl %s still answers after stopp: %q", url, out)
	}
	e.requireIPReleased(podIP, podID)
	e.mustCrictl("rmp", podID)
}
