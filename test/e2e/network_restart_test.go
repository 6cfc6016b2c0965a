//go:build e2e

package e2e

import (
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// Pod IPs live in the checkpoints, so a netshim restart, clean (SIGTERM)
// or not (SIGKILL), changes none: 10 running pods keep their IPs in
// `crictl inspectp`, stay Ready in `crictl pods`, keep their host-local
// allocations (no teardown, no second ADD) and still answer a ping.
func TestNetworkRestartKeepsPodIPs(t *testing.T) {
	const n = 10
	e := newEnv(t, envOptions{})
	e.start()

	ids := e.runPodsParallel("keep", n)
	want := map[string]string{} // sandbox → primary IP
	for _, id := range ids {
		ips := e.podIPs(id)
		if len(ips) != 1 {
			t.Fatalf("crictl inspectp %s: IPs %v, want one", id, ips)
		}
		e.requireInSubnet("pod "+id, ips[0])
		want[id] = ips[0]
	}
	store := e.ipamStore()
	if len(store) != n {
		t.Fatalf("host-local store holds %d IPs for %d pods: %v", len(store), n, store)
	}

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		e.mustStop(sig)
		e.start()
		pods := e.crictlPods()
		for _, id := range ids {
			p, ok := pods[id]
			if !ok {
				t.Errorf("after a %v restart: crictl pods does not list %s", sig, id)
				continue
			}
			if p.State != stateReady {
				t.Errorf("after a %v restart: crictl pods shows %s %s, want %s", sig, id, p.State, stateReady)
			}
			if got := e.podIPs(id); len(got) != 1 || got[0] != want[id] {
				t.Errorf("after a %v restart: crictl inspectp %s shows IPs %v, want [%s]", sig, id, got, want[id])
			}
		}
		// Give a wrong start-up teardown the time to show.
		time.Sleep(500 * time.Millisecond)
		if got := e.ipamStore(); !maps.Equal(got, store) {
			t.Errorf("after a %v restart: host-local store %v, want it unchanged: %v", sig, got, store)
		}
		for _, id := range ids {
			if out, ok := pingPoll(want[id], pingDeadline); !ok {
				t.Errorf("after a %v restart: pod %s (%s) does not answer a ping:\n%s", sig, id, want[id], out)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		t.Logf("after a %v restart: %d pods Ready with the same IPs", sig, n)
	}
}

// A pod whose pause container is killed while netshim is down holds its
// IP and hostPort rules until a DEL; netshim runs that DEL by itself at
// start-up, with no RPC asking for it, and leaves a pod that still runs
// alone. Stop and Remove of the dead pod still succeed afterwards.
func TestNetworkStartupTearDownOfDeadPod(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start()
	hostPort := e.hostPort(5)
	dead, _ := e.runPodWith("dead", withPauseContainer, harness.WithHostPort(80, hostPort, runtimeapi.Protocol_TCP))
	alive, _ := e.runPodWith("alive")
	deadIP, aliveIP := e.podIPs(dead)[0], e.podIPs(alive)[0]
	if len(dnatRulesFor(natRules(t), hostPort)) == 0 {
		t.Fatalf("no DNAT rule for host port %d of the pod", hostPort)
	}

	e.mustStop(syscall.SIGTERM)
	mustRun(t, "docker", "kill", dead)
	if holder := e.ipamStore()[deadIP]; holder != dead {
		t.Fatalf("host-local store: %s held by %q after the kill, want %s (the test cannot tell a release apart)", deadIP, holder, dead)
	}
	e.start()

	// No RPC from here until the IP is free: only the host is watched.
	start := time.Now()
	if !poll(15*time.Second, func() bool { _, held := e.ipamStore()[deadIP]; return !held }) {
		t.Fatalf("the start-up teardown did not release %s of the dead pod %s within 15s\n%s", deadIP, dead, e.logTail(30))
	}
	t.Logf("the dead pod's IP %s was released %s after the restart, with no RPC", deadIP, time.Since(start).Round(time.Millisecond))
	rules := natRules(t)
	if left := dnatRulesFor(rules, hostPort); len(left) > 0 {
		t.Errorf("DNAT rules for host port %d of the dead pod remain: %q", hostPort, left)
	}
	if left := grepRules(rules, dead); len(left) > 0 {
		t.Errorf("nat rules naming the dead pod remain: %q", left)
	}
	// The line is logged once the DEL has returned, a moment after the
	// plugin freed the address.
	if !poll(5*time.Second, func() bool {
		return strings.Contains(e.logTail(200), "Tore down the network of a sandbox whose infra container is not running")
	}) {
		t.Errorf("netshim's log does not report the start-up teardown")
	}

	if holder := e.ipamStore()[aliveIP]; holder != alive {
		t.Errorf("the running pod's IP %s is held by %q, want %s: the start-up teardown touched it", aliveIP, holder, alive)
	}
	if out, ok := pingPoll(aliveIP, pingDeadline); !ok {
		t.Errorf("the running pod %s no longer answers a ping:\n%s", aliveIP, out)
	}
	if got := e.podIPs(alive); !slices.Equal(got, []string{aliveIP}) {
		t.Errorf("crictl inspectp of the running pod: IPs %v, want [%s]", got, aliveIP)
	}
	if got := e.podIPs(dead); len(got) != 0 {
		t.Errorf("crictl inspectp of the torn-down pod still reports IPs %v", got)
	}

	e.mustCrictl("stopp", dead)
	e.mustCrictl("rmp", dead)
	e.requireNoCheckpoint(dead)
}
