package labelcodec

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerName is the Docker name of a workload container. It follows
// dockershim's k8s_<container>_<pod>_<namespace>_<uid>_<attempt>, so that
// operators recognise containers in `docker ps` and Docker refuses a second
// container with the same metadata and attempt in the same pod.
func ContainerName(pod *runtimeapi.PodSandboxMetadata, md *runtimeapi.ContainerMetadata) string {
	return strings.Join([]string{"k8s", md.Name, pod.Name, pod.Namespace, pod.Uid, strconv.FormatUint(uint64(md.Attempt), 10)}, "_")
}

// ContainerInput is what the labels of a new container are made of.
type ContainerInput struct {
	SandboxID string
	Pod       *runtimeapi.PodSandboxMetadata
	Config    *runtimeapi.ContainerConfig
	// LogPath is the full path of the CRI log file.
	LogPath string
	// ImageRef is the image's repo digest, or its ID when it has none.
	ImageRef string
	// StopSignal is the effective stop signal, a normalized Docker name
	// (NormalizeDockerSignal).
	StopSignal string
}

// containerMeta is the meta label (labels.go) of a workload container:
// everything ContainerStatus and ListContainers report, so that neither
// needs Docker.
type containerMeta struct {
	metaHeader
	SandboxID   string            `json:"sandboxID"`
	Name        string            `json:"name"`
	Attempt     uint32            `json:"attempt,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Image is the CRI ImageSpec as requested; Docker's Config.Image
	// keeps only its image string.
	Image *runtimeapi.ImageSpec `json:"image,omitempty"`
	// ImageRef is the image's repo digest, or its ID when it has none,
	// as resolved at create time.
	ImageRef string `json:"imageRef,omitempty"`
	// LogPath is the full path of the CRI log file: the sandbox's
	// log_directory joined with the container's log_path, as kubelet
	// and crictl read it.
	LogPath string `json:"logPath,omitempty"`
	// Mounts are the CRI mounts as requested: Docker's bind strings lose
	// the CRI propagation names and the SELinux flag.
	Mounts []*runtimeapi.Mount `json:"mounts,omitempty"`
	// TTY says the container has a terminal: its Docker log stream is
	// raw rather than multiplexed.
	TTY bool `json:"tty,omitempty"`
	// StopSignal is the effective stop signal (the CRI config's, else
	// the image's, else SIGTERM) as a Docker signal name.
	StopSignal string `json:"stopSignal,omitempty"`
}

// ContainerLabels builds the Docker labels of a new workload container:
// the meta label, plus labels for operators (see ownLabels).
func ContainerLabels(in ContainerInput) (map[string]string, error) {
	cfg := in.Config
	md := cfg.GetMetadata()
	meta, err := encodeMeta(containerMeta{
		metaHeader:  metaHeader{Version: metaVersion, Kind: TypeContainer},
		SandboxID:   in.SandboxID,
		Name:        md.GetName(),
		Attempt:     md.GetAttempt(),
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
		Image:       cfg.GetImage(),
		ImageRef:    in.ImageRef,
		LogPath:     in.LogPath,
		Mounts:      cfg.GetMounts(),
		TTY:         cfg.GetTty(),
		StopSignal:  in.StopSignal,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the netshim metadata of container %s: %w", md.GetName(), err)
	}
	return ownLabels(cfg.GetLabels(), map[string]string{
		LabelType:          TypeContainer,
		LabelSandboxID:     in.SandboxID,
		LabelPodName:       in.Pod.GetName(),
		LabelPodNamespace:  in.Pod.GetNamespace(),
		LabelPodUID:        in.Pod.GetUid(),
		LabelContainerName: md.GetName(),
	}, meta), nil
}

// Container is what a workload container's labels (and, once
// inspected, its HostConfig) say, decoded once when its index record is
// built. It is shared by readers and never modified.
type Container struct {
	Metadata    *runtimeapi.ContainerMetadata
	Labels      map[string]string
	Annotations map[string]string
	Image       *runtimeapi.ImageSpec
	ImageRef    string
	LogPath     string
	Mounts      []*runtimeapi.Mount
	TTY         bool
	StopSignal  runtimeapi.Signal
	// Resources are the container's current limits, from its HostConfig
	// (WithResources); nil when the record was not built from one.
	Resources *runtimeapi.LinuxContainerResources
	// Adopted marks a container cri-dockerd made (cridockerd.go);
	// DockerLogPath is then its json-file log, which cri-dockerd's log
	// symlink points at (the adoption takes the symlink over).
	Adopted       bool
	DockerLogPath string
}

// EmptyContainer is what a container record without usable labels
// reports: empty metadata and image, never nil.
func EmptyContainer() *Container {
	return &Container{Metadata: &runtimeapi.ContainerMetadata{}, Image: &runtimeapi.ImageSpec{}}
}

// decodeContainerMeta decodes a workload container's meta label. Its
// sandbox ID must be the one LabelSandboxID has: netshim sets both on
// every container, while a meta label supplied by the image of a
// container created before netshim wrote one (see legacy.go)
// cannot know the sandbox's ID.
func decodeContainerMeta(raw string, labels map[string]string) (*Container, error) {
	var m containerMeta
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, fmt.Errorf("label %s: %w", LabelMeta, err)
	}
	if err := checkHeader(m.metaHeader, TypeContainer); err != nil {
		return nil, err
	}
	if m.SandboxID == "" || m.SandboxID != labels[LabelSandboxID] {
		return nil, fmt.Errorf("label %s names pod sandbox %q but label %s says %q", LabelMeta, m.SandboxID, LabelSandboxID, labels[LabelSandboxID])
	}
	if m.Image == nil {
		m.Image = &runtimeapi.ImageSpec{}
	}
	return &Container{
		Metadata:    &runtimeapi.ContainerMetadata{Name: m.Name, Attempt: m.Attempt},
		Labels:      nonNil(m.Labels),
		Annotations: nonNil(m.Annotations),
		Image:       m.Image,
		ImageRef:    m.ImageRef,
		LogPath:     m.LogPath,
		Mounts:      m.Mounts,
		TTY:         m.TTY,
		StopSignal:  CRISignal(m.StopSignal),
	}, nil
}

// WithResources returns a copy of c with the container's current limits,
// which UpdateContainerResources changes and labels cannot follow (read
// from its HostConfig). c itself is shared by readers and never modified.
func (c *Container) WithResources(r *runtimeapi.LinuxContainerResources) *Container {
	cp := *c
	cp.Resources = r
	return &cp
}
