package dockerspec

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
)

// The fuzz targets here decode a CRI config from fuzzed protobuf bytes, so
// every field the mapping reads can be reached, run it through the
// RPC's validation and the mapping to Docker, and check that the result
// only uses what the request gave: host paths, labels and names.

func mustMarshal(f *testing.F, m proto.Message) []byte {
	f.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// unmarshalKnown decodes fuzzed bytes the way the mapping sees a request:
// unknown fields carry nothing netshim reads or writes back, so comparing
// them (proto.Equal does) would only report that they are not kept.
func unmarshalKnown(data []byte, m proto.Message) error {
	return proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, m)
}

// nested encodes body as field num of a message; appended to a message's
// bytes it merges into that field.
func nested(num protowire.Number, body []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body)
}

// mapsEqual compares string maps, nil and empty alike.
func mapsEqual(a, b map[string]string) bool { return len(a) == len(b) && maps.Equal(a, b) }

func FuzzSandboxDockerConfig(f *testing.F) {
	f.Add(mustMarshal(f, podConfig("web")))
	host := podConfig("host")
	host.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions:   &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE},
		RunAsUser:          &runtimeapi.Int64Value{Value: 1000},
		RunAsGroup:         &runtimeapi.Int64Value{Value: 3000},
		SupplementalGroups: []int64{4, 5},
		Seccomp:            &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined},
	}
	host.Linux.Sysctls = map[string]string{"kernel.shm_rmid_forced": "1"}
	f.Add(mustMarshal(f, host))
	odd := podConfig("odd")
	odd.Labels = map[string]string{"": "", "label.x": "annotation.y", "netshim.io/type": "container", "a\nb": "ü"}
	odd.Annotations = map[string]string{"label.k": "v", "io.kubernetes.container.restartCount": "99"}
	odd.Linux.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "0", "net/ipv4/conf/eth0.1/forwarding": "1"}
	f.Add(mustMarshal(f, odd))
	f.Add([]byte{})
	// Fields this CRI version does not know (here field 6 of the namespace
	// options) are dropped: nothing is built from them.
	f.Add(append(mustMarshal(f, podConfig("unknown")), nested(8, nested(2, nested(1, protowire.AppendVarint(protowire.AppendTag(nil, 6, protowire.VarintType), 48))))...))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := &runtimeapi.PodSandboxConfig{}
		if unmarshalKnown(data, cfg) != nil {
			return
		}
		if err := ValidateRunPodSandbox(&runtimeapi.RunPodSandboxRequest{Config: cfg}); err != nil {
			if codeOf(err) != codes.InvalidArgument {
				t.Fatalf("validation error %v has code %v, want InvalidArgument", err, codeOf(err))
			}
			return
		}
		config, hc, err := SandboxConfig(cfg, SandboxInput{Image: testPauseImage, CgroupParent: cfg.GetLinux().GetCgroupParent(), OOMScoreAdj: -998})
		if err != nil {
			if codeOf(err) != codes.InvalidArgument {
				t.Fatalf("mapping error %v has code %v, want InvalidArgument", err, codeOf(err))
			}
			return
		}
		// A sandbox mounts nothing from the host.
		if len(hc.Binds) != 0 || len(hc.Mounts) != 0 || len(config.Volumes) != 0 || len(hc.VolumesFrom) != 0 || len(hc.Devices) != 0 {
			t.Fatalf("sandbox got host paths: binds %v mounts %v volumes %v devices %v", hc.Binds, hc.Mounts, config.Volumes, hc.Devices)
		}
		if config.Image != testPauseImage || hc.CgroupParent != cfg.GetLinux().GetCgroupParent() {
			t.Fatalf("image %q cgroup parent %q", config.Image, hc.CgroupParent)
		}
		if hc.NetworkMode != "none" && hc.NetworkMode != "host" {
			t.Fatalf("network mode %q", hc.NetworkMode)
		}
		if config.Hostname != "" && config.Hostname != cfg.GetHostname() {
			t.Fatalf("hostname %q, asked %q", config.Hostname, cfg.GetHostname())
		}
		info, err := labelcodec.DecodeSandbox(config.Labels)
		if err != nil {
			t.Fatal("labels do not decode as a sandbox's")
		}
		if !mapsEqual(info.Labels, cfg.GetLabels()) || !mapsEqual(info.Annotations, cfg.GetAnnotations()) {
			t.Fatalf("labels/annotations decode to %v / %v, want %v / %v", info.Labels, info.Annotations, cfg.GetLabels(), cfg.GetAnnotations())
		}
		md := cfg.GetMetadata()
		if got := info.Metadata; got.Name != md.Name || got.Namespace != md.Namespace || got.Uid != md.Uid || got.Attempt != md.Attempt {
			t.Fatalf("metadata decodes to %v, want %v", got, md)
		}
		if !proto.Equal(info.NamespaceOptions, nsOrEmpty(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions())) {
			t.Fatalf("namespace options decode to %v, want %v", info.NamespaceOptions, cfg.GetLinux().GetSecurityContext().GetNamespaceOptions())
		}
	})
}

