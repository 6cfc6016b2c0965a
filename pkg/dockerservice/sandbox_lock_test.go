package dockerservice

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
)

// A Stop or Remove of a sandbox whose RunPodSandbox is still setting it up
// waits for it (or gives up with its context) instead of interleaving: the
// Run's last checkpoint write can no longer bring back a checkpoint the
// Remove deleted, nor leave a container with no checkpoint.
func TestLifecycleOfOneSandboxIsSerialised(t *testing.T) {
	e := newTestEnv(t)
	e.plugin.setUpGate = make(chan struct{})
	runDone := make(chan error, 1)
	go func() {
		_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("racy")})
		runDone <- err
	}()
	testutil.Eventually(t, "the ADD to start", func() bool { return e.plugin.held() == 1 })
	var id string
	for cid := range e.docker.ContainerIDs() {
		id = cid
	}

	for _, call := range []struct {
		name string
		rpc  func(context.Context) error
	}{
		{"StopPodSandbox", func(ctx context.Context) error {
			_, err := e.ds.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		}},
		{"RemovePodSandbox", func(ctx context.Context) error {
			_, err := e.ds.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := call.rpc(ctx)
		cancel()
		if codeOf(err) != codes.DeadlineExceeded {
			t.Errorf("%s during the sandbox's setup: %v (code %v), want DeadlineExceeded while it waits", call.name, err, codeOf(err))
		}
	}
	if !e.docker.ContainerIDs()[id] || e.plugin.callCount("TearDownPod "+id) != 0 {
		t.Fatal("the sandbox was touched while its RunPodSandbox held it")
	}

	// A Remove that waits long enough runs after the Run, on what it left.
	removeDone := make(chan error, 1)
	go func() {
		_, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		removeDone <- err
	}()
	close(e.plugin.setUpGate)
	if err := <-runDone; err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	if err := <-removeDone; err != nil {
		t.Fatalf("RemovePodSandbox after the run: %v", err)
	}
	if ids, _ := e.ckpt.List(); len(ids) != 0 {
		t.Errorf("checkpoint came back after Remove: %v", ids)
	}
	if e.ds.getCheckpoint(id) != nil {
		t.Error("in-memory checkpoint came back after Remove")
	}
	if len(e.docker.ContainerIDs()) != 0 || e.plugin.held() != 0 {
		t.Errorf("left behind: containers %v, IPs held %d", e.docker.ContainerIDs(), e.plugin.held())
	}
}

// Stop and Remove of a sandbox the index does not know yet (its events were
// dropped) ask Docker, so the infra container is stopped and removed
// instead of being skipped as "not found".
func TestStopAndRemoveFindSandboxesTheIndexLacks(t *testing.T) {
	e := newTestEnv(t)
	id := e.run(t, podConfig("hidden"))
	e.ds.store().Delete(id) // as if its events had been dropped
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	var running bool
	e.docker.Do(func(s *fakedocker.State) { running = s.Containers[id] != nil && s.Containers[id].State.Running })
	if running {
		t.Error("StopPodSandbox skipped an infra container the index lacked")
	}
	e.ds.store().Delete(id)
	if _, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	if e.docker.ContainerIDs()[id] {
		t.Error("RemovePodSandbox left an infra container the index lacked")
	}
}
