package labelcodec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Taking over a node from cri-dockerd (--adopt-cri-dockerd): netshim reads
// the sandboxes and containers cri-dockerd made on the same engine as its
// own, so that kubelet, pointed at netshim, finds every pod as it left it
// and restarts none. This file decodes what cri-dockerd put on its
// containers; pkg/dockerservice's adopt.go takes over their checkpoints and log files.
//
// cri-dockerd (like dockershim before it) keeps nothing of its own about a
// container beyond Docker: the CRI metadata is in the container's name
// (k8s_<container>_<pod>_<namespace>_<uid>_<attempt>, sandboxes with
// "POD" as the container), the CRI labels are Docker labels as they are,
// the annotations are Docker labels under "annotation.", and three labels
// are its own. Decoding follows cri-dockerd's own reading of them, so that
// netshim reports what cri-dockerd reported.
//
// Docker merges an image's labels into its containers'. cri-dockerd reads
// them back as CRI labels all the same; so does netshim for the containers
// it adopts, since kubelet already saw them that way. The keys cri-dockerd
// relies on (type, sandbox ID, log path) it sets on every container, so
// the container's values win over any an image brings.
const (
	CRIDockerdLabelType      = "io.kubernetes.docker.type"
	CRIDockerdLabelLogPath   = "io.kubernetes.container.logpath"
	CRIDockerdLabelSandboxID = "io.kubernetes.sandbox.id"
	// CRIDockerdLabelContainerName is a kubelet label; cri-dockerd adds it
	// ("POD") to sandboxes and hides it from their CRI labels.
	CRIDockerdLabelContainerName = "io.kubernetes.container.name"
	criDockerdAnnotationPrefix   = "annotation."
	criDockerdNamePrefix         = "k8s"
	criDockerdSandboxName        = "POD"
)

// DecodeCRIDockerd decodes a container cri-dockerd made: a sandbox or a
// container, the other nil. It returns neither for a container that is
// not cri-dockerd's, and an error for one whose name or labels do not say
// what cri-dockerd always writes: such a container is left alone rather
// than shown with made-up metadata.
func DecodeCRIDockerd(c container.InspectResponse) (*Sandbox, *Container, error) {
	labels := c.Config.Labels
	typ := labels[CRIDockerdLabelType]
	if typ != TypeSandbox && typ != TypeContainer {
		return nil, nil, nil
	}
	name := strings.TrimPrefix(c.Name, "/")
	parts, err := splitCRIDockerdName(name)
	if err != nil {
		return nil, nil, err
	}
	attempt, err := strconv.ParseUint(parts[5], 10, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("container name %q: attempt %q is not a number", name, parts[5])
	}
	criLabels, annotations := splitCRIDockerdLabels(labels, typ == TypeSandbox)
	if typ == TypeSandbox {
		if parts[1] != criDockerdSandboxName {
			return nil, nil, fmt.Errorf("container name %q: a sandbox's name has %q where %q is expected", name, parts[1], criDockerdSandboxName)
		}
		return &Sandbox{
			Metadata:         &runtimeapi.PodSandboxMetadata{Name: parts[2], Namespace: parts[3], Uid: parts[4], Attempt: uint32(attempt)},
			Labels:           criLabels,
			Annotations:      annotations,
			NamespaceOptions: criDockerdNamespaces(c.HostConfig),
			Adopted:          true,
		}, nil, nil
	}
	if labels[CRIDockerdLabelSandboxID] == "" {
		return nil, nil, fmt.Errorf("container %q has no label %s", name, CRIDockerdLabelSandboxID)
	}
	return nil, &Container{
		Metadata:      &runtimeapi.ContainerMetadata{Name: parts[1], Attempt: uint32(attempt)},
		Labels:        criLabels,
		Annotations:   annotations,
		Image:         &runtimeapi.ImageSpec{Image: c.Config.Image},
		ImageRef:      c.Image,
		LogPath:       labels[CRIDockerdLabelLogPath],
		Mounts:        criMountsFromDocker(c.Mounts),
		TTY:           c.Config.Tty,
		StopSignal:    CRISignal(c.Config.StopSignal),
		Adopted:       true,
		DockerLogPath: c.LogPath,
	}, nil
}

// splitCRIDockerdName splits a Docker container name of cri-dockerd's
// form into its six fields. cri-dockerd adds a random seventh one when a
// name clashes; it is dropped.
func splitCRIDockerdName(name string) ([]string, error) {
	parts := strings.Split(name, "_")
	if len(parts) != 6 && len(parts) != 7 {
		return nil, fmt.Errorf("container name %q is not of the form k8s_<container>_<pod>_<namespace>_<uid>_<attempt>", name)
	}
	if parts[0] != criDockerdNamePrefix {
		return nil, fmt.Errorf("container name %q does not start with %q", name, criDockerdNamePrefix+"_")
	}
	return parts[:6], nil
}

// splitCRIDockerdLabels returns the CRI labels and annotations of a
// cri-dockerd container: every Docker label but cri-dockerd's own, the
// "annotation."-prefixed ones being annotations.
func splitCRIDockerdLabels(dockerLabels map[string]string, sandbox bool) (criLabels, annotations map[string]string) {
	criLabels = map[string]string{}
	annotations = map[string]string{}
	for k, v := range dockerLabels {
		switch {
		case k == CRIDockerdLabelType || k == CRIDockerdLabelLogPath || k == CRIDockerdLabelSandboxID:
		case k == CRIDockerdLabelContainerName && sandbox:
		default:
			if name, ok := strings.CutPrefix(k, criDockerdAnnotationPrefix); ok {
				annotations[name] = v
			} else {
				criLabels[k] = v
			}
		}
	}
	return criLabels, annotations
}

// criDockerdNamespaces is what cri-dockerd reports of a sandbox's
// namespaces, from its HostConfig. The network mode must be POD, not
// CONTAINER, for a pod network: kubelet replaces a sandbox whose mode
// differs from the pod's.
func criDockerdNamespaces(hc *container.HostConfig) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if hc == nil {
		return ns
	}
	if hc.NetworkMode.IsHost() {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if hc.PidMode.IsHost() {
		ns.Pid = runtimeapi.NamespaceMode_NODE
	}
	if hc.IpcMode.IsHost() {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	return ns
}

// criMountsFromDocker is the CRI view of a container's bind mounts, which
// is all the CRI mounts are. Volumes and tmpfs mounts of the image are
// Docker's, not kubelet's.
func criMountsFromDocker(mounts []container.MountPoint) []*runtimeapi.Mount {
	var out []*runtimeapi.Mount
	for _, m := range mounts {
		if m.Type != mount.TypeBind {
			continue
		}
		cm := &runtimeapi.Mount{ContainerPath: m.Destination, HostPath: m.Source, Readonly: !m.RW}
		switch m.Propagation {
		case mount.PropagationRSlave, mount.PropagationSlave:
			cm.Propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
		case mount.PropagationRShared, mount.PropagationShared:
			cm.Propagation = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
		}
		out = append(out, cm)
	}
	// Docker lists a container's mounts in no fixed order (they come from
	// a map); sorted, the answer stays the same from call to call.
	slices.SortFunc(out, func(a, b *runtimeapi.Mount) int { return strings.Compare(a.ContainerPath, b.ContainerPath) })
	return out
}
