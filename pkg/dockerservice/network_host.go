package dockerservice

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/network"
	"github.com/netshim/netshim/pkg/procutil"
)

// networkHost is the view of the service a network plugin gets.
type networkHost struct{ ds *DockerService }

var _ network.Host = (*networkHost)(nil)

// GetNetNS returns the sandbox's netns path: its pinned netns while that
// exists (sandbox_netns.go), else "" once the index knows the infra
// container is no longer running. The path is then /proc/<pid>/ns/net
// of the infra container's process, with the pid from the state index (no
// Docker call). It fails, FailedPrecondition, when that process has exited
// before the index heard of it: see sandboxNetNS.
func (h *networkHost) GetNetNS(_ context.Context, sandboxID string) (string, error) {
	// A pinned netns is the pod's for its whole life, container or not.
	if path, ok := h.ds.pinnedNetNS(h.ds.getCheckpoint(sandboxID)); ok {
		return path, nil
	}
	r, ok := h.ds.store().Get(sandboxID)
	if !ok || !r.Running() || r.Pid <= 0 {
		return "", nil
	}
	return h.ds.sandboxNetNS(r)
}

// sandboxNetNS returns the netns path of a running sandbox's infra
// container. The index's pid may be stale: the infra container can die
// and the kernel give its pid to another process before Docker's event
// reaches the index, and CNI would then configure (or tear down) that
// process's network namespace. So the pid is checked first to still name
// a process in the infra container's cgroup (procutil.NetNSPath); a pid
// that does not gets a FailedPrecondition naming the sandbox as not
// running, and its namespace is never handed out.
func (ds *DockerService) sandboxNetNS(r *store.Record) (string, error) {
	path, err := ds.containers.netnsPath(r.ID, r.Pid)
	switch {
	case err == nil:
		return path, nil
	case errors.Is(err, procutil.ErrNotInContainer):
		return "", crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s is not running: its infra container's process (pid %d) has exited and the pid now belongs to another process; not using that process's network namespace", r.ID, r.Pid))
	case errors.Is(err, procutil.ErrGone):
		return "", crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s is not running: its infra container's process (pid %d) has exited", r.ID, r.Pid))
	}
	return "", fmt.Errorf("pod sandbox %s: checking its infra container's process (pid %d): %w", r.ID, r.Pid, err)
}

// GetPodPortMappings returns the sandbox's port mappings from its
// checkpoint: they must be known at teardown even after the container and
// the daemon that created it are gone.
func (h *networkHost) GetPodPortMappings(_ context.Context, sandboxID string) ([]network.PortMapping, error) {
	cp := h.ds.getCheckpoint(sandboxID)
	if cp == nil {
		return nil, nil
	}
	out := make([]network.PortMapping, 0, len(cp.PortMappings))
	for _, pm := range cp.PortMappings {
		out = append(out, network.PortMapping{Protocol: pm.Protocol, ContainerPort: pm.ContainerPort, HostPort: pm.HostPort, HostIP: pm.HostIP})
	}
	return out, nil
}

var _ network.SandboxLister = (*networkHost)(nil)

// ListSandboxes returns every sandbox netshim knows, for the network
// plugin's GC: those with a checkpoint (created by netshim and not yet
// removed, running or not) and those with an infra container. It fails
// until the index has been synced once, so that GC never mistakes an empty
// index for "no sandbox exists".
func (h *networkHost) ListSandboxes(_ context.Context) ([]string, error) {
	if err := h.ds.requireSynced(); err != nil {
		return nil, err
	}
	// A sandbox whose checkpoint could not be read is still netshim's:
	// GC must not free what it holds.
	known := h.ds.pods.KnownIDs()
	ids := make([]string, 0, len(known))
	for id := range known {
		ids = append(ids, id)
	}
	for _, r := range h.ds.store().List(store.KindSandbox) {
		ids = append(ids, r.ID)
	}
	return ids, nil
}
