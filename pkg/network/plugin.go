// Package network defines the contract between the runtime (dockerservice)
// and a pod network implementation (CNI, kubenet, none), and the
// PluginManager that serialises operations per pod.
//
// It is the bottom floor of the project: it imports nothing from netshim, so
// plugins and the runtime can both depend on it without cycles.
package network

import (
	"context"
	"net"
	"strings"
)

// Well-known plugin names, as accepted by --network-plugin.
const (
	// NoopPluginName is the plugin that does nothing: pods get only the
	// network Docker gives them (none for sandboxes, so loopback only).
	NoopPluginName = "none"
)

// Event names delivered through NetworkPlugin.Event.
const (
	// NetPluginEventPodCIDRChange is sent when the node's pod CIDR changes
	// (CRI UpdateRuntimeConfig). Details carry NetPluginEventPodCIDRKey.
	NetPluginEventPodCIDRChange = "pod-cidr-change"
	// NetPluginEventPodCIDRKey is the details key holding the CIDR string
	// (possibly a comma-separated dual-stack pair).
	NetPluginEventPodCIDRKey = "pod-cidr"
)

// Capability bits a plugin may advertise.
type Capabilities uint32

const (
	// CapShaping means the plugin applies the bandwidth annotations itself.
	CapShaping Capabilities = 1 << iota
	// CapHostPorts means the plugin programs hostPort mappings itself.
	CapHostPorts
)

// Has reports whether every bit of c2 is set in c.
func (c Capabilities) Has(c2 Capabilities) bool { return c&c2 == c2 }

// HairpinMode says how a pod may reach itself through its own service IP.
type HairpinMode string

const (
	HairpinVeth        HairpinMode = "hairpin-veth"
	PromiscuousBridge  HairpinMode = "promiscuous-bridge"
	HairpinNone        HairpinMode = "none"
	DefaultHairpinMode             = HairpinVeth
)

// PluginConfig is what the runtime hands a plugin in Init.
type PluginConfig struct {
	HairpinMode       HairpinMode
	NonMasqueradeCIDR string
	// MTU is the pod interface MTU; 0 lets the plugin decide.
	MTU int
}

// PodRef identifies one pod sandbox for the plugin. SandboxID is the
// infra container's ID; it is the CNI ContainerID.
type PodRef struct {
	Namespace string
	Name      string
	UID       string
	SandboxID string
}

func (p PodRef) String() string { return p.Namespace + "/" + p.Name + " (" + p.SandboxID + ")" }

// PortMapping is one hostPort mapping of a pod.
type PortMapping struct {
	// Protocol is "tcp", "udp" or "sctp" (lower case, as CNI expects).
	Protocol      string `json:"protocol"`
	ContainerPort int32  `json:"containerPort"`
	HostPort      int32  `json:"hostPort"`
	HostIP        string `json:"hostIP,omitempty"`
}

// DNSConfig is the pod's DNS configuration, passed to plugins that
// advertise the "dns" capability.
type DNSConfig struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// SetUpOptions carries per-pod settings that are not in the annotations.
type SetUpOptions struct {
	DNS *DNSConfig
}

// PodNetworkStatus is what a plugin knows of a pod's network.
type PodNetworkStatus struct {
	// IPs are the pod's addresses, primary first (IPv4 before IPv6).
	IPs []net.IP
	// Result is the plugin's raw result (e.g. the CNI ADD result as JSON),
	// for verbose status output. May be nil.
	Result []byte
}

// Host is what a plugin may ask of the runtime. It keeps plugins free of
// any dependency on the Docker-specific code.
type Host interface {
	// GetNetNS returns the network namespace path of the sandbox, or ""
	// when it is gone (container removed or stopped). It is not an error
	// for the namespace to be gone: teardown must still proceed.
	GetNetNS(ctx context.Context, sandboxID string) (string, error)
	// GetPodPortMappings returns the sandbox's hostPort mappings, from
	// the checkpoint so that it works even after the container is gone.
	GetPodPortMappings(ctx context.Context, sandboxID string) ([]PortMapping, error)
}

// NetworkPlugin is the interface a pod network implementation provides.
type NetworkPlugin interface {
	// Init is called once, before any other method.
	Init(host Host, cfg PluginConfig) error
	// Event delivers runtime events (e.g. pod CIDR change).
	Event(name string, details map[string]any)
	// Name returns the plugin's name as used by --network-plugin.
	Name() string
	// Capabilities says which optional features the plugin implements.
	Capabilities() Capabilities
	// SetUpPod attaches the sandbox to the pod network. The sandbox's
	// infra container is running when it is called.
	SetUpPod(ctx context.Context, pod PodRef, annotations map[string]string, opts SetUpOptions) error
	// TearDownPod detaches the sandbox and releases everything SetUpPod
	// took (IPs, host rules). It must work when the netns is gone.
	TearDownPod(ctx context.Context, pod PodRef) error
	// GetPodNetworkStatus reports the pod's addresses.
	GetPodNetworkStatus(ctx context.Context, pod PodRef) (*PodNetworkStatus, error)
	// Status returns nil when the plugin is ready to set up pods, or an
	// error whose text says why not.
	Status() error
}

// SplitDirs splits a comma-separated directory list, dropping empty items.
func SplitDirs(dirs string) []string {
	var out []string
	for _, d := range strings.Split(dirs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}
