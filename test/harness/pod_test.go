package harness

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPod(t *testing.T) {
	md := func(name, ns, uid string, attempt uint32) *runtimeapi.PodSandboxMetadata {
		return &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid, Attempt: attempt}
	}
	nsModes := func(network, pid, ipc runtimeapi.NamespaceMode) *runtimeapi.LinuxPodSandboxConfig {
		return &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: network, Pid: pid, Ipc: ipc},
		}}
	}
	tcp80 := &runtimeapi.PortMapping{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: 8080}
	for _, c := range []struct {
		name string
		opts []PodOption
		want *runtimeapi.PodSandboxConfig
	}{
		{
			name: "defaults",
			want: &runtimeapi.PodSandboxConfig{Metadata: md("web", "default", "default-web", 0), Hostname: "web", Linux: &runtimeapi.LinuxPodSandboxConfig{}},
		},
		{
			name: "the derived UID follows a namespace set by any option",
			opts: []PodOption{WithPodAttempt(2), InNamespace("ns1")},
			want: &runtimeapi.PodSandboxConfig{Metadata: md("web", "ns1", "ns1-web", 2), Hostname: "web", Linux: &runtimeapi.LinuxPodSandboxConfig{}},
		},
		{
			name: "an explicit UID wins whatever the order",
			opts: []PodOption{WithUID("u-1"), InNamespace("ns1")},
			want: &runtimeapi.PodSandboxConfig{Metadata: md("web", "ns1", "u-1", 0), Hostname: "web", Linux: &runtimeapi.LinuxPodSandboxConfig{}},
		},
		{
			name: "hostname, log directory, DNS",
			opts: []PodOption{WithHostname("h"), WithLogDirectory("/logs/web"), WithPodDNS([]string{"10.96.0.10"}, []string{"svc.cluster.local"}, []string{"ndots:5"})},
			want: &runtimeapi.PodSandboxConfig{
				Metadata: md("web", "default", "default-web", 0), Hostname: "h", LogDirectory: "/logs/web",
				DnsConfig: &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"svc.cluster.local"}, Options: []string{"ndots:5"}},
				Linux:     &runtimeapi.LinuxPodSandboxConfig{},
			},
		},
		{
			name: "labels and annotations add up, a later value wins",
			opts: []PodOption{
				WithPodLabels(map[string]string{"a": "1", "b": "1"}), WithPodLabels(map[string]string{"b": "2"}),
				WithPodAnnotations(map[string]string{"x": "y"}), WithPodLabels(nil),
			},
			want: &runtimeapi.PodSandboxConfig{
				Metadata: md("web", "default", "default-web", 0), Hostname: "web",
				Labels: map[string]string{"a": "1", "b": "2"}, Annotations: map[string]string{"x": "y"},
				Linux: &runtimeapi.LinuxPodSandboxConfig{},
			},
		},
		{
			name: "empty maps add nothing",
			opts: []PodOption{WithPodLabels(map[string]string{}), WithPodAnnotations(nil), WithSysctls(nil)},
			want: &runtimeapi.PodSandboxConfig{Metadata: md("web", "default", "default-web", 0), Hostname: "web", Linux: &runtimeapi.LinuxPodSandboxConfig{}},
		},
		{
			name: "port mappings add up",
			opts: []PodOption{WithPortMappings(tcp80), WithHostPort(53, 5353, runtimeapi.Protocol_UDP)},
			want: &runtimeapi.PodSandboxConfig{
				Metadata: md("web", "default", "default-web", 0), Hostname: "web",
				PortMappings: []*runtimeapi.PortMapping{tcp80, {Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353}},
				Linux:        &runtimeapi.LinuxPodSandboxConfig{},
			},
		},
		{
			name: "cgroup parent and sysctls",
			opts: []PodOption{WithPodCgroupParent("/kubepods/pod1"), WithSysctls(map[string]string{"net.ipv4.ip_forward": "1"})},
			want: &runtimeapi.PodSandboxConfig{
				Metadata: md("web", "default", "default-web", 0), Hostname: "web",
				Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/pod1", Sysctls: map[string]string{"net.ipv4.ip_forward": "1"}},
			},
		},
		{
			name: "namespace modes",
			opts: []PodOption{WithPodNamespaceModes(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD)},
			want: &runtimeapi.PodSandboxConfig{
				Metadata: md("web", "default", "default-web", 0), Hostname: "web",
				Linux: nsModes(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD),
			},
		},
		{
			name: "host network keeps the other namespace modes",
			opts: []PodOption{WithPodNamespaceModes(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD), WithHostNetwork()},
			want: &runtimeapi.PodSandboxConfig{
				Metadata: md("web", "default", "default-web", 0), Hostname: "web",
				Linux: nsModes(runtimeapi.NamespaceMode_NODE, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD),
			},
		},
		{
			name: "host network alone",
			opts: []PodOption{WithHostNetwork()},
			want: &runtimeapi.PodSandboxConfig{
				Metadata: md("web", "default", "default-web", 0), Hostname: "web",
				Linux: nsModes(runtimeapi.NamespaceMode_NODE, runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_POD),
			},
		},
		{
			name: "a Linux option after the section was removed makes it again",
			opts: []PodOption{func(c *runtimeapi.PodSandboxConfig) { c.Linux = nil }, WithPodLinux(func(l *runtimeapi.LinuxPodSandboxConfig) { l.CgroupParent = "p" })},
			want: &runtimeapi.PodSandboxConfig{Metadata: md("web", "default", "default-web", 0), Hostname: "web", Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "p"}},
		},
		{
			name: "security context escape hatch",
			opts: []PodOption{WithPodSecurityContext(func(sc *runtimeapi.LinuxSandboxSecurityContext) { sc.Privileged = true })},
			want: &runtimeapi.PodSandboxConfig{
				Metadata: md("web", "default", "default-web", 0), Hostname: "web",
				Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}},
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			requireProtoEqual(t, Pod("web", c.opts...), c.want)
		})
	}
}

