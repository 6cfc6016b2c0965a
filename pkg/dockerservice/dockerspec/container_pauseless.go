package dockerspec

import (
	"errors"
	"path/filepath"

	"github.com/docker/docker/api/types/container"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/podns"
)

// ErrNoOCIKey: the markers cannot be signed (netshim found no key in
// --netns-dir), so the wrapper would refuse the container.
var ErrNoOCIKey = crirpc.WithCode(codes.FailedPrecondition, errors.New("pinned sandbox namespaces need the OCI wrapper's key in --netns-dir, which netshim could not make (see its start-up log)"))

// devShm is where a pod's shared /dev/shm is bound in its containers.
const devShm = "/dev/shm"

// setPauselessNamespaces puts a container of a pause-less sandbox in its
// pod (sandbox_pauseless.go). Docker is asked for namespaces of the
// container's own (network none, a private IPC namespace, its own UTS
// namespace), and the marker names the pod's pinned ones, which the OCI
// wrapper puts in their place before runc runs. What a pause container
// would have given the container comes from the checkpoint: the hostname
// and resolv.conf (Docker writes both per container). The pod's sysctls
// are in its namespaces already, written before the CNI ADD
// (pauselessSandboxes.run), and the wrapper drops those of the namespaces it
// pins from the container's config (podns.ApplyToConfig): a sandbox of an
// earlier netshim had them written by its first containers, and its
// namespaces keep them.
func setPauselessNamespaces(config *container.Config, hc *container.HostConfig, in ContainerInput) (podns.Paths, error) {
	ns := in.Config.GetLinux().GetSecurityContext().GetNamespaceOptions()
	cp := in.Pauseless
	pl := cp.Pauseless
	paths := podns.Paths{}
	if ns.GetNetwork() == runtimeapi.NamespaceMode_NODE {
		// Only a client other than kubelet asks this of a container in a
		// pod that has its own network: the node's, as setNamespaces does.
		hc.NetworkMode, hc.UTSMode = "host", "host"
	} else {
		hc.NetworkMode = "none"
		paths[podns.Net], paths[podns.UTS] = cp.NetNS, pl.UTS
		config.Hostname = pl.Hostname
		if pl.DNS != nil {
			hc.DNS, hc.DNSSearch, hc.DNSOptions = pl.DNS.Servers, pl.DNS.Searches, pl.DNS.Options
		}
	}
	if ns.GetIpc() == runtimeapi.NamespaceMode_NODE {
		hc.IpcMode = "host"
	} else {
		hc.IpcMode = "private"
		paths[podns.IPC] = pl.IPC
	}
	if len(paths) > 0 && in.OCIKey == nil {
		return nil, ErrNoOCIKey
	}
	// The marker (ContainerConfig) names them.
	return paths, setPid(hc, in, "")
}

// pauselessShmBind binds the pod's /dev/shm into a container of a
// pause-less sandbox, unless the container mounts its own there (an
// emptyDir with medium Memory, often). Docker then makes no /dev/shm of
// its own for the container.
func pauselessShmBind(ms []*runtimeapi.Mount, in ContainerInput) []string {
	if in.Pauseless == nil || in.Pauseless.Pauseless.Shm == "" {
		return nil
	}
	ns := in.Config.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if ns.GetIpc() == runtimeapi.NamespaceMode_NODE {
		return nil
	}
	for _, m := range ms {
		if filepath.Clean(m.GetContainerPath()) == devShm {
			return nil
		}
	}
	return []string{in.Pauseless.Pauseless.Shm + ":" + devShm}
}
