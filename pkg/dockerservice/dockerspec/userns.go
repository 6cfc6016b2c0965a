package dockerspec

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/podns"
)

// maxID is the largest id a user namespace can map: (uid_t)-1 is no id.
const maxID = 1<<32 - 2

// UserNS is a pod's own user namespace (hostUsers: false): the pinned
// file its containers join and its maps.
type UserNS struct {
	Path       string
	UIDs, GIDs []podns.IDMap
}

// PodUserNS says whether namespace options ask for a user namespace of the
// pod's own, and returns its maps. Only an explicit mode POD does: a nil
// UsernsOptions reads as POD too (the enum's zero), and means the node's.
// The options must have passed ValidateUserNamespace.
func PodUserNS(ns *runtimeapi.NamespaceOption) (uids, gids []podns.IDMap, ok bool) {
	u := ns.GetUsernsOptions()
	if u == nil || u.GetMode() != runtimeapi.NamespaceMode_POD {
		return nil, nil, false
	}
	return idMaps(u.GetUids()), idMaps(u.GetGids()), true
}

func idMaps(ms []*runtimeapi.IDMapping) []podns.IDMap {
	out := make([]podns.IDMap, len(ms))
	for i, m := range ms {
		out[i] = podns.IDMap{ContainerID: m.GetContainerId(), HostID: m.GetHostId(), Size: m.GetLength()}
	}
	return out
}

// ValidateUserNamespace checks a pod's (or container's) user namespace
// options as kubelet sends them: mode NODE with no maps, or mode POD with
// one uid range and one gid range, each mapping container root onto ids
// of the node other than its root. Containers of a pod share its user
// namespace or the node's: CONTAINER and TARGET are refused, as
// containerd and CRI-O refuse them.
func ValidateUserNamespace(what string, u *runtimeapi.UserNamespace) error {
	if u == nil {
		return nil
	}
	switch u.GetMode() {
	case runtimeapi.NamespaceMode_NODE:
		if len(u.GetUids()) > 0 || len(u.GetGids()) > 0 {
			return crirpc.InvalidArgf("%s: user namespace mode NODE with id mappings: the node's user namespace has its own; send mappings only with mode POD", what)
		}
		return nil
	case runtimeapi.NamespaceMode_POD:
		if err := validateIDMaps(what, "uid", u.GetUids()); err != nil {
			return err
		}
		return validateIDMaps(what, "gid", u.GetGids())
	case runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_TARGET:
		return crirpc.InvalidArgf("%s: user namespace mode %s is not supported: a pod's containers share the pod's user namespace (POD) or the node's (NODE)", what, u.GetMode())
	}
	return crirpc.InvalidArgf("%s: unknown user namespace mode %d", what, u.GetMode())
}

func validateIDMaps(what, kind string, ms []*runtimeapi.IDMapping) error {
	switch len(ms) {
	case 0:
		return crirpc.InvalidArgf("%s: user namespace mode POD without %s mappings: kubelet sends one range (set hostUsers: true for the node's user namespace)", what, kind)
	case 1:
	default:
		return crirpc.InvalidArgf("%s: %d %s mapping ranges: netshim takes exactly one, as kubelet sends", what, len(ms), kind)
	}
	m := ms[0]
	switch {
	case m.GetLength() == 0:
		return crirpc.InvalidArgf("%s: %s mapping %d:%d of length 0 maps nothing", what, kind, m.GetContainerId(), m.GetHostId())
	case m.GetContainerId() != 0:
		return crirpc.InvalidArgf("%s: %s mapping starts at container id %d: it must map container id 0 (root), which every image expects", what, kind, m.GetContainerId())
	case m.GetHostId() == 0:
		return crirpc.InvalidArgf("%s: %s mapping maps container root onto the node's root (host id 0): a pod's own user namespace must map it to an unprivileged range", what, kind)
	case uint64(m.GetHostId())+uint64(m.GetLength())-1 > maxID:
		return crirpc.InvalidArgf("%s: %s mapping %d:%d:%d ends past the largest id, %d", what, kind, m.GetContainerId(), m.GetHostId(), m.GetLength(), uint64(maxID))
	}
	return nil
}

