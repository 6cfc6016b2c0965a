package dockerservice

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// Docker labels netshim puts on the containers it owns.
//
// Docker merges the image's labels into the container's, the container's
// winning on a clash. So a label netshim reads back is only netshim's if
// netshim sets it on every container it creates: an image could supply
// any label netshim leaves out. Everything the CRI must give back
// (metadata, labels, annotations, log path, tty, ...) is therefore kept in
// ONE label, labelMeta, which netshim always sets (see sandboxMeta and
// containerMeta). The other labels are for operators (`docker ps
// --filter`) and for the ownership filter of the events stream; the CRI
// answers never come from them.
const (
	labelPrefix = "netshim.io/"
	// labelMeta holds, as JSON, everything netshim reads back of a
	// container it created.
	labelMeta = labelPrefix + "meta"
	// labelType tells sandboxes from workload containers. It is what
	// the events stream and resyncs filter on, so it stays a label of
	// its own; it only says which meta to expect.
	labelType = labelPrefix + "type"
	// labelSandboxID is set on workload containers: the sandbox they
	// belong to. netshim sets it on every container, so the index may
	// use it (decodeOwned checks it against the meta).
	labelSandboxID = labelPrefix + "sandbox-id"

	// The pod (and, on workload containers, container) identity, for
	// operators. labelPodUID on sandboxes is checked against the meta.
	labelPodName       = labelPrefix + "pod-name"
	labelPodNamespace  = labelPrefix + "pod-namespace"
	labelPodUID        = labelPrefix + "pod-uid"
	labelContainerName = labelPrefix + "container-name"

	// criLabelPrefix marks a Docker label that carries a CRI label, so
	// that operators can select pods by their labels in `docker ps`
	// (label=label.app=web). Write-only: an image may add such labels.
	criLabelPrefix = "label."

	typeSandbox   = "podsandbox"
	typeContainer = "container"

	// metaVersion is the version of the meta label's format. Adding a
	// field keeps it (older readers ignore unknown fields); it changes
	// only for a change an older netshim must not misread, and such a
	// netshim then ignores the container (decodeOwned).
	metaVersion = 1
)

// sandboxContainerName is the Docker name of a sandbox's infra container.
// It follows the k8s_POD_<name>_<namespace>_<uid>_<attempt> convention of
// dockershim, so operators recognise pods in `docker ps`, and makes Docker
// refuse a second sandbox with the same metadata and attempt.
func sandboxContainerName(md *runtimeapi.PodSandboxMetadata) string {
	return strings.Join([]string{"k8s", "POD", md.Name, md.Namespace, md.Uid, strconv.FormatUint(uint64(md.Attempt), 10)}, "_")
}

// metaHeader starts every meta label.
type metaHeader struct {
	Version int `json:"v"`
	// Kind repeats labelType, so that a meta is never read as the
	// other kind's.
	Kind string `json:"kind"`
}

