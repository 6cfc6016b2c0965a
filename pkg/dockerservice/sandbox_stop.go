package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// sandboxRef is what is known of a sandbox from its checkpoint and its
// index record; either may be missing.
type sandboxRef struct {
	id  string
	cp  *checkpoint.PodSandbox
	rec *store.Record
}

// lookupSandbox finds a sandbox by ID or unique ID prefix in the index
// and the checkpoints. found is false when neither knows it: for Stop and
// Remove that means there is nothing to do.
func (ds *DockerService) lookupSandbox(id string) (ref sandboxRef, found bool, err error) {
	if err := dockerspec.ValidateID("pod sandbox", "pod_sandbox_id", id); err != nil {
		return ref, false, err
	}
	ref.id = id
	rec, err := ds.store().Resolve(id)
	if err != nil {
		return ref, false, crirpc.InvalidArgf("%v", err)
	}
	if rec != nil {
		if rec.Kind != store.KindSandbox {
			return ref, false, crirpc.NotFoundf("%s is a container, not a pod sandbox", id)
		}
		ref.id, ref.rec = rec.ID, rec
	}
	ref.cp = ds.getCheckpoint(ref.id)
	return ref, ref.rec != nil || ref.cp != nil, nil
}

// mustFindSandbox is lookupSandbox for the RPCs about an existing
// sandbox: it waits for nothing, answers Unavailable before the index's
// first sync and NotFound for a sandbox neither the index nor the
// checkpoints know. A malformed ID is refused first: it is wrong whatever
// the state of the index.
func (ds *DockerService) mustFindSandbox(id string) (sandboxRef, error) {
	if err := dockerspec.ValidateID("pod sandbox", "pod_sandbox_id", id); err != nil {
		return sandboxRef{}, err
	}
	if err := ds.requireSynced(); err != nil {
		return sandboxRef{}, err
	}
	ref, found, err := ds.lookupSandbox(id)
	if err != nil {
		return ref, err
	}
	if !found {
		return ref, crirpc.NotFoundf("pod sandbox %s not found", id)
	}
	return ref, nil
}

func (r sandboxRef) running() bool { return r.rec != nil && r.rec.Running() }

// hostNetwork says whether the sandbox uses the node's network (and so has
// no pod network to tear down).
func (r sandboxRef) hostNetwork() bool {
	if r.cp != nil {
		return r.cp.HostNetwork
	}
	return r.rec != nil && r.rec.SandboxInfo().NamespaceOptions.GetNetwork() == runtimeapi.NamespaceMode_NODE
}

// needsTearDown is true until a teardown is known to have succeeded. With
// no checkpoint nothing is known, so teardown is attempted: CNI DEL is
// idempotent, a leaked IP is not.
func (r sandboxRef) needsTearDown() bool {
	if r.hostNetwork() {
		return false
	}
	return r.cp == nil || !r.cp.NetworkTornDown
}

// checkpointOrLabels returns the sandbox's checkpoint, or one rebuilt from
// the container's labels when the checkpoint is gone.
func (r sandboxRef) checkpointOrLabels() *checkpoint.PodSandbox {
	if r.cp != nil {
		return r.cp
	}
	md := r.rec.SandboxInfo().Metadata
	// A pinned netns (and user namespace) is named on the container too
	// (sandbox_netns.go):
	// a sandbox whose checkpoint was never written (netshim killed
	// between the create and the write) still has its file removed.
	return &checkpoint.PodSandbox{SandboxID: r.id, Name: md.Name, Namespace: md.Namespace, UID: md.Uid, Attempt: md.Attempt,
		NetNS: r.rec.DockerLabels[labelNetNS], UserNS: r.rec.DockerLabels[labelUserNS]}
}

