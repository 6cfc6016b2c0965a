package dockerservice

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
)

func TestStopGrace(t *testing.T) {
	for _, c := range []struct {
		name       string
		configured time.Duration
		deadline   time.Duration // 0: none
		want       int
	}{
		{"no deadline: --stop-timeout", 10 * time.Second, 0, 10},
		{"a long deadline: --stop-timeout", 10 * time.Second, 2 * time.Minute, 10},
		{"kubelet's 2 minutes, a long --stop-timeout: half", 5 * time.Minute, 2 * time.Minute, 59},
		{"kubeadm reset's 2 s: killed at once", 10 * time.Second, 2 * time.Second, 0},
		{"8 s left: 3 s", 10 * time.Second, 8 * time.Second, 3},
		{"a deadline passed: 0", 10 * time.Second, -time.Second, 0},
		{"--stop-timeout 0", 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			if c.deadline != 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.deadline)
				defer cancel()
			}
			if got := stopGrace(ctx, c.configured); got != c.want {
				t.Errorf("stopGrace = %d s, want %d s", got, c.want)
			}
		})
	}
}

// StopPodSandbox with a caller that leaves it 2 s (kubeadm reset) kills
// the pod's containers at once instead of giving them --stop-timeout and
// being cancelled halfway; with no deadline they get --stop-timeout.
func TestStopPodSandboxFitsTheCallersDeadline(t *testing.T) {
	for _, c := range []struct {
		name     string
		deadline time.Duration
		want     int
	}{
		{"2 s deadline", 2 * time.Second, 0},
		{"no deadline", 0, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newPodEnv(t)
			id := e.create(t, ctrConfig("app"))
			if _, err := e.ds.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if c.deadline != 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.deadline)
				defer cancel()
			}
			if _, err := e.ds.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: e.sandboxID}); err != nil {
				t.Fatal(err)
			}
			var got, gotInfra int
			e.docker.Do(func(s *fakedocker.State) { got, gotInfra = s.StopTimeouts[id], s.StopTimeouts[e.sandboxID] })
			if got != c.want || gotInfra != c.want {
				t.Errorf("stop grace of the container %d s, of the infra container %d s; want %d s", got, gotInfra, c.want)
			}
		})
	}
}
