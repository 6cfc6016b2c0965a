package harness

import (
	"maps"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultPodNamespace is the namespace of a Pod built without InNamespace:
// kubelet's default namespace.
const DefaultPodNamespace = "default"

// PodOption changes a sandbox config Pod builds. Options apply in order;
// a later one overrides what an earlier one set, except the map and list
// options (labels, annotations, sysctls, port mappings), which add to
// what is there.
type PodOption func(*runtimeapi.PodSandboxConfig)

// Pod builds the CRI sandbox config of a pod named name: in namespace
// "default", with hostname name and an empty Linux section (every
// netshim path reads it), changed by opts. Without WithUID the pod gets
// the UID "<namespace>-<name>", computed after the options: unique as
// long as the test's (namespace, name) pairs are, and predictable, so a
// test can name what kubelet derives from the UID (the pod's cgroup
// parent, its log directory) before the pod runs.
func Pod(name string, opts ...PodOption) *runtimeapi.PodSandboxConfig {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: DefaultPodNamespace},
		Hostname: name,
		Linux:    &runtimeapi.LinuxPodSandboxConfig{},
	}
	for _, o := range opts {
		o(cfg)
	}
	if md := cfg.Metadata; md.Uid == "" {
		md.Uid = md.Namespace + "-" + md.Name
	}
	return cfg
}

// InNamespace puts the pod in namespace ns.
func InNamespace(ns string) PodOption {
	return func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Namespace = ns }
}

// WithUID gives the pod the UID uid instead of the derived one.
func WithUID(uid string) PodOption {
	return func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Uid = uid }
}

// WithPodAttempt sets the sandbox's attempt number (kubelet counts the
// sandboxes it made for one pod from 0).
func WithPodAttempt(n uint32) PodOption {
	return func(c *runtimeapi.PodSandboxConfig) { c.Metadata.Attempt = n }
}

// WithHostname sets the pod's hostname (default: its name).
func WithHostname(h string) PodOption {
	return func(c *runtimeapi.PodSandboxConfig) { c.Hostname = h }
}

// WithLogDirectory sets the directory the pod's container logs go under
// (the config's log_directory; a container's log_path is relative to it).
func WithLogDirectory(dir string) PodOption {
	return func(c *runtimeapi.PodSandboxConfig) { c.LogDirectory = dir }
}

// WithPodLabels adds labels to the pod's (a copy: the caller's map is not
// kept).
func WithPodLabels(labels map[string]string) PodOption {
	return func(c *runtimeapi.PodSandboxConfig) { c.Labels = mergeInto(c.Labels, labels) }
}

// WithPodAnnotations adds annotations to the pod's (a copy).
func WithPodAnnotations(annotations map[string]string) PodOption {
	return func(c *runtimeapi.PodSandboxConfig) { c.Annotations = mergeInto(c.Annotations, annotations) }
}

// WithPortMappings adds copies of pms to the pod's port mappings.
func WithPortMappings(pms ...*runtimeapi.PortMapping) PodOption {
	return func(c *runtimeapi.PodSandboxConfig) { c.PortMappings = appendClones(c.PortMappings, pms) }
}

// WithHostPort maps host port hostPort (all host addresses) to the pod's
// containerPort over proto.
func WithHostPort(containerPort, hostPort int32, proto runtimeapi.Protocol) PodOption {
	return WithPortMappings(&runtimeapi.PortMapping{Protocol: proto, ContainerPort: containerPort, HostPort: hostPort})
}

// WithPodDNS sets the pod's resolv.conf contents.
func WithPodDNS(servers, searches, options []string) PodOption {
	return func(c *runtimeapi.PodSandboxConfig) {
		c.DnsConfig = &runtimeapi.DNSConfig{Servers: servers, Searches: searches, Options: options}
	}
}

// WithPodCgroupParent sets the cgroup the pod's containers go under.
func WithPodCgroupParent(parent string) PodOption {
	return WithPodLinux(func(l *runtimeapi.LinuxPodSandboxConfig) { l.CgroupParent = parent })
}

// WithSysctls adds namespaced sysctls to the pod's.
func WithSysctls(sysctls map[string]string) PodOption {
	return WithPodLinux(func(l *runtimeapi.LinuxPodSandboxConfig) { l.Sysctls = mergeInto(l.Sysctls, sysctls) })
}

// WithPodNamespaceModes sets the pod's network, PID and IPC namespace
// modes (NODE for the host's, POD for the pod's own; PID may also be
// CONTAINER, kubelet's default).
func WithPodNamespaceModes(network, pid, ipc runtimeapi.NamespaceMode) PodOption {
	return WithPodSecurityContext(func(sc *runtimeapi.LinuxSandboxSecurityContext) {
		sc.NamespaceOptions = &runtimeapi.NamespaceOption{Network: network, Pid: pid, Ipc: ipc}
	})
}

// WithUserNamespace gives the pod a user namespace of its own, as kubelet
// asks for hostUsers: false: container ids 0..length-1 mapped from hostID,
// one range for uids and the same for gids. Its other namespace modes stay
// as they are.
func WithUserNamespace(hostID, length uint32) PodOption {
	return WithPodSecurityContext(func(sc *runtimeapi.LinuxSandboxSecurityContext) {
		if sc.NamespaceOptions == nil {
			sc.NamespaceOptions = &runtimeapi.NamespaceOption{}
		}
		m := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: hostID, Length: length}}
		sc.NamespaceOptions.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}
	})
}

// WithHostNetwork puts the pod in the host's network namespace, leaving
// its other namespace modes as they are.
func WithHostNetwork() PodOption {
	return WithPodSecurityContext(func(sc *runtimeapi.LinuxSandboxSecurityContext) {
		if sc.NamespaceOptions == nil {
			sc.NamespaceOptions = &runtimeapi.NamespaceOption{}
		}
		sc.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	})
}

// WithPodSecurityContext calls f on the pod's Linux security context,
// made first if the config has none.
func WithPodSecurityContext(f func(*runtimeapi.LinuxSandboxSecurityContext)) PodOption {
	return WithPodLinux(func(l *runtimeapi.LinuxPodSandboxConfig) {
		if l.SecurityContext == nil {
			l.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{}
		}
		f(l.SecurityContext)
	})
}

// WithPodLinux calls f on the pod's Linux section (made first if an
// earlier option removed it): the way to set what no other option does.
func WithPodLinux(f func(*runtimeapi.LinuxPodSandboxConfig)) PodOption {
	return func(c *runtimeapi.PodSandboxConfig) {
		if c.Linux == nil {
			c.Linux = &runtimeapi.LinuxPodSandboxConfig{}
		}
		f(c.Linux)
	}
}

// mergeInto copies src's entries into dst, made if nil, and returns it.
// Copying keeps a config from sharing a map with its caller or with
// another config built from the same option, so a test changing one
// config changes nothing else.
func mergeInto(dst, src map[string]string) map[string]string {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[string]string, len(src))
	}
	maps.Copy(dst, src)
	return dst
}

// appendClones appends copies of msgs to dst, for the reason mergeInto
// copies maps.
func appendClones[M proto.Message](dst, msgs []M) []M {
	for _, m := range msgs {
		dst = append(dst, proto.Clone(m).(M))
	}
	return dst
}
