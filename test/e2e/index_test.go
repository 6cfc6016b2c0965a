//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// notReadyDeadline bounds how long a change made behind netshim's back may
// take to show on a loaded machine. That it came from Docker's events, not
// from a resync (the index's only other source, every 10 minutes or when
// something went wrong), is checked on the index's metrics, not guessed
// from how fast it came.
const notReadyDeadline = 30 * time.Second

// TestIndexFollowsDocker checks that the in-memory index that answers
// kubelet's polls follows changes made behind netshim's back through
// Docker's events, and that a dockerd restart is seen (RuntimeReady=false
// while down) and resynced from by itself. It uses a private dockerd that
// it may restart.
func TestIndexFollowsDocker(t *testing.T) {
	d := harness.StartPrivateDockerd(t, harness.WithImages(pauseImage))
	addr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	e := newEnv(t, envOptions{dockerEndpoint: d.Endpoint(), extraFlags: []string{"--metrics-bind-address=" + addr}})
	e.start()
	base := "http://" + addr
	indexCounts := func() (events, resyncs float64) {
		s := scrape(t, base)
		return sum(s, "netshim_index_events_total", nil), sum(s, "netshim_index_resyncs_total", nil)
	}

	run := func(name string) string {
		t.Helper()
		ctx, cancel := e.rpcCtx()
		defer cancel()
		resp, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: e.podConfig(name, withPauseContainer)})
		if err != nil {
			t.Fatalf("RunPodSandbox %s: %v", name, err)
		}
		return resp.PodSandboxId
	}
	killed, removed, survivor := run("killed"), run("removed"), run("survivor")

	// Both the list and the status must turn NOTREADY, through events
	// applied and with no resync meanwhile.
	requireNotReadyFromEvents := func(id string, how ...string) {
		t.Helper()
		events, resyncs := indexCounts()
		d.MustDocker(t, how...)
		start := time.Now()
		ok := poll(notReadyDeadline, func() bool {
			return e.mustStatus(id).State == runtimeapi.PodSandboxState_SANDBOX_NOTREADY && listedState(t, e, id) == runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		})
		took := time.Since(start).Round(time.Millisecond)
		if !ok {
			t.Fatalf("sandbox %s still READY %s after docker %s", id, notReadyDeadline, strings.Join(how, " "))
		}
		eventsAfter, resyncsAfter := indexCounts()
		if resyncsAfter != resyncs || eventsAfter <= events {
			t.Fatalf("sandbox %s NOTREADY after docker %s with %v events applied and %v resyncs meanwhile, want events and no resync", id, strings.Join(how, " "), eventsAfter-events, resyncsAfter-resyncs)
		}
		t.Logf("sandbox NOTREADY %s after docker %s (%v events applied)", took, strings.Join(how, " "), eventsAfter-events)
	}
	requireNotReadyFromEvents(killed, "kill", killed)
	requireNotReadyFromEvents(removed, "rm", "-f", removed)
	if st := e.mustStatus(survivor).State; st != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("untouched sandbox is %s", st)
	}

	// dockerd goes away: Status says so; it comes back: the index resyncs
	// by itself (the restart killed the survivor's pause container).
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if !poll(5*time.Second, func() bool { return !runtimeReady(t, e) }) {
		t.Fatal("Status still reports RuntimeReady=true with dockerd stopped")
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if !poll(15*time.Second, func() bool { return runtimeReady(t, e) }) {
		t.Fatalf("Status did not report RuntimeReady=true after dockerd came back\n%s", e.logTail(30))
	}
	if !poll(5*time.Second, func() bool {
		return e.mustStatus(survivor).State == runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}) {
		t.Fatal("index did not resync after the dockerd restart: the dead sandbox still shows READY")
	}

	// Everything still tears down and releases its IP.
	for _, id := range []string{killed, removed, survivor} {
		ip := e.readCheckpoint(id).Data.IPs[0]
		ctx, cancel := e.rpcCtx()
		if _, err := e.client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("StopPodSandbox %s: %v", id, err)
		}
		if _, err := e.client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("RemovePodSandbox %s: %v", id, err)
		}
		cancel()
		e.requireIPReleased(ip, id)
		e.requireNoCheckpoint(id)
	}
}

func listedState(t *testing.T, e *env, id string) runtimeapi.PodSandboxState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
	defer cancel()
	resp, err := e.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: id}})
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	if len(resp.Items) != 1 {
		t.Fatalf("ListPodSandbox for %s returned %d items", id, len(resp.Items))
	}
	return resp.Items[0].State
}

func runtimeReady(t *testing.T, e *env) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
	defer cancel()
	resp, err := e.client.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, c := range resp.Status.Conditions {
		if c.Type == runtimeapi.RuntimeReady {
			return c.Status
		}
	}
	t.Fatal("Status has no RuntimeReady condition")
	return false
}
