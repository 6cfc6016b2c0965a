package dockerspec

import (
	"math"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestValidateContainerSpec(t *testing.T) {
	res := func(f func(*runtimeapi.LinuxContainerResources)) func(*runtimeapi.ContainerConfig) {
		return func(c *runtimeapi.ContainerConfig) {
			c.Linux.Resources = &runtimeapi.LinuxContainerResources{}
			f(c.Linux.Resources)
		}
	}
	mount := func(host, ctr string) func(*runtimeapi.ContainerConfig) {
		return func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: host, ContainerPath: ctr}}
		}
	}
	sec := func(f func(*runtimeapi.LinuxContainerSecurityContext)) func(*runtimeapi.ContainerConfig) {
		return func(c *runtimeapi.ContainerConfig) { f(c.Linux.SecurityContext) }
	}
	cases := []struct {
		name    string
		mutate  func(*runtimeapi.ContainerConfig)
		wantErr string
	}{
		{"valid", func(*runtimeapi.ContainerConfig) {}, ""},
		{"valid resources", res(func(r *runtimeapi.LinuxContainerResources) {
			r.CpuShares, r.CpuPeriod, r.CpuQuota, r.MemoryLimitInBytes, r.MemorySwapLimitInBytes, r.OomScoreAdj, r.CpusetCpus = 1024, 100000, 50000, 64<<20, 128<<20, -997, "0-1,3"
		}), ""},
		{"unlimited quota and swap", res(func(r *runtimeapi.LinuxContainerResources) { r.CpuQuota, r.MemorySwapLimitInBytes = -1, -1 }), ""},
		{"name with space", func(c *runtimeapi.ContainerConfig) { c.Metadata.Name = "a b" }, "container metadata: name"},
		{"bad image ref", func(c *runtimeapi.ContainerConfig) { c.Image.Image = "UPPER/Case:tag" }, "invalid image reference"},
		{"bad image id", func(c *runtimeapi.ContainerConfig) { c.Image.Image = "sha256:xyz" }, "invalid image ID"},
		{"huge labels", func(c *runtimeapi.ContainerConfig) { c.Labels["big"] = strings.Repeat("x", MaxLabelBytes) }, "labels and annotations"},
		{"env name with =", func(c *runtimeapi.ContainerConfig) {
			c.Envs = append(c.Envs, &runtimeapi.KeyValue{Key: "A=B", Value: []byte("c")})
		}, "environment variable name"},
		{"env value NUL", func(c *runtimeapi.ContainerConfig) {
			c.Envs = append(c.Envs, &runtimeapi.KeyValue{Key: "A", Value: []byte("c\x00")})
		}, "NUL"},
		{"netshim's namespace marker", func(c *runtimeapi.ContainerConfig) {
			c.Envs = append(c.Envs, &runtimeapi.KeyValue{Key: "NETSHIM_OCI_NAMESPACES", Value: []byte("net=/run/netns/other")})
		}, "reserved for netshim"},
		{"arg NUL", func(c *runtimeapi.ContainerConfig) { c.Args = []string{"a\x00b"} }, "command argument"},
		{"relative workdir", func(c *runtimeapi.ContainerConfig) { c.WorkingDir = "work" }, "working directory"},
		{"relative host path", mount("data", "/data"), "must be absolute"},
		{"traversing host path", mount("/var/lib/kubelet/pods/../../../etc", "/data"), "'..'"},
		{"empty host path", mount("", "/data"), "is required"},
		{"relative container path", mount("/data", "data"), "container path"},
		{"nil mount", func(c *runtimeapi.ContainerConfig) { c.Mounts = []*runtimeapi.Mount{nil} }, "mount 0 is empty"},
		{"relative device", func(c *runtimeapi.ContainerConfig) {
			c.Devices = []*runtimeapi.Device{{HostPath: "dev/fuse", ContainerPath: "/dev/fuse"}}
		}, "must be absolute"},
		{"device perms", func(c *runtimeapi.ContainerConfig) {
			c.Devices = []*runtimeapi.Device{{HostPath: "/dev/fuse", ContainerPath: "/dev/fuse", Permissions: "rwx"}}
		}, "permissions"},
		{"negative shares", res(func(r *runtimeapi.LinuxContainerResources) { r.CpuShares = -2 }), "cpu_shares -2"},
		{"absurd shares", res(func(r *runtimeapi.LinuxContainerResources) { r.CpuShares = 1 << 40 }), "cpu_shares"},
		{"period too small", res(func(r *runtimeapi.LinuxContainerResources) { r.CpuPeriod = 10 }), "cpu_period 10"},
		{"negative period", res(func(r *runtimeapi.LinuxContainerResources) { r.CpuPeriod = -100000 }), "cpu_period"},
		{"negative quota", res(func(r *runtimeapi.LinuxContainerResources) { r.CpuQuota = -5 }), "cpu_quota -5"},
		{"tiny quota", res(func(r *runtimeapi.LinuxContainerResources) { r.CpuQuota = 10 }), "cpu_quota 10"},
		{"negative memory", res(func(r *runtimeapi.LinuxContainerResources) { r.MemoryLimitInBytes = -2 }), "memory_limit_in_bytes -2"},
		{"no memory limit", res(func(r *runtimeapi.LinuxContainerResources) { r.MemoryLimitInBytes = -1 }), ""},
		{"unified garbage", res(func(r *runtimeapi.LinuxContainerResources) { r.Unified = map[string]string{"memory.swap.max": "lots"} }), "memory.swap.max"},
		{"unified contradicts field", res(func(r *runtimeapi.LinuxContainerResources) {
			r.MemoryLimitInBytes, r.Unified = 64<<20, map[string]string{"memory.max": "max"}
		}), "contradicts memory_limit_in_bytes"},
		{"swap said twice", res(func(r *runtimeapi.LinuxContainerResources) {
			r.MemoryLimitInBytes, r.MemorySwapLimitInBytes, r.Unified = 64<<20, 64<<20, map[string]string{"memory.swap.max": "0"}
		}), "both limit swap"},
		{"cpu.max tiny quota", res(func(r *runtimeapi.LinuxContainerResources) { r.Unified = map[string]string{"cpu.max": "10 100000"} }), "cpu.max"},
		{"unknown unified key", res(func(r *runtimeapi.LinuxContainerResources) { r.Unified = map[string]string{"io.weight": "default 100"} }), ""},
		{"unknown groups policy", sec(func(s *runtimeapi.LinuxContainerSecurityContext) { s.SupplementalGroupsPolicy = 9 }), "supplemental groups policy 9"},
		{"image volume with host path", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/data", ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: imageID}}}
		}, "both a host path and an image"},
		{"image volume sub path climbs", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: imageID}, ImageSubPath: "../etc"}}
		}, "image_sub_path"},
		{"image volume bad image", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: "sha256:XYZ"}}}
		}, "image volume"},
		{"image volume ok", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: imageID}, ImageSubPath: "usr/share"}}
		}, ""},
		{"sub path on a host path mount is ignored", func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/data/sub", ContainerPath: "/data", ImageSubPath: "sub"}}
		}, ""},
		{"negative swap", res(func(r *runtimeapi.LinuxContainerResources) { r.MemorySwapLimitInBytes = -2 }), "memory_swap_limit_in_bytes -2"},
		{"swap below memory", res(func(r *runtimeapi.LinuxContainerResources) {
			r.MemoryLimitInBytes, r.MemorySwapLimitInBytes = 2<<20, 1<<20
		}), "below memory_limit"},
		{"oom score", res(func(r *runtimeapi.LinuxContainerResources) { r.OomScoreAdj = 1001 }), "oom_score_adj 1001"},
		{"cpuset", res(func(r *runtimeapi.LinuxContainerResources) { r.CpusetCpus = "3-1" }), "cpuset_cpus"},
		{"cpuset garbage", res(func(r *runtimeapi.LinuxContainerResources) { r.CpusetMems = "all" }), "cpuset_mems"},
		{"negative uid", sec(func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUser = &runtimeapi.Int64Value{Value: -1} }), "run_as_user -1"},
		{"seccomp traversal", sec(func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/seccomp/../../etc/shadow"}
		}), "seccomp profile"},
		{"apparmor traversal", sec(func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/../../x"}
		}), "apparmor profile"},
		{"apparmor newline", sec(func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "p\nchangeprofile x"}
		}), "apparmor profile"},
		{"apparmor empty", sec(func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost}
		}), "apparmor profile"},
		{"apparmor named ok", sec(func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/k8s-apparmor-example"}
		}), ""},
		{"unknown ipc mode", sec(func(s *runtimeapi.LinuxContainerSecurityContext) { s.NamespaceOptions.Ipc = 77 }), "ipc namespace mode 77"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ctrConfig("c")
			tc.mutate(cfg)
			requireInvalidArgument(t, ValidateContainerSpec(cfg), tc.wantErr)
		})
	}
}

