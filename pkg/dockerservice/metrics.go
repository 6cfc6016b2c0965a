package dockerservice

import (
	"encoding/json"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/metrics"
)

// What the service reports to pkg/metrics beyond the calls it makes:
// sandboxes and containers by state (read from the index at scrape time,
// never kept current on a request's path) and readiness for /readyz.

// stateName is the metric label of a record's state.
func stateName(s store.State) string {
	switch s {
	case store.StateCreated:
		return "created"
	case store.StateRunning:
		return "running"
	case store.StateExited:
		return "exited"
	}
	return "unknown"
}

// countByState counts the index's sandboxes (by their infra container's
// state) and workload containers by state.
func (ds *DockerService) countByState() (sandboxes, containers map[string]int) {
	count := func(kind store.Kind) map[string]int {
		out := map[string]int{}
		for _, r := range ds.store().List(kind) {
			out[stateName(r.State)]++
		}
		return out
	}
	return count(store.KindSandbox), count(store.KindContainer)
}

// countByMode counts the index's sandboxes by the mode each was made in
// and why (sandboxModeOf), from the checkpoints' mirror: no disk read.
func (ds *DockerService) countByMode() map[metrics.SandboxMode]int {
	out := map[metrics.SandboxMode]int{}
	for _, r := range ds.store().List(store.KindSandbox) {
		mode, why := ds.sandboxModeOf(r, ds.getCheckpoint(r.ID))
		out[metrics.SandboxMode{Mode: mode, Reason: why}]++
	}
	return out
}

// sandboxModesInfo is Status's verbose info on the pods netshim has: how
// many got each mode and why, keyed "mode/reason", as JSON.
func (ds *DockerService) sandboxModesInfo() string {
	out := map[string]int{}
	for m, n := range ds.countByMode() {
		out[m.Mode+"/"+m.Reason] = n
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// SandboxModeCounts is countByMode over the checkpoints alone, for the
// start-up log, before the index's first sync: every sandbox netshim made
// has one.
func (ds *DockerService) SandboxModeCounts() map[metrics.SandboxMode]int {
	out := map[metrics.SandboxMode]int{}
	for _, cp := range ds.pods.Select(func(*checkpoint.PodSandbox) bool { return true }) {
		mode, why := ds.sandboxModeOf(nil, cp)
		out[metrics.SandboxMode{Mode: mode, Reason: why}]++
	}
	return out
}

// Ready says whether the daemon can answer kubelet: once the index has
// been filled from Docker the first time (before, every read RPC is
// refused with Unavailable, see requireSynced). It does not go back to
// not-ready when Docker goes away later: Status' RuntimeReady says that to
// kubelet, and the index keeps answering from what it knows.
func (ds *DockerService) Ready() (ready bool, reason string) {
	if ds.index.Synced() {
		return true, ""
	}
	_, reason = ds.index.Health()
	return false, "the state of Docker's containers has not been read yet: " + reason
}
