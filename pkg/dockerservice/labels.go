package dockerservice

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// Docker labels netshim puts on the containers it owns. Everything the CRI
// must give back (metadata, labels, annotations) is kept in labels, so that
// one ContainerList answers a whole ListPodSandbox.
const (
	labelPrefix = "netshim.io/"
	// labelType tells sandboxes from workload containers.
	labelType = labelPrefix + "type"
	// labelSandboxID is set on workload containers: the sandbox they belong to.
	labelSandboxID = labelPrefix + "sandbox-id"

	labelPodName      = labelPrefix + "pod-name"
	labelPodNamespace = labelPrefix + "pod-namespace"
	labelPodUID       = labelPrefix + "pod-uid"
	labelAttempt      = labelPrefix + "attempt"
	// labelNamespaceOptions holds the sandbox's CRI NamespaceOption as JSON:
	// Docker's own modes cannot tell POD from CONTAINER pid namespaces.
	labelNamespaceOptions = labelPrefix + "namespace-options"
	// labelRuntimeHandler is the CRI runtime handler the sandbox asked for.
	labelRuntimeHandler = labelPrefix + "runtime-handler"

	// annotationPrefix marks a label that carries a CRI annotation
	// (Docker has no annotations), and criLabelPrefix one that carries a
	// CRI label. CRI labels are prefixed too because Docker merges the
	// image's labels into the container's: without the prefix, an image
	// label would come back as a pod label, and kubelet keeps its state in
	// labels that must round-trip exactly.
	annotationPrefix = "annotation."
	criLabelPrefix   = "label."

	typeSandbox   = "podsandbox"
	typeContainer = "container"
)

// sandboxContainerName is the Docker name of a sandbox's infra container.
// It follows the k8s_POD_<name>_<namespace>_<uid>_<attempt> convention of
// dockershim, so operators recognise pods in `docker ps`, and makes Docker
// refuse a second sandbox with the same metadata and attempt.
func sandboxContainerName(md *runtimeapi.PodSandboxMetadata) string {
	return strings.Join([]string{"k8s", "POD", md.Name, md.Namespace, md.Uid, strconv.FormatUint(uint64(md.Attempt), 10)}, "_")
}

// makeLabels merges CRI labels, CRI annotations and netshim's own labels,
// each in its own key space.
func makeLabels(criLabels, annotations map[string]string, own map[string]string) map[string]string {
	out := make(map[string]string, len(criLabels)+len(annotations)+len(own))
	for k, v := range criLabels {
		out[criLabelPrefix+k] = v
	}
	for k, v := range annotations {
		out[annotationPrefix+k] = v
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}

// splitLabels is the inverse of makeLabels: it returns the CRI labels and
// annotations found in Docker labels, ignoring netshim's and the image's.
func splitLabels(dockerLabels map[string]string) (criLabels, annotations map[string]string) {
	criLabels = map[string]string{}
	annotations = map[string]string{}
	for k, v := range dockerLabels {
		if name, ok := strings.CutPrefix(k, annotationPrefix); ok {
			annotations[name] = v
		} else if name, ok := strings.CutPrefix(k, criLabelPrefix); ok {
			criLabels[name] = v
		}
	}
	return criLabels, annotations
}

func sandboxLabels(cfg *runtimeapi.PodSandboxConfig, runtimeHandler string) (map[string]string, error) {
	md := cfg.GetMetadata()
	ns, err := json.Marshal(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions())
	if err != nil {
		return nil, fmt.Errorf("encoding namespace options: %w", err)
	}
	own := map[string]string{
		labelType:             typeSandbox,
		labelPodName:          md.Name,
		labelPodNamespace:     md.Namespace,
		labelPodUID:           md.Uid,
		labelAttempt:          strconv.FormatUint(uint64(md.Attempt), 10),
		labelNamespaceOptions: string(ns),
	}
	if runtimeHandler != "" {
		own[labelRuntimeHandler] = runtimeHandler
	}
	return makeLabels(cfg.GetLabels(), cfg.GetAnnotations(), own), nil
}

// sandboxMetadataFromLabels recovers the CRI metadata of a sandbox.
func sandboxMetadataFromLabels(labels map[string]string) *runtimeapi.PodSandboxMetadata {
	attempt, _ := strconv.ParseUint(labels[labelAttempt], 10, 32)
	return &runtimeapi.PodSandboxMetadata{
		Name:      labels[labelPodName],
		Namespace: labels[labelPodNamespace],
		Uid:       labels[labelPodUID],
		Attempt:   uint32(attempt),
	}
}

// namespaceOptionsFromLabels recovers the sandbox's namespace options; a
// missing or unreadable label means the CRI defaults (all POD).
func namespaceOptionsFromLabels(labels map[string]string) *runtimeapi.NamespaceOption {
	opts := &runtimeapi.NamespaceOption{}
	if v := labels[labelNamespaceOptions]; v != "" {
		_ = json.Unmarshal([]byte(v), opts)
	}
	return opts
}

// matchesSelector reports whether CRI labels satisfy every key=value of the
// selector, the only form CRI filters use.
func matchesSelector(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// sandboxInfo is what a sandbox's labels say, decoded once when its index
// record is built rather than on every ListPodSandbox.
type sandboxInfo struct {
	metadata       *runtimeapi.PodSandboxMetadata
	labels         map[string]string
	annotations    map[string]string
	nsOptions      *runtimeapi.NamespaceOption
	runtimeHandler string
}

// decodeExtra decodes the CRI view of a container's labels for its index
// record. The result is shared by readers and never modified.
func decodeExtra(kind store.Kind, labels map[string]string) any {
	if kind == store.KindContainer {
		return decodeContainerInfo(labels)
	}
	if kind != store.KindSandbox {
		return nil
	}
	info := &sandboxInfo{
		metadata:       sandboxMetadataFromLabels(labels),
		nsOptions:      namespaceOptionsFromLabels(labels),
		runtimeHandler: labels[labelRuntimeHandler],
	}
	info.labels, info.annotations = splitLabels(labels)
	return info
}

// sandboxInfoOf returns a sandbox record's decoded labels.
func sandboxInfoOf(r *store.Record) *sandboxInfo {
	if info, ok := r.Extra.(*sandboxInfo); ok {
		return info
	}
	return &sandboxInfo{metadata: &runtimeapi.PodSandboxMetadata{}, nsOptions: &runtimeapi.NamespaceOption{}}
}
