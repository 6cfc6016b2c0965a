package dockerservice

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// infraSandboxes is what the two modes with an infra (pause) container,
// docker and pinned, share: the container's config, create, stop and
// removal, and the undo of a failed RunPodSandbox.
type infraSandboxes struct{ ds *DockerService }

// dockerConfig makes sure the pause image is present and maps the
// request to the infra container's Docker config.
func (c infraSandboxes) dockerConfig(ctx context.Context, req *sandboxRequest) (*container.Config, *container.HostConfig, error) {
	if err := c.ds.images.EnsurePresent(ctx, c.ds.cfg.PodInfraImage); err != nil {
		return nil, nil, err
	}
	req.timer.step("image")
	return dockerspec.SandboxConfig(req.cfg, dockerspec.SandboxInput{
		Image:          c.ds.cfg.PodInfraImage,
		RuntimeHandler: req.handler,
		CgroupParent:   req.cgroupParent,
		OOMScoreAdj:    c.ds.containers.oom.apply(sandboxOOMScoreAdj),
	})
}

// create creates the infra container, takes the new sandbox's lifecycle
// lock and writes its first checkpoint (naming netns, if pinned), before
// the container starts: a crash at any later point still leaves what
// teardown needs. On success the caller holds the lock until it answers.
// When Docker already has a container of that name, cp is nil and resp
// and err are the answer (existingSandbox).
func (c infraSandboxes) create(ctx context.Context, req *sandboxRequest, config *container.Config, hostConfig *container.HostConfig, netns string) (cp *checkpoint.PodSandbox, unlock func(), resp *runtimeapi.RunPodSandboxResponse, err error) {
	ds := c.ds
	md := req.cfg.GetMetadata()
	image := ds.cfg.PodInfraImage
	created, err := ds.createOwned(ctx, config, hostConfig, req.name, nil)
	if errdefs.IsNotFound(err) {
		// The image went away behind our back: pull it and try once more.
		ds.images.ForgetPresent(image)
		if err = ds.images.EnsurePresent(ctx, image); err == nil {
			created, err = ds.createOwned(ctx, config, hostConfig, req.name, nil)
		}
	}
	if errdefs.IsConflict(err) {
		resp, err := ds.existingSandbox(ctx, req.name, md)
		return nil, nil, resp, err
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating infra container for pod %s: %w", klog.KRef(md.Namespace, md.Name), err)
	}
	id := created.ID
	req.timer.step("create")

	// From here on a failure must leave nothing behind. Nobody else knows
	// the ID yet, so the lock is free; holding it until we answer keeps a
	// Stop or Remove (from crictl, or a client that listed the sandbox)
	// from interleaving with the setup, its checkpoint writes or its undo.
	unlock, err = ds.pods.Lock(backgroundCtx(ctx), id)
	if err != nil {
		// Cannot happen with a context that is never cancelled; if it
		// ever did, the container just made must not be left behind.
		if rerr := ds.removeContainer(backgroundCtx(ctx), id); rerr != nil {
			klog.FromContext(ctx).Error(rerr, "Failed to remove the infra container of a sandbox that could not be locked", "podSandboxID", id)
		}
		return nil, nil, nil, fmt.Errorf("locking new sandbox %s: %w", id, err)
	}
	cp = newSandboxCheckpoint(id, req, netns)
	cp.UserNS = req.userns
	if req.hostNetwork() {
		// A host-network pod has no pod network to set up.
		cp.HostNetwork, cp.Setup = true, checkpoint.SetupReady
	}
	if err := ds.putCheckpoint(cp); err != nil {
		c.undo(ctx, cp, false)
		unlock()
		return nil, nil, nil, err
	}
	req.timer.step("checkpoint")
	return cp, unlock, nil, nil
}

// start starts the infra container through the index, whose one inspect
// makes the record (and its pid) current.
func (c infraSandboxes) start(ctx context.Context, cp *checkpoint.PodSandbox) error {
	rec, err := c.ds.index.Start(ctx, cp.SandboxID)
	if err != nil {
		return fmt.Errorf("starting infra container %s for pod %s: %w", cp.SandboxID, klog.KRef(cp.Namespace, cp.Name), err)
	}
	if !rec.Running() {
		return fmt.Errorf("infra container %s of pod %s exited right after start (exit code %d): %s", cp.SandboxID, klog.KRef(cp.Namespace, cp.Name), rec.ExitCode, rec.Error)
	}
	return nil
}

// stop stops the infra container.
func (c infraSandboxes) stop(ctx context.Context, ref sandboxRef, t *stepTimer) error {
	if err := c.ds.stopContainer(ctx, ref.id); err != nil {
		return fmt.Errorf("stopping infra container of pod sandbox %s: %w", ref.id, err)
	}
	t.step("infra")
	return nil
}

// remove removes the infra container, then the sandbox's pinned netns (if
// it has one) and its checkpoint.
func (c infraSandboxes) remove(ctx context.Context, ref sandboxRef) error {
	if ref.rec != nil {
		if err := c.ds.removeContainer(ctx, ref.id); err != nil {
			return fmt.Errorf("removing infra container of pod sandbox %s: %w", ref.id, err)
		}
	}
	return c.ds.removeSandboxFiles(ref)
}

// podNetNS is the infra container's netns, from its pid once that is
// checked to still be the container's (sandboxNetNS).
func (c infraSandboxes) podNetNS(rec *store.Record) (string, error) {
	if rec.Pid <= 0 {
		return "", errSandboxNotRunning(rec.ID)
	}
	return c.ds.sandboxNetNS(rec)
}

// joinSandbox reads the infra container's files and cgroup parent from
// its inspect: reading them here keeps the index free of fields only
// CreateContainer needs.
func (c infraSandboxes) joinSandbox(ctx context.Context, sb *store.Record) (sandboxJoin, error) {
	j := sandboxJoin{ociKey: c.ds.pins.ociKey}
	sbc, err := c.ds.engine.ContainerInspect(ctx, sb.ID)
	if errdefs.IsNotFound(err) {
		return j, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s is not ready: its infra container is gone", sb.ID))
	}
	if err != nil {
		return j, fmt.Errorf("inspecting infra container of pod sandbox %s: %w", sb.ID, err)
	}
	if sbc.ContainerJSONBase != nil {
		j.resolvConfPath, j.hostsPath = sbc.ResolvConfPath, sbc.HostsPath
		if sbc.HostConfig != nil {
			j.cgroupParent = sbc.HostConfig.CgroupParent
		}
	}
	return j, nil
}

// undo removes what a failed RunPodSandbox made: the network (if the ADD
// was attempted), the infra container, the pinned netns, the checkpoint.
// What cannot be undone keeps the checkpoint: with it the sandbox stays
// listed, NOTREADY (its setup is still "pending"), for kubelet or an
// operator to stop and remove, and the IP it may hold recorded. Without
// it a running container with no network could pass for a ready pod.
func (c infraSandboxes) undo(ctx context.Context, cp *checkpoint.PodSandbox, tearDown bool) {
	u := c.ds.startUndo(ctx, cp)
	defer u.cancel()
	keep := tearDown && !u.tearDownNetwork()
	if err := c.ds.removeContainer(u.ctx, cp.SandboxID); err != nil {
		keep = true
		u.logger.Error(err, "Failed to remove infra container of a failed sandbox; keeping its checkpoint so that it is reported NOTREADY", u.log...)
	}
	if !keep {
		u.removeFiles()
	}
}
