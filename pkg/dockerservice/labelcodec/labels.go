// Package labelcodec is what netshim writes into, and reads back from, the
// Docker labels of the containers it owns: the names and labels of a new
// sandbox or workload container, and their decoding into typed views
// (Sandbox, Container) that the index keeps on each record, including the
// labels of older netshims (legacy.go) and of cri-dockerd's containers
// (cridockerd.go), which --adopt-cri-dockerd takes over. It knows nothing
// of the engine or the index: only labels, names and their JSON.
package labelcodec

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Docker labels netshim puts on the containers it owns.
//
// Docker merges the image's labels into the container's, the container's
// winning on a clash. So a label netshim reads back is only netshim's if
// netshim sets it on every container it creates: an image could supply
// any label netshim leaves out. Everything the CRI must give back
// (metadata, labels, annotations, log path, tty, ...) is therefore kept in
// ONE label, LabelMeta, which netshim always sets (see sandboxMeta and
// containerMeta). The other labels are for operators (`docker ps
// --filter`) and for the ownership filter of the events stream; the CRI
// answers never come from them.
const (
	Prefix = "netshim.io/"
	// LabelMeta holds, as JSON, everything netshim reads back of a
	// container it created.
	LabelMeta = Prefix + "meta"
	// LabelType tells sandboxes from workload containers. It is what
	// the events stream and resyncs filter on, so it stays a label of
	// its own; it only says which meta to expect.
	LabelType = Prefix + "type"
	// LabelSandboxID is set on workload containers: the sandbox they
	// belong to. netshim sets it on every container, so the index may
	// use it (decodeOwned checks it against the meta).
	LabelSandboxID = Prefix + "sandbox-id"

	// The pod (and, on workload containers, container) identity, for
	// operators. LabelPodUID on sandboxes is checked against the meta.
	LabelPodName       = Prefix + "pod-name"
	LabelPodNamespace  = Prefix + "pod-namespace"
	LabelPodUID        = Prefix + "pod-uid"
	LabelContainerName = Prefix + "container-name"

	// CRILabelPrefix marks a Docker label that carries a CRI label, so
	// that operators can select pods by their labels in `docker ps`
	// (label=label.app=web). Write-only: an image may add such labels.
	CRILabelPrefix = "label."

	TypeSandbox   = "podsandbox"
	TypeContainer = "container"

	// metaVersion is the version of the meta label's format. Adding a
	// field keeps it (older readers ignore unknown fields); it changes
	// only for a change an older netshim must not misread, and such a
	// netshim then ignores the container (decodeOwned).
	metaVersion = 1
)

// SandboxName is the Docker name of a sandbox's infra container.
// It follows the k8s_POD_<name>_<namespace>_<uid>_<attempt> convention of
// dockershim, so operators recognise pods in `docker ps`, and makes Docker
// refuse a second sandbox with the same metadata and attempt.
func SandboxName(md *runtimeapi.PodSandboxMetadata) string {
	return strings.Join([]string{"k8s", "POD", md.Name, md.Namespace, md.Uid, strconv.FormatUint(uint64(md.Attempt), 10)}, "_")
}

