package dockerservice

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/checkpoint"
)

// PodSandboxStatus reports a sandbox from one inspect of its infra
// container and its in-memory checkpoint; IPs come from the checkpoint, so
// no netns is entered and nothing is forked. A sandbox whose container is
// gone but whose checkpoint remains is reported NOTREADY, so that kubelet
// and crictl can still stop and remove it.
func (ds *DockerService) PodSandboxStatus(ctx context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	ref, found, err := ds.lookupSandbox(ctx, r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, notFoundf("pod sandbox %s not found", r.GetPodSandboxId())
	}
	st := &runtimeapi.PodSandboxStatus{Id: ref.id, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}
	nsOpts := &runtimeapi.NamespaceOption{}
	if ref.c != nil {
		labels := ref.c.Config.Labels
		st.Metadata = sandboxMetadataFromLabels(labels)
		st.Labels, st.Annotations = splitLabels(labels)
		st.RuntimeHandler = labels[labelRuntimeHandler]
		nsOpts = namespaceOptionsFromLabels(labels)
		if created, err := time.Parse(time.RFC3339Nano, ref.c.Created); err == nil {
			st.CreatedAt = created.UnixNano()
		}
		if ref.running() && !ds.isSettingUp(ref.id) {
			st.State = runtimeapi.PodSandboxState_SANDBOX_READY
		}
	} else {
		st.Metadata = &runtimeapi.PodSandboxMetadata{Name: ref.cp.Name, Namespace: ref.cp.Namespace, Uid: ref.cp.UID, Attempt: ref.cp.Attempt}
		st.CreatedAt = ref.cp.CreatedAt
		if ref.cp.HostNetwork {
			nsOpts.Network = runtimeapi.NamespaceMode_NODE
		}
	}
	st.Linux = &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: nsOpts}}
	if ips := podIPs(ref.cp); len(ips) > 0 {
		st.Network = &runtimeapi.PodSandboxNetworkStatus{Ip: ips[0]}
		for _, ip := range ips[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: st}
	if r.GetVerbose() {
		info, err := sandboxVerboseInfo(ref)
		if err != nil {
			return nil, err
		}
		resp.Info = info
	}
	return resp, nil
}

// podIPs are the IPs a sandbox holds: none for host-network pods or once
// its network is torn down.
func podIPs(cp *checkpoint.PodSandbox) []string {
	if cp == nil || cp.HostNetwork || cp.NetworkTornDown {
		return nil
	}
	return cp.IPs
}

// sandboxVerboseInfo is the "info" map of a verbose status: what netshim
// knows beyond the CRI fields, for people debugging a pod.
func sandboxVerboseInfo(ref sandboxRef) (map[string]string, error) {
	info := struct {
		Checkpoint    *checkpoint.PodSandbox `json:"checkpoint,omitempty"`
		NetworkResult json.RawMessage        `json:"cniResult,omitempty"`
		Image         string                 `json:"image,omitempty"`
		Pid           int                    `json:"pid,omitempty"`
		ContainerName string                 `json:"containerName,omitempty"`
	}{Checkpoint: ref.cp}
	if ref.cp != nil {
		info.NetworkResult = ref.cp.NetworkResult
	}
	if ref.c != nil {
		info.Image = ref.c.Config.Image
		info.ContainerName = ref.c.Name
		if ref.c.State != nil {
			info.Pid = ref.c.State.Pid
		}
	}
	data, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("encoding verbose status of pod sandbox %s: %w", ref.id, err)
	}
	return map[string]string{"info": string(data)}, nil
}
