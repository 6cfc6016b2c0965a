package dockerservice

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/crilog"
	"github.com/netshim/netshim/pkg/dockerservice/cridockerd"
	"github.com/netshim/netshim/pkg/dockerservice/images"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// Taking over cri-dockerd's pods, once the index has read them
// (labelcodec/cridockerd.go decodes them): before kubelet is let in, each adopted
// sandbox gets a netshim checkpoint made from cri-dockerd's (its host
// ports) and from libcni's cache or its netns (its IPs), and each adopted
// container's log, a symlink to Docker's json-file log under cri-dockerd,
// becomes a CRI log file that the log followers fill from the start of
// Docker's log. From then on they are netshim's pods: stop and remove tear
// their network down from libcni's cache, which holds the config and
// arguments cri-dockerd's ADD was given, and remove cri-dockerd's
// checkpoint with netshim's.

// criDockerd is cri-dockerd's root directory, where its checkpoints are.
func (ds *DockerService) criDockerd() cridockerd.Root {
	return cridockerd.Root(ds.cfg.CRIDockerdRootDir)
}

// adoptCRIDockerd makes the adopted sandboxes and logs netshim's. It runs
// once, after the first sync and before readers are let in.
func (ds *DockerService) adoptCRIDockerd(ctx context.Context) {
	sandboxes, logs := 0, 0
	for _, rec := range ds.store().List(store.KindSandbox) {
		if rec.SandboxInfo().Adopted && ds.adoptSandbox(ctx, rec) {
			sandboxes++
		}
	}
	for _, rec := range ds.store().List(store.KindContainer) {
		if rec.ContainerInfo().Adopted && ds.adoptContainerLog(ctx, rec) {
			logs++
		}
	}
	ds.nameAdoptedImages(ctx)
	orphans := ds.adoptOrphanCheckpoints(ctx)
	klog.InfoS("Took over cri-dockerd's pods", "sandboxes", sandboxes, "sandboxesWithoutContainer", orphans, "logFiles", logs, "criDockerdRootDir", ds.cfg.CRIDockerdRootDir)
}

// adoptOrphanCheckpoints takes over cri-dockerd's checkpoints whose sandbox
// container is gone. cri-dockerd lists such a sandbox NOTREADY so that
// kubelet removes it and its network is torn down; its IP is still held
// until then. netshim lists it the same way, from a checkpoint of its
// own, and its start-up teardown frees the network from libcni's cache
// (sandbox_teardown_retry.go). The pod's UID is not in cri-dockerd's
// checkpoint; it stays empty.
func (ds *DockerService) adoptOrphanCheckpoints(ctx context.Context) int {
	dir := ds.criDockerd().Dir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			klog.FromContext(ctx).Error(err, "Cannot list cri-dockerd's checkpoints", "dir", dir)
		}
		return 0
	}
	n := 0
	for _, e := range entries {
		id := e.Name()
		if !e.Type().IsRegular() || !cridockerd.IsContainerID(id) {
			continue
		}
		if _, ok := ds.store().Get(id); ok || ds.getCheckpoint(id) != nil {
			continue
		}
		if ds.adoptOrphanCheckpoint(ctx, id) {
			n++
		}
	}
	return n
}