// metaHeader starts every meta label.
type metaHeader struct {
	Version int `json:"v"`
	// Kind repeats LabelType, so that a meta is never read as the
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
// ones, the CRI labels under CRILabelPrefix (operator-facing too), and the
// meta label. The meta is set last: nothing may shadow it.
func ownLabels(criLabels, operator map[string]string, meta string) map[string]string {
	out := make(map[string]string, len(criLabels)+len(operator)+1)
	for k, v := range criLabels {
		out[CRILabelPrefix+k] = v
	}
	for k, v := range operator {
		out[k] = v
	}
	out[LabelMeta] = meta
	return out
}

// SandboxLabels builds the Docker labels of a new sandbox's infra
// container: the meta label, plus labels for operators (see ownLabels).
func SandboxLabels(cfg *runtimeapi.PodSandboxConfig, runtimeHandler string) (map[string]string, error) {
	md := cfg.GetMetadata()
	meta, err := encodeMeta(sandboxMeta{
		metaHeader:       metaHeader{Version: metaVersion, Kind: TypeSandbox},
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
		LabelType:         TypeSandbox,
		LabelPodName:      md.GetName(),
		LabelPodNamespace: md.GetNamespace(),
		LabelPodUID:       md.GetUid(),
	}, meta), nil
}

// Sandbox is what a sandbox's labels say, decoded once when its index
// record is built rather than on every ListPodSandbox.
type Sandbox struct {
	Metadata         *runtimeapi.PodSandboxMetadata
	Labels           map[string]string
	Annotations      map[string]string
	NamespaceOptions *runtimeapi.NamespaceOption
	RuntimeHandler   string
	// Adopted marks a sandbox cri-dockerd made (cridockerd.go).
	Adopted bool
}

// EmptySandbox is what a sandbox record without usable labels reports:
// empty metadata and namespace options, never nil.
func EmptySandbox() *Sandbox {
	return &Sandbox{Metadata: &runtimeapi.PodSandboxMetadata{}, NamespaceOptions: &runtimeapi.NamespaceOption{}}
}

// Claimed reports whether a container's LabelType says it is one of
// netshim's sandboxes or containers, whether or not the rest of its
// labels bear that out (Decode).
func Claimed(labels map[string]string) bool {
	t := labels[LabelType]
	return t == TypeSandbox || t == TypeContainer
}

// Decode decides whether a Docker container is netshim's and decodes the
// CRI view of its labels for its index record: a sandbox or a container,
// the other nil. A container labelled as netshim's (LabelType) whose meta
// is unreadable, of an unknown version or inconsistent with the labels
// netshim always sets gets neither: it is left out of the index rather
// than shown with made-up data, and logged, since it means damage, a
// newer netshim's container, or labels forged by an image or by hand.
// The results are shared by readers and never modified.
func Decode(id string, labels map[string]string) (*Sandbox, *Container) {
	var err error
	switch labels[LabelType] {
	case TypeSandbox:
		var sb *Sandbox
		if sb, err = DecodeSandbox(labels); err == nil {
			return sb, nil
		}
	case TypeContainer:
		var c *Container
		if c, err = DecodeContainer(labels); err == nil {
			return nil, c
		}
	default:
		return nil, nil
	}
	klog.InfoS("Ignoring a container labelled as netshim's: its netshim metadata cannot be used", "containerID", id, "type", labels[LabelType], "err", err)
	return nil, nil
}

// DecodeSandbox decodes the labels of a container known to be a sandbox:
// its meta label, or its legacy labels when it has none (legacy.go).
func DecodeSandbox(labels map[string]string) (*Sandbox, error) {
	raw, ok := labels[LabelMeta]
	if !ok {
		return decodeLegacySandbox(labels)
	}
	return decodeSandboxMeta(raw, labels)
}

// DecodeContainer decodes the labels of a container known to be a
// workload container: its meta label, or its legacy labels when it has
// none (legacy.go).
func DecodeContainer(labels map[string]string) (*Container, error) {
	raw, ok := labels[LabelMeta]
	if !ok {
		return decodeLegacyContainer(labels)
	}
	return decodeContainerMeta(raw, labels)
}

// checkHeader checks what every meta starts with.
func checkHeader(h metaHeader, kind string) error {
	if h.Version != metaVersion {
		return fmt.Errorf("label %s has format version %d, this netshim reads version %d (was it written by a newer netshim?)", LabelMeta, h.Version, metaVersion)
	}
	if h.Kind != kind {
		return fmt.Errorf("label %s describes a %q but label %s says %q", LabelMeta, h.Kind, LabelType, kind)
	}
	return nil
}

// decodeSandboxMeta decodes a sandbox's meta label. Its pod UID must be
// the one LabelPodUID has: netshim sets both on every sandbox, while a
// meta label supplied by the image of a sandbox created before netshim
// wrote one (see legacy.go) cannot know the pod's UID.
func decodeSandboxMeta(raw string, labels map[string]string) (*Sandbox, error) {
	var m sandboxMeta
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, fmt.Errorf("label %s: %w", LabelMeta, err)
	}
	if err := checkHeader(m.metaHeader, TypeSandbox); err != nil {
		return nil, err
	}
	if m.UID == "" || m.UID != labels[LabelPodUID] {
		return nil, fmt.Errorf("label %s names pod UID %q but label %s says %q", LabelMeta, m.UID, LabelPodUID, labels[LabelPodUID])
	}
	if m.NamespaceOptions == nil {
		m.NamespaceOptions = &runtimeapi.NamespaceOption{}
	}
	return &Sandbox{
		Metadata:         &runtimeapi.PodSandboxMetadata{Name: m.Name, Namespace: m.Namespace, Uid: m.UID, Attempt: m.Attempt},
		Labels:           nonNil(m.Labels),
		Annotations:      nonNil(m.Annotations),
		NamespaceOptions: m.NamespaceOptions,
		RuntimeHandler:   m.RuntimeHandler,
	}, nil
}

// nonNil keeps the CRI maps non-nil, as readers got them before.
func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
