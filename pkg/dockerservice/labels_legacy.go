package dockerservice

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/store"
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
	legacyLabelAttempt          = labelPrefix + "attempt"
	legacyLabelNamespaceOptions = labelPrefix + "namespace-options"
	legacyLabelRuntimeHandler   = labelPrefix + "runtime-handler"
	legacyLabelContainerAttempt = labelPrefix + "container-attempt"
	legacyLabelLogPath          = labelPrefix + "log-path"
	legacyLabelImageSpec        = labelPrefix + "image-spec"
	legacyLabelImageRef         = labelPrefix + "image-ref"
	legacyLabelMounts           = labelPrefix + "mounts"
	legacyLabelTTY              = labelPrefix + "tty"
	legacyLabelStopSignal       = labelPrefix + "stop-signal"
	// legacyAnnotationPrefix marked a label carrying a CRI annotation;
	// CRI labels had criLabelPrefix, still written for operators.
	legacyAnnotationPrefix = "annotation."
)

// decodeLegacy decodes a container with no meta label. It must at least
// have the identity labels the old netshim always set, or it is not taken
// for one of its containers: a container that merely says labelType
// (set by hand, or by an image run outside netshim) would otherwise show
// up with empty metadata.
func decodeLegacy(kind store.Kind, labels map[string]string) (any, error) {
	var required []string
	if kind == store.KindSandbox {
		required = []string{labelPodName, labelPodNamespace, labelPodUID}
	} else {
		required = []string{labelSandboxID, labelContainerName}
	}
	for _, k := range required {
		if labels[k] == "" {
			return nil, fmt.Errorf("no label %s, and no label %s as netshim versions before it set", labelMeta, k)
		}
	}
	if kind == store.KindSandbox {
		return decodeLegacySandbox(labels), nil
	}
	return decodeLegacyContainer(labels), nil
}

func decodeLegacySandbox(labels map[string]string) *sandboxInfo {
	attempt, _ := strconv.ParseUint(labels[legacyLabelAttempt], 10, 32)
	info := &sandboxInfo{
		metadata: &runtimeapi.PodSandboxMetadata{
			Name:      labels[labelPodName],
			Namespace: labels[labelPodNamespace],
			Uid:       labels[labelPodUID],
			Attempt:   uint32(attempt),
		},
		// A missing or unreadable label means the CRI defaults (all POD).
		nsOptions:      &runtimeapi.NamespaceOption{},
		runtimeHandler: labels[legacyLabelRuntimeHandler],
	}
	if v := labels[legacyLabelNamespaceOptions]; v != "" {
		_ = json.Unmarshal([]byte(v), info.nsOptions)
	}
	info.labels, info.annotations = splitLegacyLabels(labels)
	return info
}

// decodeLegacyContainer: unreadable JSON labels leave their field empty
// rather than hiding the container, as before.
func decodeLegacyContainer(labels map[string]string) *containerInfo {
	attempt, _ := strconv.ParseUint(labels[legacyLabelContainerAttempt], 10, 32)
	info := &containerInfo{
		metadata:   &runtimeapi.ContainerMetadata{Name: labels[labelContainerName], Attempt: uint32(attempt)},
		image:      &runtimeapi.ImageSpec{},
		imageRef:   labels[legacyLabelImageRef],
		logPath:    labels[legacyLabelLogPath],
		tty:        labels[legacyLabelTTY] == "true",
		stopSignal: criSignal(labels[legacyLabelStopSignal]),
	}
	info.labels, info.annotations = splitLegacyLabels(labels)
	if v := labels[legacyLabelImageSpec]; v != "" {
		_ = json.Unmarshal([]byte(v), info.image)
	}
	if v := labels[legacyLabelMounts]; v != "" {
		_ = json.Unmarshal([]byte(v), &info.mounts)
	}
	return info
}

// splitLegacyLabels returns the CRI labels and annotations of a legacy
// container: the labels under criLabelPrefix and legacyAnnotationPrefix.
func splitLegacyLabels(dockerLabels map[string]string) (criLabels, annotations map[string]string) {
	criLabels = map[string]string{}
	annotations = map[string]string{}
	for k, v := range dockerLabels {
		if name, ok := strings.CutPrefix(k, legacyAnnotationPrefix); ok {
			annotations[name] = v
		} else if name, ok := strings.CutPrefix(k, criLabelPrefix); ok {
			criLabels[name] = v
		}
	}
	return criLabels, annotations
}