// containerUserns checks a container's user namespace against its pod's
// and says which bind mounts the wrapper idmaps. A container of a pod with
// its own user namespace joins it: kubelet sends the pod's options with
// each container; NODE, or other maps, are refused. A container of a pod
// in the node's user namespace cannot have one of its own, nor idmapped
// mounts, which need one.
func containerUserns(in ContainerInput) (idmapped []string, err error) {
	cfg := in.Config
	u := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if err := ValidateUserNamespace("container", u); err != nil {
		return nil, err
	}
	_, _, asks := PodUserNS(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions())
	if in.UserNS == nil {
		if asks {
			return nil, crirpc.InvalidArgf("container asks for its pod's user namespace, but pod sandbox %s runs in the node's (it was run without user namespace mode POD)", in.SandboxID)
		}
		for _, m := range cfg.GetMounts() {
			if len(m.GetUidMappings()) > 0 || len(m.GetGidMappings()) > 0 {
				return nil, crirpc.InvalidArgf("mount %s: idmapped mounts need the pod's own user namespace (hostUsers: false)", ShortQuote(m.GetContainerPath()))
			}
		}
		return nil, nil
	}
	if u != nil && u.GetMode() == runtimeapi.NamespaceMode_NODE {
		return nil, crirpc.InvalidArgf("container asks for the node's user namespace in pod sandbox %s, which has its own: a pod's containers share its user namespace", in.SandboxID)
	}
	if asks {
		uids, gids, _ := PodUserNS(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions())
		if !slices.Equal(uids, in.UserNS.UIDs) || !slices.Equal(gids, in.UserNS.GIDs) {
			return nil, crirpc.InvalidArgf("container's user namespace mappings %v %v differ from its pod's %v %v", uids, gids, in.UserNS.UIDs, in.UserNS.GIDs)
		}
	}
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	for _, m := range []struct {
		kind string
		mode runtimeapi.NamespaceMode
	}{{"network", ns.GetNetwork()}, {"pid", ns.GetPid()}, {"ipc", ns.GetIpc()}} {
		if m.mode == runtimeapi.NamespaceMode_NODE {
			return nil, crirpc.InvalidArgf("container in a pod with its own user namespace asks for the node's %s namespace, which the pod's user namespace cannot enter", m.kind)
		}
	}
	for _, m := range cfg.GetMounts() {
		if len(m.GetUidMappings()) == 0 && len(m.GetGidMappings()) == 0 {
			continue
		}
		if !slices.Equal(idMaps(m.GetUidMappings()), in.UserNS.UIDs) || !slices.Equal(idMaps(m.GetGidMappings()), in.UserNS.GIDs) {
			return nil, crirpc.InvalidArgf("mount %s: its id mappings differ from the pod's user namespace's: netshim idmaps a mount only as its pod's user namespace maps", ShortQuote(m.GetContainerPath()))
		}
		idmapped = append(idmapped, filepath.Clean(m.GetContainerPath()))
	}
	return idmapped, nil
}

// containerMarker is what the OCI wrapper must do for a container besides
// the namespaces paths names: join its pod's user namespace with its
// idmapped mounts and image, and give it exactly the groups it asks
// (SupplementalGroupsPolicy Strict), which Docker cannot express.
func containerMarker(in ContainerInput, paths podns.Paths) (podns.Marker, error) {
	m := podns.Marker{Paths: paths}
	idmapped, err := containerUserns(in)
	if err != nil {
		return m, err
	}
	if in.UserNS != nil {
		if m.Paths == nil {
			m.Paths = podns.Paths{}
		}
		m.Paths[podns.User] = in.UserNS.Path
		m.UIDs, m.GIDs = in.UserNS.UIDs, in.UserNS.GIDs
		m.IDMapMounts = idmapped
	}
	sc := in.Config.GetLinux().GetSecurityContext()
	if sc.GetSupplementalGroupsPolicy() == runtimeapi.SupplementalGroupsPolicy_Strict {
		m.StrictGroups = true
		for _, g := range sc.GetSupplementalGroups() {
			if g < 0 || g > maxID {
				return m, crirpc.InvalidArgf("supplemental group %d is out of range", g)
			}
			m.Groups = append(m.Groups, uint32(g))
		}
		if len(m.Paths) == 0 {
			m.Dir = in.KeyDir
		}
	}
	if m.Empty() {
		return m, nil
	}
	if in.WrapperRuntime == "" {
		return m, crirpc.WithCode(codes.FailedPrecondition, errors.New(wrapperNeeded(m)))
	}
	if in.OCIKey == nil || (len(m.Paths) == 0 && m.Dir == "") {
		return m, ErrNoOCIKey
	}
	return m, nil
}

// wrapperNeeded says why a container cannot run without the wrapper.
func wrapperNeeded(m podns.Marker) string {
	what := "a pause-less pod's namespaces"
	if m.StrictGroups {
		what = "supplementalGroupsPolicy: Strict"
	}
	if _, ok := m.Paths[podns.User]; ok {
		what = "a pod user namespace (hostUsers: false)"
	}
	return fmt.Sprintf("%s needs netshim's OCI wrapper: Docker cannot express it. Register /usr/bin/netshim-oci in the Docker engine as runtime \"netshim-oci\" (daemon.json \"runtimes\", then SIGHUP dockerd), and run the pod without a runtime handler", what)
}