// StopPodSandbox stops the pod's containers, tears the pod network down and
// then stops the infra container. The network goes first, while the netns
// still exists; when it is already gone (container removed, daemon
// restarted) the teardown still runs from the checkpoint. Idempotent.
func (ds *DockerService) StopPodSandbox(ctx context.Context, r *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	ref, found, unlock, err := ds.lockSandbox(ctx, r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if !found {
		return &runtimeapi.StopPodSandboxResponse{}, nil
	}
	defer unlock()
	if err := ds.stopSandbox(ctx, ref); err != nil {
		return nil, err
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (ds *DockerService) stopSandbox(ctx context.Context, ref sandboxRef) error {
	t := newStepTimer(ctx, "StopPodSandbox", "podSandboxID", ref.id)
	if err := ds.stopPodContainers(ctx, ref.id); err != nil {
		return err
	}
	t.step("containers")

	// A teardown failure does not stop us from stopping the infra
	// container (the IP stays recorded in the checkpoint and the next
	// Stop/Remove retries the DEL), but it is reported: success would
	// tell kubelet the IP is free.
	var tearDownErr error
	if ref.needsTearDown() {
		tearDownErr = ds.tearDownSandboxNetwork(ctx, ref)
		t.step("network")
	}

	if ref.rec != nil {
		if err := ds.controllerOf(ref.rec, ref.cp).stop(ctx, ref, t); err != nil {
			return errors.Join(tearDownErr, err)
		}
	}
	t.done()
	return tearDownErr
}

// tearDownSandboxNetwork calls the plugin; the caller holds the sandbox's
// lifecycle lock. The checkpoint says TeardownStarted before the DEL and
// NetworkTornDown after it succeeded, on disk: a netshim killed anywhere
// from the DEL to the infra container's stop finds the sandbox not ready
// at restart (its IP may be another pod's by then), and Remove after Stop
// runs no second DEL. A checkpoint that cannot be written (a full disk)
// does not keep the pod from stopping: the marks are then kept in memory
// only, as they are for this process's answers anyway.
func (ds *DockerService) tearDownSandboxNetwork(ctx context.Context, ref sandboxRef) error {
	cp := ref.checkpointOrLabels()
	if ref.cp != nil && !ref.cp.TeardownStarted {
		ds.markTeardown(ctx, ref.id, func(c *checkpoint.PodSandbox) { c.TeardownStarted = true })
	}
	if err := ds.network.TearDownPod(ctx, podRef(cp)); err != nil {
		return err
	}
	// The DEL had the pinned netns; nothing needs it any more. A failure
	// is only logged: the network is down, and Remove tries again
	// before the checkpoint that names the file goes.
	if err := ds.releasePinnedNamespaces(cp); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to remove a torn-down sandbox's pinned netns; RemovePodSandbox retries", "podSandboxID", ref.id)
	}
	if ref.cp != nil {
		ds.markTeardown(ctx, ref.id, func(c *checkpoint.PodSandbox) { c.TeardownStarted, c.NetworkTornDown = true, true })
	}
	return nil
}

// markTeardown records a teardown mark in the sandbox's checkpoint, on
// disk and in memory; in memory alone if the write fails (logged).
func (ds *DockerService) markTeardown(ctx context.Context, id string, mark func(*checkpoint.PodSandbox)) {
	updated, err := ds.updateCheckpoint(id, mark)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to record the network teardown in the sandbox's checkpoint; keeping it in memory", "podSandboxID", id)
		if ds.pods.Replace(updated) {
			ds.checkpointChanged(id)
		}
	}
}

// stopContainer stops one container of a sandbox being stopped; one
// already stopped or gone is fine.
func (ds *DockerService) stopContainer(ctx context.Context, id string) error {
	timeout := stopGrace(ctx, ds.cfg.StopTimeout)
	err := ds.engine.ContainerStop(ctx, id, container.StopOptions{Timeout: &timeout})
	if errdefs.IsNotFound(err) {
		ds.store().Delete(id)
		return nil
	}
	if err != nil {
		return err
	}
	// The "die" event will bring the exit code; readers must not see the
	// container running meanwhile.
	ds.store().Update(id, func(r *store.Record) {
		if r.State == store.StateRunning {
			r.State, r.Pid, r.FinishedAt = store.StateExited, 0, time.Now().UnixNano()
		}
	})
	return nil
}

// stopGrace is the grace, in whole seconds, a container gets when its
// sandbox stops: --stop-timeout, cut to half of what the caller's deadline
// leaves, so that the kill, the network teardown and the infra container's
// stop still fit in it. kubelet stops each container with its own grace
// first; what is left running is for StopPodSandbox to terminate
// forcibly (the CRI's words). A caller with a short deadline (kubeadm
// reset gives each call 2 s) gets its containers killed at once, as
// containerd always does, instead of a stop cancelled halfway at every
// retry while a container ignores SIGTERM (a shell as PID 1).
func stopGrace(ctx context.Context, configured time.Duration) int {
	g := configured
	if deadline, ok := ctx.Deadline(); ok {
		g = min(g, time.Until(deadline)/2)
	}
	return int(max(g, 0) / time.Second)
}

// podContainers returns the workload containers of a sandbox from the
// index; running only when all is false.
func (ds *DockerService) podContainers(sandboxID string, all bool) []*store.Record {
	var out []*store.Record
	for _, r := range ds.store().ContainersOf(sandboxID) {
		if all || r.Running() {
			out = append(out, r)
		}
	}
	return out
}

// stopPodContainers stops the sandbox's running containers in parallel:
// each may take its whole grace period.
func (ds *DockerService) stopPodContainers(ctx context.Context, sandboxID string) error {
	cs := ds.podContainers(sandboxID, false)
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ds.stopContainer(ctx, c.ID); err != nil {
				errs[i] = fmt.Errorf("stopping container %s of pod sandbox %s: %w", c.ID, sandboxID, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(cs) > 0 {
		klog.FromContext(ctx).V(4).Info("Stopped pod containers", "podSandboxID", sandboxID, "count", len(cs))
	}
	return nil
}
