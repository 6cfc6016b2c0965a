package dockerservice

import (
	"context"
	"encoding/json"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/network"
)

// PodSandboxStatus reports a sandbox from the state index and its
// in-memory checkpoint: no Docker call, no file read, no netns entered (a
// pause-less sandbox's pinned files are statfs'd: pauselessPinned). A
// sandbox whose container is gone but whose checkpoint remains is reported
// NOTREADY, so that kubelet and crictl can still stop and remove it.
func (ds *DockerService) PodSandboxStatus(ctx context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	ref, err := ds.mustFindSandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: ds.sandboxStatusOf(ref)}
	if r.GetVerbose() {
		mode, why := ds.sandboxModeOf(ref.rec, ref.cp)
		info, err := sandboxVerboseInfo(ref, sandboxModeInfo{Mode: mode, Reason: why, Detail: modeReasonText(why)}, ds.checkSandboxNetwork(ctx, ref))
		if err != nil {
			return nil, err
		}
		resp.Info = info
	}
	return resp, nil
}

// sandboxStatusOf is the status of a sandbox the index or the checkpoints
// know, as PodSandboxStatus reports it (and container events carry it).
func (ds *DockerService) sandboxStatusOf(ref sandboxRef) *runtimeapi.PodSandboxStatus {
	st := &runtimeapi.PodSandboxStatus{Id: ref.id, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}
	nsOpts := &runtimeapi.NamespaceOption{}
	if ref.rec != nil {
		info := ref.rec.SandboxInfo()
		st.Metadata = info.Metadata
		st.Labels, st.Annotations = info.Labels, info.Annotations
		st.RuntimeHandler = info.RuntimeHandler
		st.CreatedAt = ref.rec.CreatedAt
		// The state and the IPs come from one checkpoint: read twice, a
		// setup finishing in between reads READY with no IP.
		st.State = stateOf(ref.rec.Running(), ref.cp)
		nsOpts = info.NamespaceOptions
	} else {
		st.Metadata = &runtimeapi.PodSandboxMetadata{Name: ref.cp.Name, Namespace: ref.cp.Namespace, Uid: ref.cp.UID, Attempt: ref.cp.Attempt}
		st.CreatedAt = ref.cp.CreatedAt
		if ref.cp.HostNetwork {
			nsOpts = &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}
		}
	}
	st.Linux = &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: nsOpts}}
	// A pod network's status is always there, empty while the sandbox has
	// no IP: kubelet reads a nil one as "host network" in places.
	if nsOpts.GetNetwork() != runtimeapi.NamespaceMode_NODE {
		st.Network = &runtimeapi.PodSandboxNetworkStatus{}
		if ips := podIPs(ref.cp); len(ips) > 0 {
			st.Network.Ip = ips[0]
			for _, ip := range ips[1:] {
				st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
			}
		}
	}
	return st
}

// sandboxState is READY while the infra container runs and its checkpoint
// says the network setup completed and has not been torn down since.
func (ds *DockerService) sandboxState(id string, running bool) runtimeapi.PodSandboxState {
	return stateOf(running, ds.getCheckpoint(id))
}

// stateOf is sandboxState for a checkpoint already in hand.
func stateOf(running bool, cp *checkpoint.PodSandbox) runtimeapi.PodSandboxState {
	if running && checkpointReady(cp) {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

// sandboxReady says whether the sandbox's checkpoint records a completed
// network setup. With no checkpoint nothing is known (an undo that lost it,
// a checkpoint that could not be rebuilt), so the sandbox is not ready.
func (ds *DockerService) sandboxReady(id string) bool {
	return checkpointReady(ds.getCheckpoint(id))
}

// checkpointReady is sandboxReady for a checkpoint already in hand.
func checkpointReady(cp *checkpoint.PodSandbox) bool {
	return cp != nil && cp.NetworkReady() && !cp.TeardownStarted && !cp.NetworkTornDown && pauselessPinned(cp)
}

// podIPs are the IPs a sandbox holds: none for host-network pods or once
// its network's teardown began (a DEL may have freed them, even if it did
// not complete).
func podIPs(cp *checkpoint.PodSandbox) []string {
	if cp == nil || cp.HostNetwork || cp.TeardownStarted || cp.NetworkTornDown || !cp.NetworkReady() {
		return nil
	}
	return cp.IPs
}

// sandboxModeInfo is a sandbox's mode in its verbose status: the mode,
// the modeReason code and that code in words.
type sandboxModeInfo struct {
	Mode   string `json:"mode"`
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// sandboxVerboseInfo is the "info" map of a verbose status: what netshim
// knows beyond the CRI fields, for people debugging a pod.
func sandboxVerboseInfo(ref sandboxRef, mode sandboxModeInfo, check *network.CheckResult) (map[string]string, error) {
	info := struct {
		Mode          sandboxModeInfo        `json:"sandboxMode"`
		Checkpoint    *checkpoint.PodSandbox `json:"checkpoint,omitempty"`
		NetworkResult json.RawMessage        `json:"cniResult,omitempty"`
		NetworkCheck  *network.CheckResult   `json:"networkCheck,omitempty"` // CNI CHECK
		Image         string                 `json:"image,omitempty"`
		Pid           int                    `json:"pid,omitempty"`
		ContainerName string                 `json:"containerName,omitempty"`
	}{Mode: mode, Checkpoint: ref.cp, NetworkCheck: check}
	if ref.cp != nil {
		info.NetworkResult = ref.cp.NetworkResult
	}
	if ref.rec != nil {
		info.Image = ref.rec.Image
		info.ContainerName = ref.rec.Name
		info.Pid = ref.rec.Pid
	}
	data, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("encoding verbose status of pod sandbox %s: %w", ref.id, err)
	}
	return map[string]string{"info": string(data)}, nil
}

// checkSandboxNetwork verifies a running sandbox's network (CNI CHECK) for
// verbose status; nil when there is nothing to check.
func (ds *DockerService) checkSandboxNetwork(ctx context.Context, ref sandboxRef) *network.CheckResult {
	if ref.cp == nil || ref.cp.HostNetwork || ref.cp.NetworkTornDown || ref.rec == nil || !ref.rec.Running() {
		return nil
	}
	return ds.network.CheckPod(ctx, podRef(ref.cp))
}