// sandboxMeta is the meta label of a sandbox: what ListPodSandbox and
// PodSandboxStatus report, and what later RPCs need of the sandbox.
type sandboxMeta struct {
	metaHeader
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	UID         string            `json:"uid"`
	Attempt     uint32            `json:"attempt,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// NamespaceOptions are the CRI ones: Docker's own modes cannot
	// tell POD from CONTAINER pid namespaces.
	NamespaceOptions *runtimeapi.NamespaceOption `json:"namespaceOptions,omitempty"`
	RuntimeHandler   string                      `json:"runtimeHandler,omitempty"`
}

// encodeMeta is the compact JSON of a meta label: no HTML escaping (it
// would make every '<', '>' and '&' of an annotation six bytes). JSON
// keeps every string exactly: CRI strings are valid UTF-8, which
// protobuf checks on the way in.
func encodeMeta(v any) (string, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// ownLabels is the Docker labels of a new container: the operator-facing
// ones, the CRI labels under criLabelPrefix (operator-facing too), and the
// meta label. The meta is set last: nothing may shadow it.
func ownLabels(criLabels, operator map[string]string, meta string) map[string]string {
	out := make(map[string]string, len(criLabels)+len(operator)+1)
	for k, v := range criLabels {
		out[criLabelPrefix+k] = v
	}
	for k, v := range operator {
		out[k] = v
	}
	out[labelMeta] = meta
	return out
}

func sandboxLabels(cfg *runtimeapi.PodSandboxConfig, runtimeHandler string) (map[string]string, error) {
	md := cfg.GetMetadata()
	meta, err := encodeMeta(sandboxMeta{
		metaHeader:       metaHeader{Version: metaVersion, Kind: typeSandbox},
		Name:             md.GetName(),
		Namespace:        md.GetNamespace(),
		UID:              md.GetUid(),
		Attempt:          md.GetAttempt(),
		Labels:           cfg.GetLabels(),
		Annotations:      cfg.GetAnnotations(),
		NamespaceOptions: cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		RuntimeHandler:   runtimeHandler,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the sandbox's netshim metadata: %w", err)
	}
	return ownLabels(cfg.GetLabels(), map[string]string{
		labelType:         typeSandbox,
		labelPodName:      md.GetName(),
		labelPodNamespace: md.GetNamespace(),
		labelPodUID:       md.GetUid(),
	}, meta), nil
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
	// adopted marks a sandbox cri-dockerd made (adopt_labels.go).
	adopted bool
}

// kindFromLabels is the kind of container labelType claims; 0 when it is
// not netshim's.
func kindFromLabels(labels map[string]string) store.Kind {
	switch labels[labelType] {
	case typeSandbox:
		return store.KindSandbox
	case typeContainer:
		return store.KindContainer
	}
	return 0
}

// decodeOwned decides whether a Docker container is netshim's and decodes
// the CRI view of its labels for its index record. A container labelled
// as netshim's (labelType) whose meta is unreadable, of an unknown
// version or inconsistent with the labels netshim always sets gets kind 0:
// it is left out of the index rather than shown with made-up data, and
// logged, since it means damage, a newer netshim's container, or labels
// forged by an image or by hand.
func decodeOwned(id string, labels map[string]string) (store.Kind, any) {
	kind := kindFromLabels(labels)
	if kind == 0 {
		return 0, nil
	}
	info, err := decodeInfo(kind, labels)
	if err != nil {
		klog.InfoS("Ignoring a container labelled as netshim's: its netshim metadata cannot be used", "containerID", id, "type", labels[labelType], "err", err)
		return 0, nil
	}
	return kind, info
}

// decodeExtra is decodeOwned for a container whose kind is known: nil
// when its labels cannot be used. The result is shared by readers and
// never modified.
func decodeExtra(kind store.Kind, labels map[string]string) any {
	info, err := decodeInfo(kind, labels)
	if err != nil {
		return nil
	}
	return info
}

// errNotOwned is a kind decodeInfo cannot decode.
var errNotOwned = errors.New("not a netshim sandbox or container")

// decodeInfo decodes a container's meta label, or its legacy labels when
// it has none (see labels_legacy.go).
func decodeInfo(kind store.Kind, labels map[string]string) (any, error) {
	raw, ok := labels[labelMeta]
	switch {
	case kind != store.KindSandbox && kind != store.KindContainer:
		return nil, errNotOwned
	case !ok:
		return decodeLegacy(kind, labels)
	case kind == store.KindSandbox:
		return untyped(decodeSandboxMeta(raw, labels))
	default:
		return untyped(decodeContainerMeta(raw, labels))
	}
}

// untyped returns a decoder's result as an Extra, with no typed nil
// pointer on error (an interface holding one is not == nil).
func untyped[T any](v *T, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}

// checkHeader checks what every meta starts with.
func checkHeader(h metaHeader, kind string) error {
	if h.Version != metaVersion {
		return fmt.Errorf("label %s has format version %d, this netshim reads version %d (was it written by a newer netshim?)", labelMeta, h.Version, metaVersion)
	}
	if h.Kind != kind {
		return fmt.Errorf("label %s describes a %q but label %s says %q", labelMeta, h.Kind, labelType, kind)
	}
	return nil
}

// decodeSandboxMeta decodes a sandbox's meta label. Its pod UID must be
// the one labelPodUID has: netshim sets both on every sandbox, while a
// meta label supplied by the image of a sandbox created before netshim
// wrote one (see labels_legacy.go) cannot know the pod's UID.
func decodeSandboxMeta(raw string, labels map[string]string) (*sandboxInfo, error) {
	var m sandboxMeta
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, fmt.Errorf("label %s: %w", labelMeta, err)
	}
	if err := checkHeader(m.metaHeader, typeSandbox); err != nil {
		return nil, err
	}
	if m.UID == "" || m.UID != labels[labelPodUID] {
		return nil, fmt.Errorf("label %s names pod UID %q but label %s says %q", labelMeta, m.UID, labelPodUID, labels[labelPodUID])
	}
	if m.NamespaceOptions == nil {
		m.NamespaceOptions = &runtimeapi.NamespaceOption{}
	}
	return &sandboxInfo{
		metadata:       &runtimeapi.PodSandboxMetadata{Name: m.Name, Namespace: m.Namespace, Uid: m.UID, Attempt: m.Attempt},
		labels:         nonNil(m.Labels),
		annotations:    nonNil(m.Annotations),
		nsOptions:      m.NamespaceOptions,
		runtimeHandler: m.RuntimeHandler,
	}, nil
}

// nonNil keeps the CRI maps non-nil, as readers got them before.
func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// sandboxInfoOf returns a sandbox record's decoded labels.
func sandboxInfoOf(r *store.Record) *sandboxInfo {
	if info, ok := r.Extra.(*sandboxInfo); ok {
		return info
	}
	return &sandboxInfo{metadata: &runtimeapi.PodSandboxMetadata{}, nsOptions: &runtimeapi.NamespaceOption{}}
}
