package dockerservice

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/podns"
)

// sandboxController is one sandbox mode (docs/design/sandbox-modes.md):
// how a pod's sandbox is made, how it stops, and how it goes away.
// RunPodSandbox, StopPodSandbox and RemovePodSandbox do what every mode
// does (validation, the name's reservation, the pod's containers, the
// network teardown, the checkpoint) and call the sandbox's controller for
// the rest, so that what differs between the modes lives in the mode's
// own files:
//
//   - dockerSandboxes (sandbox_mode_docker.go): a pause container in the
//     netns Docker makes;
//   - pinnedSandboxes (sandbox_mode_pinned.go): a pause container in a
//     netns netshim pins first;
//   - pauselessSandboxes (sandbox_pauseless.go): no container, namespaces
//     netshim pins.
//
// The two modes with a pause container share infraSandboxes
// (sandbox_infra.go). A new pod's controller is chosen in one place,
// chooseSandboxController; an existing sandbox's is the one whose traces
// it has (controllerOf).
type sandboxController interface {
	// mode is the mode's --sandbox-netns name.
	mode() string
	// run makes and starts the sandbox of a request RunPodSandbox has
	// admitted (valid, its name reserved, no sandbox of that name in the
	// index) and sets its network up; a failure undoes all of it.
	run(ctx context.Context, req *sandboxRequest) (*runtimeapi.RunPodSandboxResponse, error)
	// stop ends the sandbox itself, once its containers are stopped and
	// its network is torn down (or its teardown failed, which the caller
	// reports). ref.rec is not nil.
	stop(ctx context.Context, ref sandboxRef, t *stepTimer) error
	// remove takes the sandbox itself away once its containers are
	// removed: what it runs, its pinned namespaces and its checkpoint,
	// the checkpoint last.
	remove(ctx context.Context, ref sandboxRef) error
	// podNetNS is the network namespace of the running sandbox (rec, its
	// index record), for port-forward.
	podNetNS(rec *store.Record) (string, error)
	// joinSandbox is what a container being created in the sandbox
	// (sb, its index record) takes from it.
	joinSandbox(ctx context.Context, sb *store.Record) (sandboxJoin, error)
}

// sandboxJoin is what a new container takes from its sandbox
// (CreateContainer, container_create.go).
type sandboxJoin struct {
	// pauseless is a pause-less sandbox's checkpoint: the namespaces the
	// container joins.
	pauseless *checkpoint.PodSandbox
	// resolvConfPath and hostsPath are an infra container's files, which
	// the pod's containers share.
	resolvConfPath, hostsPath string
	cgroupParent              string
	// ociKey signs the marker that tells the OCI wrapper which pinned
	// namespaces the container joins.
	ociKey *podns.Key
	// runtime is the engine runtime the container must run under, if
	// not the pod's runtime handler.
	runtime string
}

// sandboxRestorer is a controller with state of its own to restore at
// start-up, before anything is served and before the index's first sync.
type sandboxRestorer interface {
	restore()
}

// restoreSandboxes restores, at start-up, what each mode keeps outside
// Docker: the pause-less sandboxes, which have no container for the
// index's sync to find.
func (ds *DockerService) restoreSandboxes() {
	for _, ctl := range []sandboxController{dockerSandboxes{infraSandboxes{ds}}, pinnedSandboxes{infraSandboxes{ds}}, pauselessSandboxes{ds}} {
		if r, ok := ctl.(sandboxRestorer); ok {
			r.restore()
		}
	}
}

// sandboxRequest is a RunPodSandbox request as its controller gets it.
type sandboxRequest struct {
	cfg     *runtimeapi.PodSandboxConfig
	handler string
	// name is the sandbox's name (labelcodec.SandboxName), reserved.
	name string
	// cgroupParent is the pod's cgroup parent in Docker's form
	// (dockerCgroupParent).
	cgroupParent string
	timer        *stepTimer
	// mode and modeReason are the controller's mode and why the pod got
	// it (chooseSandboxController), for its checkpoint.
	mode, modeReason string
	// userns is the pod's pinned user namespace, once made (pinned mode).
	userns string
}

func (r *sandboxRequest) hostNetwork() bool { return podHostNetwork(r.cfg) }

// podHostNetwork says whether the pod uses the node's network.
func podHostNetwork(cfg *runtimeapi.PodSandboxConfig) bool {
	return cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
}

