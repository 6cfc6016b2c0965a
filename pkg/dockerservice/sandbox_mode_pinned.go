package dockerservice

import (
	"context"
	"errors"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
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
	uids, gids, _ := dockerspec.PodUserNS(req.cfg.GetLinux().GetSecurityContext().GetNamespaceOptions())
	paths, done, err := ds.pinSandboxNetNS(uids, gids)
	if err != nil {
		return nil, err
	}
	netns, userns := paths[podns.Net], paths[podns.User]
	// Until the checkpoint names them, the netns (and user namespace) are
	// this call's to remove on every way out, and the start-up sweep's to
	// leave.
	defer func() {
		done()
		for _, f := range []string{netns, userns} {
			if f == "" {
				continue
			}
			if err := ds.pins.pinner.Remove(f); err != nil {
				klog.FromContext(ctx).Error(err, "Failed to remove a pinned namespace of a sandbox that was not created", "path", f)
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
	// The pause container joins the pod's user namespace, if it has one:
	// its IPC, UTS and PID namespaces, which runc makes, are then owned by
	// it, as the netns is.
	config.Env = append(config.Env, podns.Marker{Paths: paths, UIDs: uids, GIDs: gids}.Env(ds.pins.ociKey))
	config.Labels[labelNetNS] = netns
	if userns != "" {
		config.Labels[labelUserNS] = userns
	}
	req.userns = userns
	req.timer.step("netns")

	cp, unlock, resp, err := c.create(ctx, req, config, hostConfig, netns)
	if cp == nil {
		return resp, err
	}
	defer unlock()
	netns, userns = "", "" // the checkpoint has them now: undo and teardown remove them
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
