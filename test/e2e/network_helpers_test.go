//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// Helpers of the network_*_test.go tests (pod IPs, dual-stack, hostPort,
// bandwidth, restarts).

// writeChain replaces the env's CNI config with a conflist of plugins,
// named after the bridge like the default one. Call it before start.
func (e *env) writeChain(plugins []map[string]any) {
	e.t.Helper()
	harness.WriteConflist(e.t, e.confDir, harness.WithNetworkName(e.bridge), harness.WithChain(plugins...), harness.WithFileName(conflistFile))
}

// subnet6 is the IPv6 ULA subnet of this env's slot.
func (e *env) subnet6() *net.IPNet {
	_, n, _ := net.ParseCIDR(fmt.Sprintf("fd00:10:123:%x::/64", e.slot))
	return n
}

// gateway is the bridge's IPv4 address (the bridge plugin's isGateway):
// the host's address facing the pods.
func (e *env) gateway() string {
	ip := e.subnet.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], 1).String()
}

// runPodWith runs a sandbox of e.podConfig(name, opts...) through the Go
// client, and returns its ID and config.
func (e *env) runPodWith(name string, opts ...harness.PodOption) (string, *runtimeapi.PodSandboxConfig) {
	e.t.Helper()
	cfg := e.podConfig(name, opts...)
	ctx, cancel := e.rpcCtx()
	defer cancel()
	resp, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		e.t.Fatalf("RunPodSandbox %s: %v\n%s", name, err, e.logTail(30))
	}
	return resp.PodSandboxId, cfg
}

// podIPs is what `crictl inspectp -o json` reports of a pod's addresses:
// the primary first, then the additional ones.
func (e *env) podIPs(id string) []string {
	e.t.Helper()
	out := e.mustCrictl("inspectp", "-o", "json", id)
	var v struct {
		Status struct {
			State   string `json:"state"`
			Network *struct {
				IP            string `json:"ip"`
				AdditionalIPs []struct {
					IP string `json:"ip"`
				} `json:"additionalIps"`
			} `json:"network"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		e.t.Fatalf("parsing crictl inspectp output: %v\n%s", err, out)
	}
	if v.Status.Network == nil || v.Status.Network.IP == "" {
		return nil
	}
	ips := []string{v.Status.Network.IP}
	for _, a := range v.Status.Network.AdditionalIPs {
		ips = append(ips, a.IP)
	}
	return ips
}

// verboseResult is the CNI ADD result netshim reports in a verbose
// PodSandboxStatus.
type verboseResult struct {
	Interfaces []struct {
		Name    string `json:"name"`
		Sandbox string `json:"sandbox"`
	} `json:"interfaces"`
	IPs []struct {
		Address string `json:"address"`
	} `json:"ips"`
}

func (e *env) verboseResult(id string) verboseResult {
	e.t.Helper()
	var info struct {
		Result verboseResult `json:"cniResult"`
	}
	e.verboseInfo(id, &info)
	return info.Result
}

// verboseInfo decodes the "info" JSON of a verbose PodSandboxStatus into v.
func (e *env) verboseInfo(id string, v any) {
	e.t.Helper()
	ctx, cancel := e.rpcCtx()
	defer cancel()
	resp, err := e.client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		e.t.Fatalf("verbose PodSandboxStatus %s: %v", id, err)
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), v); err != nil {
		e.t.Fatalf("parsing verbose status info of %s: %v\n%s", id, err, resp.Info["info"])
	}
}

// hostVeth is the host end of the pod's veth, from the CNI result: the
// interface outside any sandbox that is not the bridge.
func (e *env) hostVeth(id string) string {
	e.t.Helper()
	res := e.verboseResult(id)
	for _, i := range res.Interfaces {
		if i.Sandbox == "" && i.Name != e.bridge {
			return i.Name
		}
	}
	e.t.Fatalf("the CNI result of %s names no host veth: %+v", id, res)
	return ""
}

// pingPoll pings ip (either family) until it answers or the deadline
// passes: a fresh IPv6 address may still be tentative for a moment.
func pingPoll(ip string, deadline time.Duration) (string, bool) {
	var out string
	ok := poll(deadline, func() bool {
		args := []string{"-c1", "-W1", ip}
		if net.ParseIP(ip).To4() == nil {
			args = append([]string{"-6"}, args...)
		}
		var err error
		if _, lerr := exec.LookPath("ping"); lerr == nil {
			out, err = runCmd("ping", args...)
		} else {
			out, err = runCmd("busybox", append([]string{"ping"}, args...)...)
		}
		return err == nil
	})
	return out, ok
}

// curlURL fetches url with curl and returns the body and whether it
// succeeded.
func curlURL(url string) (string, error) {
	return runCmd("curl", "-sS", "--fail", "--max-time", "5", url)
}

// dnatRulesFor returns the nat rules that DNAT host port port.
func dnatRulesFor(rules []string, port int32) []string {
	return grepRules(rulesForPort(rules, port), "DNAT")
}

// requireIPsHeldBy fails unless host-local's store holds every ip for id.
func (e *env) requireIPsHeldBy(id string, ips []string) {
	e.t.Helper()
	store := e.ipamStoreIn(e.ipamDir)
	for _, ip := range ips {
		if holder := store[ip]; holder != id {
			e.t.Errorf("host-local store: %s held by %q, want sandbox %s", ip, holder, id)
		}
	}
}

// ipamStoreIn reads every host-local store under dir (one directory per
// network): IP → holder.
func (e *env) ipamStoreIn(dir string) map[string]string {
	e.t.Helper()
	nets, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		e.t.Fatalf("reading %s: %v", dir, err)
	}
	out := map[string]string{}
	for _, n := range nets {
		if !n.IsDir() {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(dir, n.Name()))
		if err != nil {
			e.t.Fatalf("reading host-local store: %v", err)
		}
		for _, ent := range ents {
			if net.ParseIP(ent.Name()) == nil {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, n.Name(), ent.Name()))
			if err != nil {
				continue // released meanwhile
			}
			first, _, _ := strings.Cut(string(data), "\n")
			out[ent.Name()] = strings.TrimSpace(first)
		}
	}
	return out
}