// chooseSandboxController decides how a new sandbox is made, and says why
// (a modeReason code): in the auto and pauseless modes, pause-less when the
// engine has the wrapper and the pod can do without a pause container
// (pauseNeeded), pinned when it cannot; pinned in the pinned mode; docker
// when usePinnedNetNS says the pod's netns is not pinned. The one place a
// new pod's mode is decided.
func (ds *DockerService) chooseSandboxController(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (sandboxController, string, error) {
	pinned, err := ds.usePinnedNetNS(ctx, podHostNetwork(cfg), handler)
	if _, _, userns := dockerspec.PodUserNS(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()); userns && err == nil {
		// A pod user namespace is pinned with the netns it owns, and
		// its containers join it through the wrapper.
		err = ds.usernsSupport(ctx, handler, pinned)
	}
	switch {
	case err != nil:
		return nil, "", err
	case !pinned:
		return dockerSandboxes{infraSandboxes{ds}}, ds.dockerModeReason(ctx, cfg, handler), nil
	case ds.cfg.SandboxNetNS == SandboxNetNSPinned:
		return pinnedSandboxes{infraSandboxes{ds}}, reasonConfigured, nil
	}
	if why := pauseNeeded(cfg); why != "" {
		return pinnedSandboxes{infraSandboxes{ds}}, why, nil
	}
	return pauselessSandboxes{ds}, reasonNoPauseNeeded, nil
}

// dockerModeReason says why a pod whose netns is not pinned
// (usePinnedNetNS) gets the docker mode.
func (ds *DockerService) dockerModeReason(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) string {
	switch {
	case ds.cfg.SandboxNetNS == SandboxNetNSDocker || ds.cfg.SandboxNetNS == "":
		return reasonConfigured
	case podHostNetwork(cfg):
		return reasonHostNetwork
	case handler != "":
		return reasonRuntimeHandler
	}
	if m := ds.sandboxNetNSMode(ctx); m.code != "" {
		return m.code
	}
	return reasonNoWrapper
}

// Why a sandbox got its mode: a code, in its checkpoint
// (checkpoint.PodSandbox.ModeReason), its verbose status and the label of
// the netshim_sandbox_modes metric; modeReasonText says it in words.
const (
	// reasonConfigured: --sandbox-netns named the mode (pinned or docker).
	reasonConfigured = "configured"
	// reasonNoPauseNeeded: auto or pauseless, the wrapper registered, and
	// the pod can do without a pause container.
	reasonNoPauseNeeded = "no-pause-needed"
	// reasonSharedPID: the pod's containers share a PID namespace, whose
	// init must be a pause process (pinned).
	reasonSharedPID = "shared-pid-namespace"
	// reasonNodeIPC: a pod network with the node's IPC namespace (pinned).
	reasonNodeIPC = "node-ipc-namespace"
	// reasonHostNetwork: the node's network, no netns to pin (docker).
	reasonHostNetwork = "host-network"
	// reasonRuntimeHandler: a RuntimeClass handler; the wrapper execs runc
	// (docker).
	reasonRuntimeHandler = "runtime-handler"
	// reasonNoWrapper: auto, and the engine has no netshim-oci (docker).
	reasonNoWrapper = "no-wrapper"
	// reasonEngineDefaultRuntime: auto, and the engine's default runtime
	// is not runc, which the wrapper execs (docker).
	reasonEngineDefaultRuntime = "engine-default-runtime"
	// reasonUnrecorded: a sandbox whose checkpoint does not say (made by
	// an earlier netshim, or rebuilt from its infra container).
	reasonUnrecorded = "unrecorded"
)

// modeReasonText is a modeReason code in words, for verbose status.
func modeReasonText(code string) string {
	switch code {
	case reasonConfigured:
		return "--sandbox-netns names this mode"
	case reasonNoPauseNeeded:
		return "the engine has runtime " + OCIWrapperRuntime + " and the pod needs no pause container"
	case reasonSharedPID:
		return "the pod's containers share a PID namespace (shareProcessNamespace, or no namespace options), which needs a pause process as its init"
	case reasonNodeIPC:
		return "the pod uses the node's IPC namespace (hostIPC) with a network of its own"
	case reasonHostNetwork:
		return "the pod uses the node's network (hostNetwork): no network namespace to pin"
	case reasonRuntimeHandler:
		return "the pod names a runtime handler (RuntimeClass), and " + OCIWrapperRuntime + " execs runc"
	case reasonNoWrapper:
		return "--sandbox-netns=auto and the Docker engine has no runtime " + OCIWrapperRuntime
	case reasonEngineDefaultRuntime:
		return "--sandbox-netns=auto and the Docker engine's default runtime is not runc, which " + OCIWrapperRuntime + " execs"
	}
	return "made by a netshim that did not record why, or rebuilt from its infra container"
}

// sandboxModeOf is the mode of an existing sandbox and why it got it:
// what its checkpoint recorded, else the mode of its controller.
func (ds *DockerService) sandboxModeOf(rec *store.Record, cp *checkpoint.PodSandbox) (mode, reason string) {
	if cp != nil && cp.Mode != "" {
		reason = cp.ModeReason
		if reason == "" {
			reason = reasonUnrecorded
		}
		return cp.Mode, reason
	}
	return ds.controllerOf(rec, cp).mode(), reasonUnrecorded
}

// controllerOf is the controller of an existing sandbox, from what it has:
// an index record of no container (store.Record.Local) or a checkpoint
// with pause-less namespaces is pause-less; a pinned netns, named by its
// checkpoint or its infra container, is pinned; anything else is docker.
// Decided from the sandbox, not the flags: netshim restarted in another
// mode still stops and removes the sandboxes of the one before.
func (ds *DockerService) controllerOf(rec *store.Record, cp *checkpoint.PodSandbox) sandboxController {
	switch {
	case rec != nil && rec.Local, rec == nil && cp != nil && cp.Pauseless != nil:
		return pauselessSandboxes{ds}
	case cp != nil && cp.NetNS != "", rec != nil && rec.DockerLabels[labelNetNS] != "":
		return pinnedSandboxes{infraSandboxes{ds}}
	}
	return dockerSandboxes{infraSandboxes{ds}}
}