func nsOrEmpty(ns *runtimeapi.NamespaceOption) *runtimeapi.NamespaceOption {
	if ns == nil {
		return &runtimeapi.NamespaceOption{}
	}
	return ns
}

func FuzzContainerDockerConfig(f *testing.F) {
	full := ctrConfig("app")
	full.Mounts = []*runtimeapi.Mount{
		{HostPath: "/var/lib/kubelet/pods/p/volumes/data", ContainerPath: "/data", Readonly: true, SelinuxRelabel: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		{HostPath: "/srv/a:b", ContainerPath: "/colon", Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL},
		{HostPath: "/srv/ro", ContainerPath: "/ro", Readonly: true, RecursiveReadOnly: true},
		{HostPath: "/etc/hosts-of-pod", ContainerPath: "/etc/hosts"},
	}
	full.Devices = []*runtimeapi.Device{{HostPath: "/dev/fuse", ContainerPath: "/dev/fuse", Permissions: "rw"}}
	full.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 64 << 20, OomScoreAdj: 1000, CpusetCpus: "0-1"}
	full.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD},
		Capabilities:     &runtimeapi.Capability{AddCapabilities: []string{"net_admin"}, DropCapabilities: []string{"ALL"}},
		RunAsUser:        &runtimeapi.Int64Value{Value: 1000},
		Apparmor:         &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/p"},
		MaskedPaths:      []string{"/proc/kcore"},
		ReadonlyRootfs:   true,
	}
	f.Add(mustMarshal(f, full), false, false)
	f.Add(mustMarshal(f, ctrConfig("plain")), true, false)
	f.Add([]byte{}, false, false)
	// What kubelet 1.36 sends on cgroup v2 (unified keys), with an image
	// volume, to a Docker 28 engine.
	v2 := ctrConfig("v2")
	v2.Mounts = []*runtimeapi.Mount{{ContainerPath: "/models", Image: &runtimeapi.ImageSpec{Image: imageID}, ImageSubPath: "usr/share"}}
	v2.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, CpuQuota: -1,
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}},
		Unified:        map[string]string{"memory.oom.group": "1", "memory.swap.max": "134217728", "memory.low": "67108864", "cpu.max": "max 100000", "pids.max": "100"}}
	f.Add(mustMarshal(f, v2), false, true)
	f.Fuzz(func(t *testing.T, data []byte, hostNet, docker28 bool) {
		cfg := &runtimeapi.ContainerConfig{}
		if unmarshalKnown(data, cfg) != nil {
			return
		}
		const sandboxID = "0123456789abcdef"
		r := &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, Config: cfg}
		if err := ValidateCreateContainer(r); err != nil {
			if codeOf(err) != codes.InvalidArgument {
				t.Fatalf("validation error %v has code %v, want InvalidArgument", err, codeOf(err))
			}
			return
		}
		pod := &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid", Attempt: 1}
		labels, err := labelcodec.ContainerLabels(labelcodec.ContainerInput{SandboxID: sandboxID, Pod: pod, Config: cfg, LogPath: "/logs/c.log", ImageRef: testImageDigest, StopSignal: "SIGTERM"})
		if err != nil {
			t.Fatalf("labels: %v", err)
		}
		sandboxNS := &runtimeapi.NamespaceOption{}
		if hostNet {
			sandboxNS.Network = runtimeapi.NamespaceMode_NODE
		}
		apiVersion := "1.44"
		if docker28 {
			apiVersion = "1.48"
		}
		in := ContainerInput{
			Config: cfg, Labels: labels, SandboxID: sandboxID, SandboxNS: sandboxNS,
			CgroupParent: "/kubepods/pod1", PidTarget: "fedcba9876543210", APIVersion: apiVersion,
			ResolvConfPath: "/var/lib/docker/containers/" + sandboxID + "/resolv.conf",
			HostsPath:      "/var/lib/docker/containers/" + sandboxID + "/hosts",
		}
		config, hc, err := ContainerConfig(in)
		if err != nil {
			if codeOf(err) != codes.InvalidArgument {
				t.Fatalf("mapping error %v has code %v, want InvalidArgument", err, codeOf(err))
			}
			return
		}
		checkContainerHostPaths(t, cfg, in, config, hc)
		// Docker and runc take the resources (on cgroup v1 and v2).
		for _, v2 := range []bool{false, true} {
			if err := (&engineModel{v2: v2}).create(hc.Resources); err != nil {
				t.Fatalf("resources %+v from %v: the engine would refuse them: %v", hc.Resources, cfg.GetLinux().GetResources(), err)
			}
		}
		if hc.CgroupParent != in.CgroupParent {
			t.Fatalf("cgroup parent %q", hc.CgroupParent)
		}
		if hc.NetworkMode != "host" && hc.NetworkMode != container.NetworkMode("container:"+sandboxID) {
			t.Fatalf("network mode %q", hc.NetworkMode)
		}
		info, err := labelcodec.DecodeContainer(config.Labels)
		if err != nil {
			t.Fatal("labels do not decode as a container's")
		}
		if !mapsEqual(info.Labels, cfg.GetLabels()) || !mapsEqual(info.Annotations, cfg.GetAnnotations()) {
			t.Fatalf("labels/annotations decode to %v / %v, want %v / %v", info.Labels, info.Annotations, cfg.GetLabels(), cfg.GetAnnotations())
		}
		if info.Metadata.GetName() != cfg.GetMetadata().GetName() || info.Metadata.GetAttempt() != cfg.GetMetadata().GetAttempt() {
			t.Fatalf("metadata decodes to %v, want %v", info.Metadata, cfg.GetMetadata())
		}
		if info.LogPath != "/logs/c.log" || info.TTY != cfg.GetTty() {
			t.Fatalf("log path %q tty %v", info.LogPath, info.TTY)
		}
	})
}

