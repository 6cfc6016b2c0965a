package dockerservice

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// containerName is the Docker name of a workload container. It follows
// dockershim's k8s_<container>_<pod>_<namespace>_<uid>_<attempt>, so that
// operators recognise containers in `docker ps` and Docker refuses a second
// container with the same metadata and attempt in the same pod.
func containerName(pod *runtimeapi.PodSandboxMetadata, md *runtimeapi.ContainerMetadata) string {
	return strings.Join([]string{"k8s", md.Name, pod.Name, pod.Namespace, pod.Uid, strconv.FormatUint(uint64(md.Attempt), 10)}, "_")
}

// containerLabelsInput is what the labels of a new container are made of.
type containerLabelsInput struct {
	sandboxID  string
	pod        *runtimeapi.PodSandboxMetadata
	cfg        *runtimeapi.ContainerConfig
	logPath    string
	imageRef   string
	stopSignal string
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

// containerLabels builds the Docker labels of a new workload container:
// the meta label, plus labels for operators (see ownLabels).
func containerLabels(in containerLabelsInput) (map[string]string, error) {
	cfg := in.cfg
	md := cfg.GetMetadata()
	meta, err := encodeMeta(containerMeta{
		metaHeader:  metaHeader{Version: metaVersion, Kind: typeContainer},
		SandboxID:   in.sandboxID,
		Name:        md.GetName(),
		Attempt:     md.GetAttempt(),
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
		Image:       cfg.GetImage(),
		ImageRef:    in.imageRef,
		LogPath:     in.logPath,
		Mounts:      cfg.GetMounts(),
		TTY:         cfg.GetTty(),
		StopSignal:  in.stopSignal,
	})
	if err != nil {
		return nil, crirpc.InvalidArgf("encoding the netshim metadata of container %s: %v", md.GetName(), err)
	}
	return ownLabels(cfg.GetLabels(), map[string]string{
		labelType:          typeContainer,
		labelSandboxID:     in.sandboxID,
		labelPodName:       in.pod.GetName(),
		labelPodNamespace:  in.pod.GetNamespace(),
		labelPodUID:        in.pod.GetUid(),
		labelContainerName: md.GetName(),
	}, meta), nil
}

// containerInfo is what a workload container's labels (and, once
// inspected, its HostConfig) say, decoded once when its index record is
// built. It is shared by readers and never modified.
type containerInfo struct {
	metadata    *runtimeapi.ContainerMetadata
	labels      map[string]string
	annotations map[string]string
	image       *runtimeapi.ImageSpec
	imageRef    string
	logPath     string
	mounts      []*runtimeapi.Mount
	tty         bool
	stopSignal  runtimeapi.Signal
	// resources are the container's current limits, from its HostConfig;
	// nil when the record was not built from one.
	resources *runtimeapi.LinuxContainerResources
	// adopted marks a container cri-dockerd made (adopt_labels.go);
	// dockerLogPath is then its json-file log, which cri-dockerd's log
	// symlink points at (adopt.go takes the symlink over).
	adopted       bool
	dockerLogPath string
}

// decodeContainerMeta decodes a workload container's meta label. Its
// sandbox ID must be the one labelSandboxID has: netshim sets both on
// every container, while a meta label supplied by the image of a
// container created before netshim wrote one (see labels_legacy.go)
// cannot know the sandbox's ID.
func decodeContainerMeta(raw string, labels map[string]string) (*containerInfo, error) {
	var m containerMeta
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, fmt.Errorf("label %s: %w", labelMeta, err)
	}
	if err := checkHeader(m.metaHeader, typeContainer); err != nil {
		return nil, err
	}
	if m.SandboxID == "" || m.SandboxID != labels[labelSandboxID] {
		return nil, fmt.Errorf("label %s names pod sandbox %q but label %s says %q", labelMeta, m.SandboxID, labelSandboxID, labels[labelSandboxID])
	}
	if m.Image == nil {
		m.Image = &runtimeapi.ImageSpec{}
	}
	return &containerInfo{
		metadata:    &runtimeapi.ContainerMetadata{Name: m.Name, Attempt: m.Attempt},
		labels:      nonNil(m.Labels),
		annotations: nonNil(m.Annotations),
		image:       m.Image,
		imageRef:    m.ImageRef,
		logPath:     m.LogPath,
		mounts:      m.Mounts,
		tty:         m.TTY,
		stopSignal:  criSignal(m.StopSignal),
	}, nil
}

