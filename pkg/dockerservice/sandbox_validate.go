package dockerservice

import (
	"net"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/network"
)

// validateSandboxConfig rejects, before anything is created, what would
// otherwise fail halfway or produce a pod nobody can address.
func validateSandboxConfig(cfg *runtimeapi.PodSandboxConfig) error {
	if cfg == nil {
		return invalidArgf("pod sandbox config is required")
	}
	md := cfg.GetMetadata()
	if md == nil {
		return invalidArgf("pod sandbox config: metadata is required")
	}
	for field, v := range map[string]string{"name": md.Name, "namespace": md.Namespace, "uid": md.Uid} {
		if v == "" {
			return invalidArgf("pod sandbox metadata: %s is required", field)
		}
	}
	type portKey struct {
		proto runtimeapi.Protocol
		ip    string
		port  int32
	}
	seen := map[portKey]int{}
	for i, pm := range cfg.GetPortMappings() {
		if pm.ContainerPort <= 0 || pm.ContainerPort > 65535 {
			return invalidArgf("port mapping %d: container port %d is out of range 1-65535", i, pm.ContainerPort)
		}
		if pm.HostPort < 0 || pm.HostPort > 65535 {
			return invalidArgf("port mapping %d: host port %d is out of range 0-65535", i, pm.HostPort)
		}
		if _, ok := runtimeapi.Protocol_name[int32(pm.Protocol)]; !ok {
			return invalidArgf("port mapping %d: unknown protocol %d (want TCP, UDP or SCTP)", i, pm.Protocol)
		}
		if pm.HostIp != "" && net.ParseIP(pm.HostIp) == nil {
			return invalidArgf("port mapping %d: host IP %q is not an IP address", i, pm.HostIp)
		}
		if pm.HostPort == 0 {
			continue
		}
		k := portKey{pm.Protocol, pm.HostIp, pm.HostPort}
		if j, dup := seen[k]; dup {
			return invalidArgf("port mappings %d and %d both claim host port %s/%d", j, i, pm.Protocol, pm.HostPort)
		}
		seen[k] = i
	}
	if _, _, err := network.ExtractPodBandwidth(cfg.GetAnnotations()); err != nil {
		return invalidArgf("%v", err)
	}
	if ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(); ns != nil {
		if ns.Network == runtimeapi.NamespaceMode_CONTAINER || ns.Network == runtimeapi.NamespaceMode_TARGET {
			return invalidArgf("network namespace mode %s is not supported for a pod sandbox", ns.Network)
		}
	}
	return nil
}

// protocolName is the lower-case protocol name CNI's portmap expects.
func protocolName(p runtimeapi.Protocol) string {
	switch p {
	case runtimeapi.Protocol_UDP:
		return "udp"
	case runtimeapi.Protocol_SCTP:
		return "sctp"
	default:
		return "tcp"
	}
}
