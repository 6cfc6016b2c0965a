package dockerservice

import (
	"time"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// What a service manager supervising the daemon reads (cmd/netshim's
// systemd notifications): when the index has first synced, whether its
// loop is alive, and how much it holds. None of it costs a Docker call.

// Synced is closed once the index has first been filled from Docker:
// from then on Ready is true.
func (ds *DockerService) Synced() <-chan struct{} { return ds.index.SyncedCh() }

// IndexHeartbeat is when the index's events loop last ran (zero before
// Start) and the longest a live loop goes between two beats. A loop
// retrying a Docker that is down is alive; one blocked is not.
func (ds *DockerService) IndexHeartbeat() (last time.Time, period time.Duration) {
	return ds.index.Heartbeat(), ds.index.HeartbeatPeriod()
}

// Counts is how many sandboxes and workload containers the index holds.
func (ds *DockerService) Counts() (sandboxes, containers int) {
	return len(ds.store().List(store.KindSandbox)), len(ds.store().List(store.KindContainer))
}

// WedgeIndexForTest wedges the index loop for good (Index.WedgeForTest).
func (ds *DockerService) WedgeIndexForTest() { ds.index.WedgeForTest() }