func (ds *DockerService) adoptOrphanCheckpoint(ctx context.Context, id string) bool {
	log := klog.FromContext(ctx).WithValues("podSandboxID", id)
	path := ds.criDockerd().Path(id)
	b, err := os.ReadFile(path)
	if err != nil {
		log.Error(err, "Cannot read cri-dockerd's checkpoint of a sandbox without a container")
		return false
	}
	var old cridockerd.Checkpoint
	if err := json.Unmarshal(b, &old); err != nil || old.Version != "v1" || old.Name == "" || old.Namespace == "" {
		log.Error(err, "Ignoring cri-dockerd's checkpoint of a sandbox without a container: not a v1 checkpoint naming a pod", "path", path)
		return false
	}
	mappings, err := old.PortMappings()
	if err != nil {
		log.Error(err, "cri-dockerd's checkpoint of a sandbox without a container has unusable host ports; taking it over without them", "path", path)
	}
	unlock, err := ds.pods.Lock(ctx, id)
	if err != nil {
		return false
	}
	defer unlock()
	cp := &checkpoint.PodSandbox{
		Version:      checkpoint.CurrentVersion,
		SandboxID:    id,
		Name:         old.Name,
		Namespace:    old.Namespace,
		HostNetwork:  old.Data != nil && old.Data.HostNetwork,
		PortMappings: mappings,
		Setup:        checkpoint.SetupReady,
	}
	if err := ds.putCheckpoint(cp); err != nil {
		log.Error(err, "Failed to write the checkpoint of a cri-dockerd sandbox without a container")
		return false
	}
	log.Info("Took over a cri-dockerd sandbox whose container is gone; its network is torn down", "pod", klog.KRef(cp.Namespace, cp.Name))
	return true
}

// adoptSandbox writes the netshim checkpoint of an adopted sandbox that has
// none yet (a restarted netshim finds the one it wrote before). It reports
// whether it wrote one.
func (ds *DockerService) adoptSandbox(ctx context.Context, rec *store.Record) bool {
	unlock, err := ds.pods.Lock(ctx, rec.ID)
	if err != nil {
		return false
	}
	defer unlock()
	if ds.getCheckpoint(rec.ID) != nil {
		return false
	}
	info := rec.SandboxInfo()
	md := info.Metadata
	cp := &checkpoint.PodSandbox{
		Version:     checkpoint.CurrentVersion,
		SandboxID:   rec.ID,
		Name:        md.GetName(),
		Namespace:   md.GetNamespace(),
		UID:         md.GetUid(),
		Attempt:     md.GetAttempt(),
		HostNetwork: info.NamespaceOptions.GetNetwork() == runtimeapi.NamespaceMode_NODE,
		CreatedAt:   rec.CreatedAt,
		Setup:       checkpoint.SetupReady,
	}
	log := klog.FromContext(ctx).WithValues("podSandboxID", rec.ID, "pod", klog.KRef(cp.Namespace, cp.Name))
	old, err := ds.criDockerd().Read(rec.ID, md)
	if err == nil && old != nil {
		cp.PortMappings, err = old.PortMappings()
	}
	switch {
	case err != nil:
		// The host ports are then unknown. portmap deletes a pod's rules
		// by its container ID, so teardown still removes them.
		log.Error(err, "Cannot use cri-dockerd's checkpoint of an adopted sandbox; taking it over without its host ports")
	case old == nil:
		log.Info("An adopted sandbox has no cri-dockerd checkpoint; taking it over without host ports", "dir", ds.criDockerd().Dir())
	}
	if !cp.HostNetwork && rec.Running() {
		sctx, cancel := context.WithTimeout(ctx, recoverStatusTimeout)
		st, err := ds.network.GetPodNetworkStatus(sctx, podRef(cp))
		cancel()
		if err == nil && len(st.IPs) > 0 {
			cp.IPs, cp.NetworkResult = orderPodIPs(st.IPs), st.Result
		} else {
			// As for a lost checkpoint: NOTREADY, so kubelet replaces the
			// pod, and the start-up teardown frees what its network holds.
			cp.Setup = checkpoint.SetupPending
			log.Error(err, "Cannot find the IPs of an adopted sandbox in libcni's cache or its netns; it is reported NOTREADY so that kubelet replaces it")
		}
	}
	if err := ds.putCheckpoint(cp); err != nil {
		// Kept in memory: the pod stays usable, and the next start
		// adopts it again.
		log.Error(err, "Failed to write the checkpoint of an adopted sandbox; keeping it in memory")
		ds.pods.Put(cp)
		ds.checkpointChanged(cp.SandboxID)
	}
	log.Info("Took over a cri-dockerd sandbox", "ready", cp.Setup == checkpoint.SetupReady, "ips", cp.IPs, "hostPorts", len(cp.PortMappings))
	return true
}

