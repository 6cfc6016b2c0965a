package dockerservice

import (
	"context"
	"fmt"

	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/network"
)

// networkHost is the view of the service a network plugin gets.
type networkHost struct{ ds *DockerService }

var _ network.Host = (*networkHost)(nil)

// GetNetNS returns the sandbox's netns path, or "" once the infra container
// is no longer running: the path is /proc/<pid>/ns/net of a live process,
// and the pid comes from the state index, so no Docker call is made.
func (h *networkHost) GetNetNS(_ context.Context, sandboxID string) (string, error) {
	r, ok := h.ds.store.Get(sandboxID)
	if !ok {
		return "", nil
	}
	return netnsPath(r.Running(), r.Pid), nil
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
	h.ds.mu.Lock()
	ids := make([]string, 0, len(h.ds.sandboxes))
	for id := range h.ds.sandboxes {
		ids = append(ids, id)
	}
	// A sandbox whose checkpoint could not be read is still netshim's:
	// GC must not free what it holds.
	for id := range h.ds.checkpointIssues {
		ids = append(ids, id)
	}
	h.ds.mu.Unlock()
	for _, r := range h.ds.store.List(store.KindSandbox) {
		ids = append(ids, r.ID)
	}
	return ids, nil
}

func netnsPath(running bool, pid int) string {
	if !running || pid <= 0 {
		return ""
	}
	return fmt.Sprintf("/proc/%d/ns/net", pid)
}
