package dockerservice

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// Reasons of an exited container, as kubelet shows them.
const (
	reasonCompleted  = "Completed"
	reasonError      = "Error"
	reasonOOMKilled  = "OOMKilled"
	reasonStartError = "StartError"
)

// ContainerStatus answers from the state index with no Docker call (the
// events stream keeps exit code, finish time and OOM kills current); the
// user of a running container is read from /proc (container_user.go). Only
// a verbose status, which people ask for rather than kubelet, inspects the
// container for its Docker config.
func (ds *DockerService) ContainerStatus(ctx context.Context, r *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	rec, err := ds.mustFindContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	st, info := ds.containerStatusOf(rec)
	resp := &runtimeapi.ContainerStatusResponse{Status: st}
	if r.GetVerbose() {
		resp.Info = ds.containerVerboseInfo(ctx, rec, info)
	}
	return resp, nil
}

// containerStatusOf is a container's status as ContainerStatus reports it
// (and container events carry it), with the decoded labels it came from.
func (ds *DockerService) containerStatusOf(rec *store.Record) (*runtimeapi.ContainerStatus, *labelcodec.Container) {
	info := rec.ContainerInfo()
	state := ds.visibleState(rec)
	st := &runtimeapi.ContainerStatus{
		Id:          rec.ID,
		Metadata:    info.Metadata,
		State:       state,
		CreatedAt:   rec.CreatedAt,
		StartedAt:   rec.StartedAt,
		FinishedAt:  rec.FinishedAt,
		ExitCode:    int32(rec.ExitCode),
		Image:       imageSpecOf(rec, info),
		ImageRef:    imageRefOf(rec, info),
		ImageId:     rec.ImageID,
		Labels:      info.Labels,
		Annotations: info.Annotations,
		Mounts:      info.Mounts,
		LogPath:     info.LogPath,
		StopSignal:  info.StopSignal,
		Message:     rec.Error,
	}
	if img, ref, ok := ds.adoptedImageOf(rec, info); ok { // adopt.go
		st.Image, st.ImageRef = img, ref
	}
	switch {
	case state == runtimeapi.ContainerState_CONTAINER_RUNNING:
		st.User = ds.containers.runningUser(rec, func(id string) bool { _, ok := ds.store().Get(id); return ok })
	case state == runtimeapi.ContainerState_CONTAINER_EXITED:
		st.Reason = exitReason(rec)
	case state != containerState(rec):
		// Exited, but its log is still being copied: not yet.
		st.FinishedAt, st.ExitCode, st.Message = 0, 0, ""
	}
	if info.Resources != nil {
		st.Resources = &runtimeapi.ContainerResources{Linux: info.Resources}
	}
	return st, info
}

// exitReason says why an exited container ended.
func exitReason(r *store.Record) string {
	switch {
	case startFailed(r):
		return reasonStartError
	case r.OOMKilled:
		return reasonOOMKilled
	case r.ExitCode == 0:
		return reasonCompleted
	}
	return reasonError
}

// containerVerboseInfo is the "info" map of a verbose status: what netshim
// and Docker know beyond the CRI fields, for people debugging a container.
func (ds *DockerService) containerVerboseInfo(ctx context.Context, rec *store.Record, info *labelcodec.Container) map[string]string {
	v := struct {
		SandboxID     string                `json:"sandboxID"`
		Pid           int                   `json:"pid"`
		ContainerName string                `json:"containerName"`
		Image         string                `json:"image"`
		ImageID       string                `json:"imageID,omitempty"`
		LogPath       string                `json:"logPath,omitempty"`
		StopSignal    string                `json:"stopSignal,omitempty"`
		Tty           bool                  `json:"tty"`
		Config        *container.Config     `json:"dockerConfig,omitempty"`
		HostConfig    *container.HostConfig `json:"dockerHostConfig,omitempty"`
		State         *container.State      `json:"dockerState,omitempty"`
		InspectError  string                `json:"inspectError,omitempty"`
	}{
		SandboxID:     rec.SandboxID,
		Pid:           rec.Pid,
		ContainerName: rec.Name,
		Image:         rec.Image,
		ImageID:       rec.ImageID,
		LogPath:       info.LogPath,
		StopSignal:    labelcodec.DockerSignal(info.StopSignal),
		Tty:           info.TTY,
	}
	if c, err := ds.engine.ContainerInspect(ctx, rec.ID); err != nil {
		v.InspectError = err.Error()
	} else {
		v.Config = c.Config
		if c.ContainerJSONBase != nil {
			v.HostConfig, v.State = c.HostConfig, c.State
		}
	}
	data, err := json.Marshal(v)
	if err != nil {
		data = []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
	}
	return map[string]string{"info": string(data)}
}
