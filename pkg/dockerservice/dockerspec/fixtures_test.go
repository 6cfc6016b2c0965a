package dockerspec

import (
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
)

// The images of the fixtures, as kubelet names them.
const (
	testPauseImage  = "registry.k8s.io/pause:3.10"
	testImageDigest = "docker.io/library/busybox@sha256:" + "dddddddddddddddddddddddddddddddd" + "dddddddddddddddddddddddddddddddd"
)

// imageID is an image ID as kubelet passes it after a pull.
var imageID = "sha256:" + strings.Repeat("b", 64)

// codeOf is the gRPC code an error becomes at the RPC boundary.
var codeOf = crirpc.Code

// podConfig is a sandbox config every check accepts, with a port mapping
// and DNS settings for the cases that change them.
func podConfig(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: "uid-" + name},
		Hostname:     name,
		Labels:       map[string]string{"io.kubernetes.pod.name": name},
		Annotations:  map[string]string{},
		PortMappings: []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 8080, HostPort: 30080}},
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"default.svc.cluster.local"}},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/besteffort/pod-" + name},
	}
}

// ctrConfig is a container config every check accepts, with the security
// context's namespace options set for the cases that change them.
func ctrConfig(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: name},
		Image:       &runtimeapi.ImageSpec{Image: imageID},
		Command:     []string{"/bin/true"},
		Envs:        []*runtimeapi.KeyValue{{Key: "PATH", Value: []byte("/bin")}},
		Labels:      map[string]string{"io.kubernetes.container.name": name},
		Annotations: map[string]string{},
		LogPath:     name + "/0.log",
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{}},
		},
	}
}

// sc is a container config's security context.
func sc(cfg *runtimeapi.ContainerConfig) *runtimeapi.LinuxContainerSecurityContext {
	return cfg.Linux.SecurityContext
}

// withNamespaces is ctrConfig with the container's namespace options.
func withNamespaces(cfg *runtimeapi.ContainerConfig, ns *runtimeapi.NamespaceOption) *runtimeapi.ContainerConfig {
	cfg.Linux.SecurityContext.NamespaceOptions = ns
	return cfg
}

// imageVolume is the mount kubelet 1.36 sends for an image volume: the
// pulled image's ref, no host path, and the volume mount's subPath.
func imageVolume(dst, subPath string) *runtimeapi.Mount {
	return &runtimeapi.Mount{ContainerPath: dst, Readonly: true, Image: &runtimeapi.ImageSpec{Image: imageID, UserSpecifiedImage: "busybox:1.36"}, ImageSubPath: subPath}
}