// containerInfoOf returns a container record's decoded labels.
func containerInfoOf(r *store.Record) *containerInfo {
	if info, ok := r.Extra.(*containerInfo); ok {
		return info
	}
	return &containerInfo{metadata: &runtimeapi.ContainerMetadata{}, image: &runtimeapi.ImageSpec{}}
}

// withHostConfig returns a container record's Extra completed with what
// the HostConfig says (the current resources, which UpdateContainerResources
// changes and labels cannot follow). Other kinds are returned unchanged.
func withHostConfig(extra any, hc *container.HostConfig) any {
	info, ok := extra.(*containerInfo)
	if !ok || hc == nil {
		return extra
	}
	c := *info
	c.resources = resourcesFromHostConfig(hc)
	return &c
}

// resourcesFromHostConfig is the CRI view of a container's Docker limits.
func resourcesFromHostConfig(hc *container.HostConfig) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{
		CpuPeriod:          hc.CPUPeriod,
		CpuQuota:           hc.CPUQuota,
		CpuShares:          hc.CPUShares,
		MemoryLimitInBytes: reportedMemory(hc.Memory),
		OomScoreAdj:        int64(hc.OomScoreAdj),
		CpusetCpus:         hc.CpusetCpus,
		CpusetMems:         hc.CpusetMems,
	}
	// -1 (and dockerNoMemoryLimit) is how netshim asks Docker for "no
	// swap limit of its own"; the CRI says that with 0.
	r.MemorySwapLimitInBytes = reportedMemory(hc.MemorySwap)
	return r
}

// dockerSignal turns a CRI stop signal into Docker's name for it ("" for
// the runtime default): SIGNAL_SIGRTMINPLUS3 becomes SIGRTMIN+3.
func dockerSignal(s runtimeapi.Signal) string {
	if s == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return ""
	}
	name, ok := runtimeapi.Signal_name[int32(s)]
	if !ok {
		return ""
	}
	name = strings.TrimPrefix(name, "SIGNAL_")
	if base, n, ok := strings.Cut(name, "PLUS"); ok {
		return base + "+" + n
	}
	return name
}

// signalNumbers names the signals an image's STOPSIGNAL may give by
// number. Only the ones images use in practice; others are reported as
// the runtime default.
var signalNumbers = map[string]string{
	"1": "SIGHUP", "2": "SIGINT", "3": "SIGQUIT", "6": "SIGABRT", "9": "SIGKILL",
	"10": "SIGUSR1", "12": "SIGUSR2", "15": "SIGTERM", "28": "SIGWINCH",
}

// normalizeDockerSignal turns the forms Docker accepts ("SIGQUIT", "quit",
// "3", "SIGRTMIN+3") into the canonical "SIGQUIT"; unknown numbers are
// kept as they are (Docker understands them).
func normalizeDockerSignal(s string) string {
	s = strings.ToUpper(strings.TrimSpace(s))
	if s == "" {
		return ""
	}
	if name, ok := signalNumbers[s]; ok {
		return name
	}
	if _, err := strconv.Atoi(s); err == nil {
		return s
	}
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	return s
}

// criSignal is the inverse of dockerSignal, for a normalized Docker name.
func criSignal(docker string) runtimeapi.Signal {
	if docker == "" {
		return runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT
	}
	name := "SIGNAL_" + strings.Replace(docker, "+", "PLUS", 1)
	if v, ok := runtimeapi.Signal_value[name]; ok {
		return runtimeapi.Signal(v)
	}
	return runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT
}
