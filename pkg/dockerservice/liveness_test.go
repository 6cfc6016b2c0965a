package dockerservice

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
)

func TestSyncedHeartbeatAndCounts(t *testing.T) {
	ds := newUnsyncedService(t)
	if last, _ := ds.IndexHeartbeat(); !last.IsZero() {
		t.Errorf("IndexHeartbeat before Start = %v, want zero", last)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ds.Start(ctx)
	select {
	case <-ds.Synced():
		t.Fatal("Synced closed with Docker down")
	default:
	}
	// Docker down is not a stuck loop: it keeps beating.
	first, period := ds.IndexHeartbeat()
	if period <= 0 {
		t.Errorf("heartbeat period %v, want positive", period)
	}
	testutil.Eventually(t, "a heartbeat while Docker is down", func() bool {
		last, _ := ds.IndexHeartbeat()
		return last.After(first)
	})

	e := newTestEnv(t)
	select {
	case <-e.ds.Synced():
	default:
		t.Fatal("Synced not closed once the index synced")
	}
	if ready, reason := e.ds.Ready(); !ready {
		t.Errorf("Synced closed but Ready() = false (%s)", reason)
	}
	if sb, c := e.ds.Counts(); sb != 0 || c != 0 {
		t.Errorf("Counts = %d, %d on an empty engine, want 0, 0", sb, c)
	}
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	cfg := podConfig("p")
	sb := e.run(t, cfg)
	c := ctrConfig("a")
	c.LogPath = ""
	if _, err := e.ds.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: c, SandboxConfig: cfg}); err != nil {
		t.Fatal(err)
	}
	if sb, c := e.ds.Counts(); sb != 1 || c != 1 {
		t.Errorf("Counts = %d, %d, want 1 sandbox, 1 container", sb, c)
	}
}
