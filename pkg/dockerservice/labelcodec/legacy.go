package labelcodec

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Containers created by a netshim older than the meta label (labels.go)
// carry one label per fact instead, and keep working after an upgrade:
// decodeLegacy reads them the old way.
//
// That way keeps the old weakness, for those containers only: Docker
// merged their image's labels into them, so an image could set any of
// these keys that netshim did not set itself (a log path or tty for a
// container without one, extra CRI labels and annotations, ...). Every
// container created since the upgrade has a meta label and never takes
// this path; the risk ends when the last pre-upgrade container is removed
// (kubelet replaces pods over time; draining a node removes them at once).
const (
	LegacyLabelAttempt          = Prefix + "attempt"
	LegacyLabelNamespaceOptions = Prefix + "namespace-options"
	LegacyLabelRuntimeHandler   = Prefix + "runtime-handler"
	LegacyLabelContainerAttempt = Prefix + "container-attempt"
	LegacyLabelLogPath          = Prefix + "log-path"
	LegacyLabelImageSpec        = Prefix + "image-spec"
	LegacyLabelImageRef         = Prefix + "image-ref"
	LegacyLabelMounts           = Prefix + "mounts"
	LegacyLabelTTY              = Prefix + "tty"
	LegacyLabelStopSignal       = Prefix + "stop-signal"
	// LegacyAnnotationPrefix marked a label carrying a CRI annotation;
	// CRI labels had CRILabelPrefix, still written for operators.
	LegacyAnnotationPrefix = "annotation."
)

// requireLegacy checks that a container with no meta label has at least
// the identity labels the old netshim always set, or it is not taken for
// one of its containers: a container that merely says LabelType (set by
// hand, or by an image run outside netshim) would otherwise show up with
// empty metadata.
func requireLegacy(labels map[string]string, required ...string) error {
	for _, k := range required {
		if labels[k] == "" {
			return fmt.Errorf("no label %s, and no label %s as netshim versions before it set", LabelMeta, k)
		}
	}
	return nil
}

func decodeLegacySandbox(labels map[string]string) (*Sandbox, error) {
	if err := requireLegacy(labels, LabelPodName, LabelPodNamespace, LabelPodUID); err != nil {
		return nil, err
	}
	attempt, _ := strconv.ParseUint(labels[LegacyLabelAttempt], 10, 32)
	info := &Sandbox{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name:      labels[LabelPodName],
			Namespace: labels[LabelPodNamespace],
			Uid:       labels[LabelPodUID],
			Attempt:   uint32(attempt),
		},
		// A missing or unreadable label means the CRI defaults (all POD).
		NamespaceOptions: &runtimeapi.NamespaceOption{},
		RuntimeHandler:   labels[LegacyLabelRuntimeHandler],
	}
	if v := labels[LegacyLabelNamespaceOptions]; v != "" {
		_ = json.Unmarshal([]byte(v), info.NamespaceOptions)
	}
	info.Labels, info.Annotations = splitLegacyLabels(labels)
	return info, nil
}

// decodeLegacyContainer: unreadable JSON labels leave their field empty
// rather than hiding the container, as before.
func decodeLegacyContainer(labels map[string]string) (*Container, error) {
	if err := requireLegacy(labels, LabelSandboxID, LabelContainerName); err != nil {
		return nil, err
	}
	attempt, _ := strconv.ParseUint(labels[LegacyLabelContainerAttempt], 10, 32)
	info := &Container{
		Metadata:   &runtimeapi.ContainerMetadata{Name: labels[LabelContainerName], Attempt: uint32(attempt)},
		Image:      &runtimeapi.ImageSpec{},
		ImageRef:   labels[LegacyLabelImageRef],
		LogPath:    labels[LegacyLabelLogPath],
		TTY:        labels[LegacyLabelTTY] == "true",
		StopSignal: CRISignal(labels[LegacyLabelStopSignal]),
	}
	info.Labels, info.Annotations = splitLegacyLabels(labels)
	if v := labels[LegacyLabelImageSpec]; v != "" {
		_ = json.Unmarshal([]byte(v), info.Image)
	}
	if v := labels[LegacyLabelMounts]; v != "" {
		_ = json.Unmarshal([]byte(v), &info.Mounts)
	}
	return info, nil
}

// splitLegacyLabels returns the CRI labels and annotations of a legacy
// container: the labels under CRILabelPrefix and LegacyAnnotationPrefix.
func splitLegacyLabels(dockerLabels map[string]string) (criLabels, annotations map[string]string) {
	criLabels = map[string]string{}
	annotations = map[string]string{}
	for k, v := range dockerLabels {
		if name, ok := strings.CutPrefix(k, LegacyAnnotationPrefix); ok {
			annotations[name] = v
		} else if name, ok := strings.CutPrefix(k, CRILabelPrefix); ok {
			criLabels[name] = v
		}
	}
	return criLabels, annotations
}