// checkContainerHostPaths fails unless every host path the Docker config
// uses is one the request gave (or the sandbox's resolv.conf and hosts),
// absolute and without '..', mounted where the request said.
func checkContainerHostPaths(t *testing.T, cfg *runtimeapi.ContainerConfig, in ContainerInput, config *container.Config, hc *container.HostConfig) {
	t.Helper()
	type pair struct{ src, dst string }
	allowed := map[pair]bool{{in.ResolvConfPath, etcResolvConf}: true, {in.HostsPath, etcHosts}: true}
	images := map[pair]bool{}
	for _, m := range cfg.GetMounts() {
		if IsImageMount(m) {
			images[pair{m.GetImage().GetImage(), filepath.Clean(m.GetContainerPath())}] = true
			continue
		}
		allowed[pair{m.GetHostPath(), filepath.Clean(m.GetContainerPath())}] = true
	}
	check := func(src, dst string) {
		t.Helper()
		if !filepath.IsAbs(src) || HasDotDot(src) {
			t.Fatalf("host path %q is relative or climbs", src)
		}
		if !allowed[pair{src, dst}] {
			t.Fatalf("host path %q mounted at %q: the request did not ask for that (mounts %v)", src, dst, cfg.GetMounts())
		}
	}
	for _, b := range hc.Binds {
		parts := strings.Split(b, ":")
		if len(parts) < 2 || len(parts) > 3 {
			t.Fatalf("bind %q is not src:dst[:opts]", b)
		}
		check(parts[0], parts[1])
	}
	for _, m := range hc.Mounts {
		switch {
		case m.Type == mount.TypeImage:
			// An image volume mounts an image the request named, read-only,
			// and nothing above it.
			if !images[pair{m.Source, m.Target}] || !m.ReadOnly || m.BindOptions != nil || (m.ImageOptions != nil && !filepath.IsLocal(m.ImageOptions.Subpath)) {
				t.Fatalf("image mount %+v: the request did not ask for that (mounts %v)", m, cfg.GetMounts())
			}
		case m.Type != mount.TypeBind:
			t.Fatalf("mount of type %q", m.Type)
		default:
			check(m.Source, m.Target)
		}
	}
	devices := map[string]bool{}
	for _, d := range cfg.GetDevices() {
		devices[d.GetHostPath()] = true
	}
	for _, d := range hc.Devices {
		if !devices[d.PathOnHost] || !filepath.IsAbs(d.PathOnHost) || HasDotDot(d.PathOnHost) {
			t.Fatalf("device %q was not in the request, or is relative or climbs", d.PathOnHost)
		}
	}
	if len(config.Volumes) != 0 || len(hc.VolumesFrom) != 0 || len(hc.Tmpfs) != 0 {
		t.Fatalf("volumes %v, volumes-from %v, tmpfs %v", config.Volumes, hc.VolumesFrom, hc.Tmpfs)
	}
	if slices.ContainsFunc(hc.SecurityOpt, func(s string) bool { return strings.Contains(s, "\n") && !strings.HasPrefix(s, "seccomp=") }) {
		t.Fatalf("security opts with a newline: %q", hc.SecurityOpt)
	}
}
