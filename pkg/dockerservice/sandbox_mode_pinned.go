package dockerservice

import (
	"context"
	"errors"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/podns"
)

// pinnedSandboxes is the pinned mode: netshim pins the pod's netns before
// the pause container exists, and the OCI wrapper (netshim-oci) puts the
// container into it; the pause container holds the IPC, UTS and PID
// namespaces. The ADD then need not wait for Docker's start
// (sandbox_netns.go).
type pinnedSandboxes struct{ infraSandboxes }

func (pinnedSandboxes) mode() string { return SandboxNetNSPinned }

// run pins the netns, writes the pod's net.* sysctls into it, creates the
// pause container under the wrapper, and starts it while the ADD runs.
func (c pinnedSandboxes) run(ctx context.Context, req *sandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	ds := c.ds
	config, hostConfig, err := c.dockerConfig(ctx, req)
	if err != nil {
		return nil, err
	}
	paths, done, err := ds.pinSandboxNetNS()
	if err != nil {
		return nil, err
	}
	netns := paths[podns.Net]
	// Until the checkpoint names it, the netns is this call's to remove
	// on every way out, and the start-up sweep's to leave.
	defer func() {
		done()
		if netns != "" {
			if err := ds.pins.pinner.Remove(netns); err != nil {
				klog.FromContext(ctx).Error(err, "Failed to remove the pinned netns of a sandbox that was not created", "netns", netns)
			}
		}
	}()
	// The pod's net.* sysctls go into the netns now, before the ADD
	// (sandbox_sysctls.go): runc would write them as the pause container
	// starts, which runs along with the ADD. Its IPC sysctls stay with
	// the pause container, whose IPC namespace it is. A refused one fails
	// the pod here, the netns removed by the defer above.
	if err := ds.writePodSysctls(req.cfg, paths); err != nil {
		return nil, err
	}
	hostConfig.Sysctls = withoutSysctlsOf(hostConfig.Sysctls, podns.Net)
	hostConfig.Runtime = OCIWrapperRuntime
	config.Env = append(config.Env, paths.Env(ds.pins.ociKey))
	config.Labels[labelNetNS] = netns
	req.timer.step("netns")

	cp, unlock, resp, err := c.create(ctx, req, config, hostConfig, netns)
	if cp == nil {
		return resp, err
	}
	defer unlock()
	netns = "" // the checkpoint has it now: undo and teardown remove it
	if err := c.startWithNetwork(ctx, cp, req.cfg); err != nil {
		return nil, err
	}
	req.timer.step("start+network")
	req.timer.done("podSandboxID", cp.SandboxID)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: cp.SandboxID}, nil
}

// startWithNetwork starts the infra container in the sandbox's pinned
// netns and, at the same time, sets the pod network up in it: the CNI ADD
// does not wait for Docker, so RunPodSandbox takes about the longer of the
// two instead of their sum. Either failing undoes both, once both ended.
// The pod's net.* sysctls are in the netns already, and the container
// carries none: nothing the start does changes what the ADD sets.
func (c pinnedSandboxes) startWithNetwork(ctx context.Context, cp *checkpoint.PodSandbox, cfg *runtimeapi.PodSandboxConfig) error {
	netErr := make(chan error, 1)
	go func() { netErr <- c.ds.setUpSandboxNetwork(ctx, cp, cfg) }()
	startErr := c.start(ctx, cp)
	err := <-netErr
	if startErr != nil || err != nil {
		// The ADD ran (or was attempted): tear it down either way.
		c.undo(ctx, cp, true)
		return errors.Join(startErr, err)
	}
	return nil
}
