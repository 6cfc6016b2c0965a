package dockerservice

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// Taking over a node from cri-dockerd (--adopt-cri-dockerd): netshim reads
// the sandboxes and containers cri-dockerd made on the same engine as its
// own, so that kubelet, pointed at netshim, finds every pod as it left it
// and restarts none. This file decodes what cri-dockerd put on its
// containers; adopt.go takes over their checkpoints and log files.
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
	criDockerdLabelType      = "io.kubernetes.docker.type"
	criDockerdLabelLogPath   = "io.kubernetes.container.logpath"
	criDockerdLabelSandboxID = "io.kubernetes.sandbox.id"
	// criDockerdLabelContainerName is a kubelet label; cri-dockerd adds it
	// ("POD") to sandboxes and hides it from their CRI labels.
	criDockerdLabelContainerName = "io.kubernetes.container.name"
	criDockerdAnnotationPrefix   = "annotation."
	criDockerdNamePrefix         = "k8s"
	criDockerdSandboxName        = "POD"
)

// criDockerdKind is the kind cri-dockerd's type label claims; 0 when the
// container is not one of its sandboxes or containers.
func criDockerdKind(labels map[string]string) store.Kind {
	switch labels[criDockerdLabelType] {
	case typeSandbox:
		return store.KindSandbox
	case typeContainer:
		return store.KindContainer
	}
	return 0
}

// decodeCRIDockerd decodes a container cri-dockerd made. It returns kind 0
// for one that is not, or whose name or labels do not say what cri-dockerd
// always writes: such a container is left alone rather than shown with
// made-up metadata.
func decodeCRIDockerd(c container.InspectResponse) (store.Kind, any, error) {
	kind := criDockerdKind(c.Config.Labels)
	if kind == 0 {
		return 0, nil, nil
	}
	labels := c.Config.Labels
	parts, err := splitCRIDockerdName(c.Name)
	if err != nil {
		return 0, nil, err
	}
	attempt, err := strconv.ParseUint(parts[5], 10, 32)
	if err != nil {
		return 0, nil, fmt.Errorf("container name %q: attempt %q is not a number", trimSlash(c.Name), parts[5])
	}
	criLabels, annotations := splitCRIDockerdLabels(labels, kind)
	if kind == store.KindSandbox {
		if parts[1] != criDockerdSandboxName {
			return 0, nil, fmt.Errorf("container name %q: a sandbox's name has %q where %q is expected", trimSlash(c.Name), parts[1], criDockerdSandboxName)
		}
		return kind, &sandboxInfo{
			metadata:    &runtimeapi.PodSandboxMetadata{Name: parts[2], Namespace: parts[3], Uid: parts[4], Attempt: uint32(attempt)},
			labels:      criLabels,
			annotations: annotations,
			nsOptions:   criDockerdNamespaces(c.HostConfig),
			adopted:     true,
		}, nil
	}
	if labels[criDockerdLabelSandboxID] == "" {
		return 0, nil, fmt.Errorf("container %q has no label %s", trimSlash(c.Name), criDockerdLabelSandboxID)
	}
	return kind, &containerInfo{
		metadata:      &runtimeapi.ContainerMetadata{Name: parts[1], Attempt: uint32(attempt)},
		labels:        criLabels,
		annotations:   annotations,
		image:         &runtimeapi.ImageSpec{Image: c.Config.Image},
		imageRef:      c.Image,
		logPath:       labels[criDockerdLabelLogPath],
		mounts:        criMountsFromDocker(c.Mounts),
		tty:           c.Config.Tty,
		stopSignal:    criSignal(c.Config.StopSignal),
		adopted:       true,
		dockerLogPath: c.LogPath,
	}, nil
}

// splitCRIDockerdName splits a Docker container name of cri-dockerd's
// form into its six fields. cri-dockerd adds a random seventh one when a
// name clashes; it is dropped.
func splitCRIDockerdName(name string) ([]string, error) {
	name = trimSlash(name)
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
func splitCRIDockerdLabels(dockerLabels map[string]string, kind store.Kind) (criLabels, annotations map[string]string) {
	criLabels = map[string]string{}
	annotations = map[string]string{}
	for k, v := range dockerLabels {
		switch {
		case k == criDockerdLabelType || k == criDockerdLabelLogPath || k == criDockerdLabelSandboxID:
		case k == criDockerdLabelContainerName && kind == store.KindSandbox:
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
