package dockerservice

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// ListContainers answers from the state index, with no Docker call however
// many containers there are: kubelet relists about twice a second. The
// filters are the CRI's: ID prefix, state, pod sandbox (ID or unique
// prefix) and a key=value label selector on the CRI labels. The
// unfiltered answer (kubelet's relist) and those filtered by state alone
// (its housekeeping) are built and encoded once per change of state
// (wire_cache.go).
func (ds *DockerService) ListContainers(_ context.Context, r *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	if err := ds.requireSynced(); err != nil {
		return nil, err
	}
	f := r.GetFilter()
	if f.GetId() == "" && f.GetPodSandboxId() == "" && len(f.GetLabelSelector()) == 0 {
		if slot := ds.wire.containers.slot(f.GetState() != nil, int32(f.GetState().GetState())); slot != nil {
			return cachedOrBuildIf(slot, ds.currentStateKey(), func() (*runtimeapi.ListContainersResponse, bool) {
				return ds.listContainers(f)
			}), nil
		}
	}
	resp, _ := ds.listContainers(f)
	return resp, nil
}

// listContainers builds the answer. It also says whether the answer may
// be cached until the state changes: not when a container that exited
// still shows running because its log is being copied, whose state
// changes with the copy and the clock rather than with the index.
func (ds *DockerService) listContainers(f *runtimeapi.ContainerFilter) (*runtimeapi.ListContainersResponse, bool) {
	recs := ds.containersMatching(f.GetPodSandboxId(), f.GetId(), f.GetLabelSelector())
	items := make([]*runtimeapi.Container, 0, len(recs))
	cacheable := true
	for _, rec := range recs {
		state := ds.visibleState(rec)
		if state != containerState(rec) {
			cacheable = false
		}
		if f.GetState() != nil && f.GetState().GetState() != state {
			continue
		}
		info := rec.ContainerInfo()
		items = append(items, &runtimeapi.Container{
			Id:           rec.ID,
			PodSandboxId: rec.SandboxID,
			Metadata:     info.Metadata,
			Image:        imageSpecOf(rec, info),
			ImageRef:     imageRefOf(rec, info),
			ImageId:      rec.ImageID,
			State:        state,
			CreatedAt:    rec.CreatedAt,
			Labels:       info.Labels,
			Annotations:  info.Annotations,
		})
	}
	return &runtimeapi.ListContainersResponse{Containers: items}, cacheable
}

// containersMatching returns the indexed containers of a sandbox (ID or
// unique prefix; "" for all) whose ID starts with idPrefix and whose CRI
// labels match selector: the filter ListContainers and ListContainerStats
// share. An unknown or ambiguous sandbox has no containers.
func (ds *DockerService) containersMatching(sandboxID, idPrefix string, selector map[string]string) []*store.Record {
	var recs []*store.Record
	if sandboxID != "" {
		sb, err := ds.store().Resolve(sandboxID)
		if err != nil || sb == nil || sb.Kind != store.KindSandbox {
			return nil
		}
		recs = ds.store().ContainersOf(sb.ID)
	} else {
		recs = ds.store().List(store.KindContainer)
	}
	out := recs[:0]
	for _, rec := range recs {
		if strings.HasPrefix(rec.ID, idPrefix) && matchesSelector(rec.ContainerInfo().Labels, selector) {
			out = append(out, rec)
		}
	}
	return out
}

// containerState is the CRI state of a container record. A container
// whose start failed stays "created" in Docker, with an exit code and an
// error; the CRI calls that exited (as containerd does), so that kubelet
// applies its restart policy and shows why.
func containerState(r *store.Record) runtimeapi.ContainerState {
	switch r.State {
	case store.StateCreated:
		if startFailed(r) {
			return runtimeapi.ContainerState_CONTAINER_EXITED
		}
		return runtimeapi.ContainerState_CONTAINER_CREATED
	case store.StateRunning:
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	case store.StateExited:
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return runtimeapi.ContainerState_CONTAINER_UNKNOWN
}

func startFailed(r *store.Record) bool {
	return r.State == store.StateCreated && (r.Error != "" || r.ExitCode != 0)
}

// imageSpecOf is the image as requested at create time. kubelet creates
// containers with the resolved image ID in image and the pod spec's
// reference in user_specified_image, and shows status.image as the pod's
// containerStatuses[].image: that must be the reference the user wrote
// (as containerd and CRI-O report it), not an ID, or a pod whose image was
// updated never shows the new one.
func imageSpecOf(rec *store.Record, info *labelcodec.Container) *runtimeapi.ImageSpec {
	img := info.Image
	if img.GetImage() == "" {
		return &runtimeapi.ImageSpec{Image: rec.Image}
	}
	if u := img.GetUserSpecifiedImage(); u != "" && u != img.GetImage() {
		return &runtimeapi.ImageSpec{
			Image:              u,
			Annotations:        img.GetAnnotations(),
			UserSpecifiedImage: u,
			RuntimeHandler:     img.GetRuntimeHandler(),
		}
	}
	return img
}

// imageRefOf is the image as resolved at create time (digest or ID).
func imageRefOf(rec *store.Record, info *labelcodec.Container) string {
	if info.ImageRef != "" {
		return info.ImageRef
	}
	return rec.ImageID
}
