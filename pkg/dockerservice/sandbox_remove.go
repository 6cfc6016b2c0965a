package dockerservice

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemovePodSandbox removes the pod's containers, its infra container and
// its checkpoint, tearing the network down first if that has not been
// done. The checkpoint goes last: while the network may still hold an IP
// it is the only record of what to release. Idempotent.
func (ds *DockerService) RemovePodSandbox(ctx context.Context, r *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	ref, found, unlock, err := ds.lockSandbox(ctx, r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if !found {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	defer unlock()
	if ref.running() || ref.needsTearDown() {
		if err := ds.stopSandbox(ctx, ref); err != nil {
			return nil, fmt.Errorf("stopping pod sandbox %s before removing it: %w", ref.id, err)
		}
	}
	for _, c := range ds.podContainers(ref.id, true) {
		if err := ds.removeContainer(ctx, c.ID); err != nil {
			return nil, fmt.Errorf("removing container %s of pod sandbox %s: %w", c.ID, ref.id, err)
		}
	}
	if err := ds.controllerOf(ref.rec, ref.cp).remove(ctx, ref); err != nil {
		return nil, err
	}
	ds.removeCRIDockerdCheckpoint(ctx, ref.id) // adopt.go
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// removeSandboxFiles removes a sandbox's pinned namespaces, then its
// checkpoint: last, as while the network may still hold an IP it is the
// only record of what to release.
func (ds *DockerService) removeSandboxFiles(ref sandboxRef) error {
	if err := ds.releasePinnedNamespaces(ref.checkpointOrLabels()); err != nil {
		return err
	}
	return ds.removeCheckpoint(ref.id)
}

// removeContainer force-removes a container; one already gone is fine,
// and so is one another removal is taking away (see waitRemoved).
func (ds *DockerService) removeContainer(ctx context.Context, id string) error {
	err := ds.engine.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if isRemovalInProgress(err) {
		err = ds.waitRemoved(ctx, id)
	}
	if err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	ds.store().Delete(id)
	return nil
}
