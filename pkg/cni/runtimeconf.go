package cni

import (
	"math"
	"strings"

	"github.com/containernetworking/cni/libcni"

	"github.com/netshim/netshim/pkg/network"
)

// Capability argument names, as defined by the CNI conventions document.
// libcni passes each one only to the plugins of the chain whose config
// declares the capability, so sending them all is harmless.
const (
	capPortMappings = "portMappings"
	capBandwidth    = "bandwidth"
	capIPRanges     = "ipRanges"
	capDNS          = "dns"
)

// portMappingArg is one entry of the "portMappings" capability.
type portMappingArg struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// bandwidthArg is the "bandwidth" capability. Rates are bits per second,
// bursts bits. A zero field is omitted so that only the directions the pod
// asked to shape are shaped.
type bandwidthArg struct {
	IngressRate  int64 `json:"ingressRate,omitempty"`
	IngressBurst int64 `json:"ingressBurst,omitempty"`
	EgressRate   int64 `json:"egressRate,omitempty"`
	EgressBurst  int64 `json:"egressBurst,omitempty"`
}

// ipRangeArg is one range of the "ipRanges" capability.
type ipRangeArg struct {
	Subnet string `json:"subnet"`
}

// dnsArg is the "dns" capability.
type dnsArg struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// runtimeConfInput is everything that goes into one RuntimeConf. It is a
// struct so that buildRuntimeConf depends on nothing but its argument.
type runtimeConfInput struct {
	Pod          network.PodRef
	NetNS        string
	IfName       string
	CacheDir     string
	PortMappings []network.PortMapping
	Annotations  map[string]string // for the bandwidth annotations
	DNS          *network.DNSConfig
	PodCIDRs     []string // at most one per IP family, as validated by Event
}

// buildRuntimeConf builds the libcni RuntimeConf of a pod. CNI_ARGS carry
// the pod identity the way kubelet always did (several plugins, e.g.
// Calico and Multus, read K8S_POD_*); IgnoreUnknown=1 keeps plugins that
// do not know those keys from refusing them. Capability arguments are
// included only when they have a value, so that a plugin never sees an
// empty list it might misread as "remove everything".
func buildRuntimeConf(in runtimeConfInput) (*libcni.RuntimeConf, error) {
	rt := &libcni.RuntimeConf{
		ContainerID: in.Pod.SandboxID,
		NetNS:       in.NetNS,
		IfName:      in.IfName,
		CacheDir:    in.CacheDir,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", in.Pod.Namespace},
			{"K8S_POD_NAME", in.Pod.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", in.Pod.SandboxID},
			{"K8S_POD_UID", in.Pod.UID},
		},
		CapabilityArgs: map[string]any{},
	}

	// Only mappings with a host port need host rules; a containerPort
	// alone is informational.
	var mappings []portMappingArg
	for _, pm := range in.PortMappings {
		if pm.HostPort <= 0 {
			continue
		}
		proto := strings.ToLower(pm.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		mappings = append(mappings, portMappingArg{
			HostPort:      pm.HostPort,
			ContainerPort: pm.ContainerPort,
			Protocol:      proto,
			HostIP:        pm.HostIP,
		})
	}
	if len(mappings) > 0 {
		rt.CapabilityArgs[capPortMappings] = mappings
	}

	ingress, egress, err := network.ExtractPodBandwidth(in.Annotations)
	if err != nil {
		return nil, err
	}
	if ingress != nil || egress != nil {
		// The burst is the largest the bandwidth plugin accepts, as
		// dockershim did: the annotations have no burst, and a small one
		// would throttle below the asked rate.
		var bw bandwidthArg
		if ingress != nil {
			bw.IngressRate, bw.IngressBurst = *ingress, math.MaxInt32
		}
		if egress != nil {
			bw.EgressRate, bw.EgressBurst = *egress, math.MaxInt32
		}
		rt.CapabilityArgs[capBandwidth] = bw
	}

	// One range set per family: host-local allocates one address from
	// each set, which is how a dual-stack pod gets an IPv4 and an IPv6.
	if len(in.PodCIDRs) > 0 {
		ranges := make([][]ipRangeArg, 0, len(in.PodCIDRs))
		for _, c := range in.PodCIDRs {
			ranges = append(ranges, []ipRangeArg{{Subnet: c}})
		}
		rt.CapabilityArgs[capIPRanges] = ranges
	}

	if d := in.DNS; d != nil && (len(d.Servers) > 0 || len(d.Searches) > 0 || len(d.Options) > 0) {
		rt.CapabilityArgs[capDNS] = dnsArg{Servers: d.Servers, Searches: d.Searches, Options: d.Options}
	}
	return rt, nil
}

// parsePodCIDRs validates a pod CIDR as sent with the pod-cidr-change
// event and returns its ranges as strings, IPv4 first.
func parsePodCIDRs(s string) ([]string, error) {
	nets, err := network.ParsePodCIDRs(s)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(nets))
	for i, n := range nets {
		out[i] = n.String()
	}
	return out, nil
}