// ValidateResourceRanges is what every LinuxContainerResources gets,
// containers' and pods' alike: a value no cgroup can hold is refused, and
// what kubelet sends is not.
func TestValidateResourceRanges(t *testing.T) {
	type res = runtimeapi.LinuxContainerResources
	for _, tc := range []struct {
		name    string
		res     *res
		wantErr string // a part of the message; "" means accepted
	}{
		{"nil", nil, ""},
		{"unset", &res{}, ""},
		{"kubelet burstable", &res{CpuShares: 102, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20, OomScoreAdj: 968,
			HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB"}, {PageSize: "1GB"}}}, ""},
		{"kubelet best effort", &res{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000}, ""},
		{"exclusive cpus: no quota", &res{CpuShares: 2048, CpuPeriod: 100000, CpuQuota: -1}, ""},
		{"lift memory and swap", &res{MemoryLimitInBytes: -1, MemorySwapLimitInBytes: -1}, ""},
		{"pod memory below docker's minimum", &res{MemoryLimitInBytes: 1 << 20}, ""},
		{"most negative oom score", &res{OomScoreAdj: -1000}, ""},
		{"largest quota", &res{CpuQuota: maxCPUQuota}, ""},
		{"hugepage limit", &res{HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}}}, ""},
		{"negative cpu shares", &res{CpuShares: -1}, "cpu_shares -1 is negative"},
		{"huge cpu shares", &res{CpuShares: maxCPUShares + 1}, "cpu_shares"},
		{"negative cpu period", &res{CpuPeriod: -100000}, "cpu_period -100000"},
		{"tiny cpu period", &res{CpuPeriod: 999}, "cpu_period 999"},
		{"huge cpu period", &res{CpuPeriod: maxCPUPeriod + 1}, "cpu_period"},
		{"cpu quota -2", &res{CpuQuota: -2}, "cpu_quota -2"},
		{"tiny cpu quota", &res{CpuQuota: 999}, "cpu_quota 999"},
		{"cpu quota above the kernel's", &res{CpuQuota: maxCPUQuota + 1}, "kernel's maximum"},
		{"memory -2", &res{MemoryLimitInBytes: -2}, "memory_limit_in_bytes -2"},
		{"most negative memory", &res{MemoryLimitInBytes: math.MinInt64}, "memory_limit_in_bytes"},
		{"swap -2", &res{MemorySwapLimitInBytes: -2}, "memory_swap_limit_in_bytes -2"},
		{"swap below memory", &res{MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: 32 << 20}, "below memory_limit_in_bytes"},
		{"oom score -1001", &res{OomScoreAdj: -1001}, "oom_score_adj -1001"},
		{"oom score 1001", &res{OomScoreAdj: 1001}, "oom_score_adj 1001"},
		{"bad cpuset", &res{CpusetMems: "1-0"}, "cpuset_mems"},
		{"hugepage limit without page size", &res{HugepageLimits: []*runtimeapi.HugepageLimit{{Limit: 2 << 20}}}, "hugepage_limits[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateResourceRanges("pod sandbox resources", tc.res)
			requireInvalidArgument(t, err, tc.wantErr)
			if err != nil && !strings.HasPrefix(err.Error(), "pod sandbox resources: ") {
				t.Errorf("%v does not say whose resources", err)
			}
		})
	}
}