// adoptContainerLog replaces the symlink cri-dockerd left at an adopted
// container's log path with a CRI log file, which the followers started
// right after fill from the start of Docker's log (or drain, for a
// container that exited). Only a symlink to this container's own Docker
// log is replaced. It reports whether it replaced one.
func (ds *DockerService) adoptContainerLog(ctx context.Context, rec *store.Record) bool {
	info := rec.ContainerInfo()
	if info.LogPath == "" || rec.StartedAt == 0 {
		return false
	}
	log := klog.FromContext(ctx).WithValues("containerID", rec.ID, "path", info.LogPath)
	if err := ds.logPlaces().CheckPlace(info.LogPath); err != nil {
		log.Error(err, "Not taking over the log of an adopted container")
		return false
	}
	if info.DockerLogPath == "" {
		return false // not the json-file driver: cri-dockerd made no link
	}
	replaced, err := crilog.ReplaceLink(info.LogPath, info.DockerLogPath)
	if err != nil {
		log.Error(err, "Cannot take over the log of an adopted container; kubelet keeps reading what is there")
		return false
	}
	if replaced {
		log.V(2).Info("Took over the log of an adopted container", "dockerLog", info.DockerLogPath)
	}
	return replaced
}

// removeCRIDockerdCheckpoint removes cri-dockerd's checkpoint of an
// adopted sandbox being removed, so that nothing of the pod is left for
// cri-dockerd, should the node go back to it.
func (ds *DockerService) removeCRIDockerdCheckpoint(ctx context.Context, id string) {
	if !ds.cfg.AdoptCRIDockerd {
		return
	}
	path := ds.criDockerd().Path(id)
	if path == "" {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		klog.FromContext(ctx).Error(err, "Failed to remove cri-dockerd's checkpoint of a removed sandbox", "podSandboxID", id, "path", path)
	}
}

// nameAdoptedImages looks up, once, the images of the adopted containers
// (one inspect per image, at start-up, never on a poll), and hands their
// names (images.AdoptedImage: how cri-dockerd named them) to the images
// service.
func (ds *DockerService) nameAdoptedImages(ctx context.Context) {
	names := map[string]images.AdoptedImage{}
	for _, rec := range ds.store().List(store.KindContainer) {
		if !rec.ContainerInfo().Adopted || rec.ImageID == "" {
			continue
		}
		if _, done := names[rec.ImageID]; done {
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, recoverStatusTimeout)
		img, err := ds.engine.ImageInspect(ictx, rec.ImageID)
		cancel()
		if err != nil {
			klog.FromContext(ctx).Error(err, "Cannot inspect the image of an adopted container; ContainerStatus reports its ID", "containerID", rec.ID, "image", rec.ImageID)
			names[rec.ImageID] = images.AdoptedImage{}
			continue
		}
		n := images.AdoptedImage{Name: rec.ImageID, Ref: "docker://" + img.ID}
		if len(img.RepoTags) > 0 {
			n.Name = img.RepoTags[0]
		}
		if len(img.RepoDigests) > 0 {
			n.Ref = "docker-pullable://" + img.RepoDigests[0]
		}
		names[rec.ImageID] = n
	}
	ds.images.SetAdopted(names)
}

// adoptedImageOf is what ContainerStatus reports as an adopted
// container's image, as cri-dockerd did; ok is false for any other
// container.
func (ds *DockerService) adoptedImageOf(rec *store.Record, info *labelcodec.Container) (*runtimeapi.ImageSpec, string, bool) {
	if !info.Adopted {
		return nil, "", false
	}
	n := ds.images.Adopted(rec.ImageID)
	if n.Name == "" {
		return nil, "", false
	}
	return &runtimeapi.ImageSpec{Image: n.Name}, n.Ref, true
}