// TestPodSharesNothing checks that configs built from the same options
// share no map or message with each other or with the caller: a test that
// changes one config (or its own map) changes nothing else.
func TestPodSharesNothing(t *testing.T) {
	labels := map[string]string{"a": "1"}
	pm := &runtimeapi.PortMapping{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: 8080}
	opts := []PodOption{WithPodLabels(labels), WithPortMappings(pm), WithSysctls(map[string]string{"k": "v"})}
	first, second := Pod("one", opts...), Pod("two", opts...)

	first.Labels["a"] = "changed"
	first.PortMappings[0].HostPort = 1
	first.Linux.Sysctls["k"] = "changed"
	labels["b"] = "added"
	pm.ContainerPort = 1

	requireProtoEqual(t, second, &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "two", Namespace: "default", Uid: "default-two"},
		Hostname:     "two",
		Labels:       map[string]string{"a": "1"},
		PortMappings: []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: 8080}},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{Sysctls: map[string]string{"k": "v"}},
	})
}

// TestPodJSONForCrictl checks that a Pod survives encoding/json both
// ways, field for field: crictl reads pod config files with a JSON/YAML
// decoder into the same Go type, so the suite writes its files from Pod.
func TestPodJSONForCrictl(t *testing.T) {
	in := Pod("web", InNamespace("ns"), WithLogDirectory("/logs/web"), WithHostPort(80, 8080, runtimeapi.Protocol_TCP),
		WithPodLabels(map[string]string{"k": "v"}), WithPodCgroupParent("/p"))
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(data, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"metadata", "hostname", "log_directory", "port_mappings", "labels", "linux"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("JSON %s has no key %q (crictl's field name)", data, k)
		}
	}
	var out runtimeapi.PodSandboxConfig
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	requireProtoEqual(t, &out, in)
}

func requireProtoEqual(t *testing.T, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", prototext.Format(got), prototext.Format(want))
	}
}
