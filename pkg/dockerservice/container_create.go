package dockerservice

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/imageref"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// CreateContainer creates (does not start) a workload container in a
// running sandbox. The Docker calls are the unavoidable ones: the image's
// inspect (presence, digest, stop signal), the sandbox's inspect (its
// resolv.conf, hosts and cgroup parent) and the create. The index holds
// the new container before the call returns.
func (ds *DockerService) CreateContainer(ctx context.Context, r *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	cfg := r.GetConfig()
	if err := dockerspec.ValidateCreateContainer(r); err != nil {
		return nil, err
	}
	logPath, err := ds.logPlaces().Resolve(r.GetSandboxConfig().GetLogDirectory(), cfg.GetLogPath())
	if err != nil {
		return nil, err
	}
	if err := ds.requireSynced(); err != nil {
		return nil, err
	}
	sb, err := ds.runningSandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	sbInfo := sb.SandboxInfo()
	md := cfg.GetMetadata()
	name := labelcodec.ContainerName(sbInfo.Metadata, md)
	t := newStepTimer(ctx, "CreateContainer", "pod", klog.KRef(sbInfo.Metadata.Namespace, sbInfo.Metadata.Name), "container", md.Name)

	imageName := cfg.GetImage().GetImage()
	img, err := ds.engine.ImageInspect(ctx, imageName)
	if errdefs.IsNotFound(err) {
		return nil, crirpc.NotFoundf("image %q of container %s is not present on the node; pull it first (kubelet pulls before it creates)", imageName, md.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("inspecting image %q of container %s: %w", imageName, md.Name, err)
	}
	t.step("image")

	pidTarget, err := ds.pidTarget(cfg)
	if err != nil {
		return nil, err
	}
	// What the container takes from its sandbox depends on its mode.
	join, err := ds.controllerOf(sb, nil).joinSandbox(ctx, sb)
	if err != nil {
		return nil, err
	}
	t.step("sandbox")

	stopSignal := labelcodec.DockerSignal(cfg.GetStopSignal())
	if stopSignal == "" && img.Config != nil {
		stopSignal = img.Config.StopSignal
	}
	stopSignal = labelcodec.NormalizeDockerSignal(stopSignal)
	if stopSignal == "" {
		stopSignal = "SIGTERM"
	}
	labels, err := labelcodec.ContainerLabels(labelcodec.ContainerInput{
		SandboxID:  sb.ID,
		Pod:        sbInfo.Metadata,
		Config:     cfg,
		LogPath:    logPath,
		ImageRef:   imageRef(img, imageName),
		StopSignal: stopSignal,
	})
	if err != nil {
		return nil, crirpc.WithCode(codes.InvalidArgument, err)
	}
	apiVersion, err := ds.engine.APIVersion(ctx)
	if err != nil {
		return nil, err
	}
	if err := ds.checkRecursiveReadOnlyMounts(ctx, cfg.GetMounts(), sbInfo.RuntimeHandler, apiVersion); err != nil {
		return nil, fmt.Errorf("container %s of pod sandbox %s: %w", md.Name, sb.ID, err)
	}
	userns, usernsKey, err := ds.sandboxUserNS(sb, sbInfo)
	if err != nil {
		return nil, err
	}
	if usernsKey != nil && join.pauseless == nil {
		// The marker names the user namespace: signed with its
		// directory's key, which may be an earlier --netns-dir's.
		join.ociKey = usernsKey
	}
	wrapper := ds.wrapperRuntime(ctx, sbInfo.RuntimeHandler)
	if join.runtime == OCIWrapperRuntime {
		wrapper = join.runtime // a pause-less pod's containers run under it
	}
	in := dockerspec.ContainerInput{
		Config:     cfg,
		Labels:     labels,
		SandboxID:  sb.ID,
		SandboxNS:  sbInfo.NamespaceOptions,
		PidTarget:  pidTarget,
		APIVersion: apiVersion,
		SELinux:    ds.containers.selinux,
		Pauseless:  join.pauseless,
		OCIKey:     join.ociKey,
		KeyDir:     ds.pins.keyDir(),
		UserNS:     userns,
		// The wrapper replaces the pod's runtime handler by runc.
		WrapperRuntime: wrapper,
		// An infra container's files and cgroup parent, a pause-less
		// sandbox's cgroup parent.
		ResolvConfPath: join.resolvConfPath,
		HostsPath:      join.hostsPath,
		CgroupParent:   join.cgroupParent,
		OOMScoreAdj:    ds.containers.oom.apply,
	}
	config, hc, err := dockerspec.ContainerConfig(in)
	if err != nil {
		return nil, fmt.Errorf("container %s of pod sandbox %s: %w", md.Name, sb.ID, err)
	}
	if err := ds.checkImageVolumes(ctx, cfg); err != nil {
		return nil, fmt.Errorf("container %s of pod sandbox %s: %w", md.Name, sb.ID, err)
	}
	// The pod's runtime handler, checked when its sandbox was run, unless
	// the sandbox's mode or the container's marker (the OCI wrapper, set
	// by ContainerConfig) says otherwise.
	switch {
	case hc.Runtime != "":
	case join.runtime != "":
		hc.Runtime = join.runtime
	default:
		hc.Runtime = sbInfo.RuntimeHandler
	}

	created, err := ds.createOwned(ctx, config, hc, name, func(rec *store.Record) {
		rec.ImageID = img.ID
		rec.Container = withLimits(rec.Container, hc)
	})
	switch {
	case errdefs.IsConflict(err):
		return nil, ds.nameConflict(ctx, name, err)
	case errdefs.IsNotFound(err):
		// The image was removed between the inspect and the create.
		return nil, crirpc.NotFoundf("creating container %s: image %q is not present on the node (%v); pull it first", name, imageName, err)
	case err != nil:
		return nil, fmt.Errorf("creating container %s: %w", name, err)
	}
	for _, w := range created.Warnings {
		klog.FromContext(ctx).V(2).Info("Docker warning on container create", "container", name, "containerID", created.ID, "warning", w)
	}
	t.step("create")
	t.done("containerID", created.ID, "namespaces", dockerspec.DescribeNamespaces(hc))
	return &runtimeapi.CreateContainerResponse{ContainerId: created.ID}, nil
}

// runningSandbox finds the sandbox a container is created in. Its infra
// container must run: the new container joins its namespaces, which a
// stopped sandbox no longer has (kubelet makes a new sandbox then).
func (ds *DockerService) runningSandbox(id string) (*store.Record, error) {
	sb, err := ds.store().Resolve(id)
	if err != nil {
		return nil, crirpc.InvalidArgf("%v", err)
	}
	if sb == nil || sb.Kind != store.KindSandbox {
		return nil, crirpc.NotFoundf("pod sandbox %s not found", id)
	}
	if !sb.Running() {
		return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s is not ready: its infra container is not running; containers can only be created in a ready sandbox", sb.ID))
	}
	return sb, nil
}

// pidTarget resolves the container whose pid namespace a TARGET mode
// joins.
func (ds *DockerService) pidTarget(cfg *runtimeapi.ContainerConfig) (string, error) {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if ns.GetPid() != runtimeapi.NamespaceMode_TARGET {
		return "", nil
	}
	target, err := ds.store().Resolve(ns.GetTargetId())
	if err != nil {
		return "", crirpc.InvalidArgf("pid namespace target: %v", err)
	}
	if target == nil || ns.GetTargetId() == "" {
		return "", crirpc.NotFoundf("pid namespace target container %q not found", ns.GetTargetId())
	}
	return target.ID, nil
}

// nameConflict explains a create refused because the name is taken.
func (ds *DockerService) nameConflict(ctx context.Context, name string, err error) error {
	holder := "another container"
	if c, ierr := ds.engine.ContainerInspect(ctx, name); ierr == nil {
		holder = "container " + c.ID
	}
	return crirpc.WithCode(codes.AlreadyExists, fmt.Errorf("container name %s is already in use by %s; remove it first, or create with another attempt number: %w", name, holder, err))
}

// imageRef is what the CRI calls the image ref: the repo digest of the
// requested repository when the image has one (what a pull by digest
// would use), else its first repo digest, else its ID. Digests are
// normalised as ListImages gives them: Docker reports familiar names
// ("busybox@sha256:…"), whichever name the image was asked by.
func imageRef(img image.InspectResponse, requested string) string {
	_, digests := imageref.RepoRefs(nil, img.RepoDigests)
	if named, err := reference.ParseNormalizedNamed(requested); err == nil && !imageref.IsID(requested) {
		for _, d := range digests {
			if n, err := reference.ParseNormalizedNamed(d); err == nil && n.Name() == named.Name() {
				return d
			}
		}
	}
	if len(digests) > 0 {
		return digests[0]
	}
	return img.ID
}
