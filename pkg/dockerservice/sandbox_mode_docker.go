package dockerservice

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// dockerSandboxes is the docker mode: the pause container's process holds
// the pod's namespaces, in the netns Docker makes as the container starts.
// Host-network pods and pods with a RuntimeClass handler use it in every
// mode (usePinnedNetNS).
type dockerSandboxes struct{ infraSandboxes }

func (dockerSandboxes) mode() string { return SandboxNetNSDocker }

// run creates and starts the pause container, then sets the network up in
// its netns. runc writes the pod's sysctls as it starts the container:
// before the ADD, the order of every mode (sandbox_sysctls.go).
func (c dockerSandboxes) run(ctx context.Context, req *sandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	config, hostConfig, err := c.dockerConfig(ctx, req)
	if err != nil {
		return nil, err
	}
	cp, unlock, resp, err := c.create(ctx, req, config, hostConfig, "")
	if cp == nil {
		return resp, err
	}
	defer unlock()
	// The index's start inspects once: the pid gives the netns path, and
	// the record makes the index current before we answer.
	if err := c.start(ctx, cp); err != nil {
		c.undo(ctx, cp, false)
		return nil, err
	}
	req.timer.step("inspect")
	if !cp.HostNetwork {
		if err := c.ds.setUpSandboxNetwork(ctx, cp, req.cfg); err != nil {
			c.undo(ctx, cp, true)
			return nil, err
		}
		req.timer.step("network")
	}
	req.timer.done("podSandboxID", cp.SandboxID)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: cp.SandboxID}, nil
}
