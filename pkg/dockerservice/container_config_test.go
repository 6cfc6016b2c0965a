package dockerservice

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/network"
)

const (
	testImage       = "docker.io/library/busybox:1.36"
	testImageDigest = "docker.io/library/busybox@sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
	testImageID     = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// podEnv is a test env with one running sandbox and the test image.
type podEnv struct {
	*testEnv
	sandboxID string
	sandbox   *runtimeapi.PodSandboxConfig
}

func newPodEnv(t *testing.T, mutate ...func(*Config)) *podEnv {
	t.Helper()
	e := newTestEnv(t, mutate...)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	cfg := podConfig("web")
	cfg.LogDirectory = filepath.Join(t.TempDir(), "pods", "web")
	return &podEnv{testEnv: e, sandboxID: e.run(t, cfg), sandbox: cfg}
}

// ctrConfig is a container config with something in every field the
// mapping reads by default.
func ctrConfig(name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: name, Attempt: 2},
		Image:       &runtimeapi.ImageSpec{Image: testImage, UserSpecifiedImage: "busybox:1.36"},
		Command:     []string{"sh", "-c"},
		Args:        []string{"echo hi"},
		WorkingDir:  "/work",
		Envs:        []*runtimeapi.KeyValue{{Key: "A", Value: []byte("1")}, {Key: "B", Value: []byte("x=y")}},
		Labels:      map[string]string{"io.kubernetes.container.name": name, "app": "web"},
		Annotations: map[string]string{"io.kubernetes.container.hash": "abc", "note": "a=b"},
		LogPath:     name + "/2.log",
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			},
		},
	}
}

func (e *podEnv) createErr(cfg *runtimeapi.ContainerConfig) (string, error) {
	resp, err := e.ds.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: e.sandboxID, Config: cfg, SandboxConfig: e.sandbox})
	if err != nil {
		return "", err
	}
	return resp.ContainerId, nil
}

func (e *podEnv) create(t *testing.T, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	id, err := e.createErr(cfg)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	return id
}

func (e *podEnv) start(t *testing.T, id string) {
	t.Helper()
	if _, err := e.ds.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
}

func (e *podEnv) status(t *testing.T, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	resp, err := e.ds.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	return resp.Status
}

func (e *podEnv) dockerInspect(t *testing.T, id string) container.InspectResponse {
	t.Helper()
	c, err := e.docker.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createInspect creates a container from cfg and returns what Docker got.
func (e *podEnv) createInspect(t *testing.T, cfg *runtimeapi.ContainerConfig) (*container.Config, *container.HostConfig) {
	t.Helper()
	c := e.dockerInspect(t, e.create(t, cfg))
	return c.Config, c.HostConfig
}

func sc(cfg *runtimeapi.ContainerConfig) *runtimeapi.LinuxContainerSecurityContext {
	return cfg.Linux.SecurityContext
}

func TestCreateContainerMapsBasicConfig(t *testing.T) {
	e := newPodEnv(t)
	cfg := ctrConfig("app")
	cfg.Tty, cfg.Stdin, cfg.StdinOnce = true, true, true
	cfg.StopSignal = runtimeapi.Signal_SIGNAL_SIGQUIT
	cfg.Devices = []*runtimeapi.Device{{HostPath: "/dev/fuse", ContainerPath: "/dev/fuse"}, {HostPath: "/dev/null", ContainerPath: "/dev/n2", Permissions: "r"}}
	id := e.create(t, cfg)
	c := e.dockerInspect(t, id)
	config, hc := c.Config, c.HostConfig

	if want := "/k8s_app_web_ns_uid-web_2"; c.Name != want {
		t.Errorf("name = %q, want %q", c.Name, want)
	}
	if strings.Join(config.Entrypoint, " ") != "sh -c" || strings.Join(config.Cmd, " ") != "echo hi" || config.WorkingDir != "/work" {
		t.Errorf("entrypoint/cmd/workdir = %q %q %q", config.Entrypoint, config.Cmd, config.WorkingDir)
	}
	if !slices.Equal(config.Env, []string{"A=1", "B=x=y"}) {
		t.Errorf("env = %q", config.Env)
	}
	if !config.Tty || !config.OpenStdin || !config.StdinOnce || config.AttachStdin {
		t.Errorf("tty/stdin/once/attach = %v/%v/%v/%v", config.Tty, config.OpenStdin, config.StdinOnce, config.AttachStdin)
	}
	if config.StopSignal != "SIGQUIT" {
		t.Errorf("stop signal = %q", config.StopSignal)
	}
	if config.Image != testImage {
		t.Errorf("image = %q", config.Image)
	}
	if hc.RestartPolicy.Name != "" && hc.RestartPolicy.Name != container.RestartPolicyDisabled {
		t.Errorf("restart policy = %q, want no", hc.RestartPolicy.Name)
	}
	if hc.LogConfig.Type != "json-file" {
		t.Errorf("log driver = %q, want json-file (the CRI log follower reads it)", hc.LogConfig.Type)
	}
	if hc.CgroupParent != "/kubepods/pod1" {
		t.Errorf("cgroup parent = %q, want the sandbox's", hc.CgroupParent)
	}
	wantDev := []container.DeviceMapping{{PathOnHost: "/dev/fuse", PathInContainer: "/dev/fuse", CgroupPermissions: "rwm"}, {PathOnHost: "/dev/null", PathInContainer: "/dev/n2", CgroupPermissions: "r"}}
	if !slices.Equal(hc.Devices, wantDev) {
		t.Errorf("devices = %+v", hc.Devices)
	}
	if config.Labels[labelcodec.LabelType] != labelcodec.TypeContainer || config.Labels[labelcodec.LabelSandboxID] != e.sandboxID {
		t.Errorf("netshim labels = %v", config.Labels)
	}
	st := e.status(t, id)
	if st.LogPath != filepath.Join(e.sandbox.LogDirectory, "app/2.log") {
		t.Errorf("log path = %q", st.LogPath)
	}
	if st.StopSignal != runtimeapi.Signal_SIGNAL_SIGQUIT {
		t.Errorf("status stop signal = %v", st.StopSignal)
	}
}

func TestCreateContainerNamespaces(t *testing.T) {
	e := newPodEnv(t)
	target := e.create(t, ctrConfig("target"))
	sb := "container:" + e.sandboxID
	cases := []struct {
		name               string
		ns                 *runtimeapi.NamespaceOption
		net, ipc, pid, uts string
	}{
		{"defaults are the pod's", nil, sb, sb, sb, ""},
		{"pod pid", &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}, sb, sb, sb, ""},
		{"own pid", &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}, sb, sb, "", ""},
		{"node", &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE}, "host", "host", "host", "host"},
		{"target pid", &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: target[:12]}, sb, sb, "container:" + target, ""},
		{"user namespace node", &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER, UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}}, sb, sb, "", ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := ctrConfig("c")
			cfg.Metadata.Attempt = uint32(i + 10)
			sc(cfg).NamespaceOptions = c.ns
			_, hc := e.createInspect(t, cfg)
			if string(hc.NetworkMode) != c.net || string(hc.IpcMode) != c.ipc || string(hc.PidMode) != c.pid || string(hc.UTSMode) != c.uts {
				t.Errorf("net/ipc/pid/uts = %q/%q/%q/%q, want %q/%q/%q/%q", hc.NetworkMode, hc.IpcMode, hc.PidMode, hc.UTSMode, c.net, c.ipc, c.pid, c.uts)
			}
		})
	}

	t.Run("unknown target", func(t *testing.T) {
		cfg := ctrConfig("c")
		sc(cfg).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: "nope"}
		if _, err := e.createErr(cfg); codeOf(err) != codes.NotFound {
			t.Errorf("got %v, want NotFound", err)
		}
	})
	t.Run("pod user namespace refused", func(t *testing.T) {
		cfg := ctrConfig("c")
		sc(cfg).NamespaceOptions = &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}}
		if _, err := e.createErr(cfg); codeOf(err) != codes.InvalidArgument {
			t.Errorf("got %v, want InvalidArgument", err)
		}
	})
}

func TestCreateContainerInHostNetworkPodUsesHost(t *testing.T) {
	e := newTestEnv(t)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage)
	cfg := podConfig("hostnet")
	cfg.PortMappings = nil
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE}}
	pe := &podEnv{testEnv: e, sandboxID: e.run(t, cfg), sandbox: cfg}
	// Even a container that does not say so itself is on the node's
	// network and IPC when its pod is.
	_, hc := pe.createInspect(t, ctrConfig("c"))
	if hc.NetworkMode != "host" || hc.IpcMode != "host" || hc.UTSMode != "host" {
		t.Errorf("net/ipc/uts = %q/%q/%q, want host", hc.NetworkMode, hc.IpcMode, hc.UTSMode)
	}
}

func TestCreateContainerMounts(t *testing.T) {
	e := newPodEnv(t)
	// The fake gives containers no resolv.conf/hosts paths; a real Docker
	// does. Give the sandbox some, as Docker's inspect would have.
	e.docker.Do(func(s *fakedocker.State) {
		sbc := s.Containers[e.sandboxID]
		sbc.ResolvConfPath = "/var/lib/docker/containers/" + e.sandboxID + "/resolv.conf"
		sbc.HostsPath = "/var/lib/docker/containers/" + e.sandboxID + "/hosts"
	})

	cfg := ctrConfig("m")
	cfg.Mounts = []*runtimeapi.Mount{
		{HostPath: "/data", ContainerPath: "/data"},
		{HostPath: "/ro", ContainerPath: "/ro/", Readonly: true},
		{HostPath: "/slave", ContainerPath: "/slave", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		{HostPath: "/shared", ContainerPath: "/shared", Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL, Readonly: true, SelinuxRelabel: true},
		{HostPath: "/odd:name", ContainerPath: "/odd", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		{HostPath: "/var/lib/kubelet/pods/uid/etc-hosts", ContainerPath: "/etc/hosts"},
	}
	id := e.create(t, cfg)
	hc := e.dockerInspect(t, id).HostConfig
	want := []string{
		"/data:/data",
		"/ro:/ro:ro",
		"/slave:/slave:rslave",
		"/shared:/shared:ro,Z,rshared",
		"/var/lib/kubelet/pods/uid/etc-hosts:/etc/hosts",
		// The sandbox's resolv.conf; its hosts file is not bound over the
		// one kubelet mounts.
		"/var/lib/docker/containers/" + e.sandboxID + "/resolv.conf:/etc/resolv.conf",
	}
	if !slices.Equal(hc.Binds, want) {
		t.Errorf("binds =\n%s\nwant\n%s", strings.Join(hc.Binds, "\n"), strings.Join(want, "\n"))
	}
	wantMount := mount.Mount{Type: mount.TypeBind, Source: "/odd:name", Target: "/odd", ReadOnly: true, BindOptions: &mount.BindOptions{Propagation: mount.PropagationRSlave}}
	if len(hc.Mounts) != 1 || hc.Mounts[0].Source != wantMount.Source || hc.Mounts[0].Target != wantMount.Target || !hc.Mounts[0].ReadOnly || hc.Mounts[0].BindOptions.Propagation != mount.PropagationRSlave {
		t.Errorf("mounts = %+v, want %+v", hc.Mounts, wantMount)
	}
	// The status gives the mounts back as requested.
	st := e.status(t, id)
	if len(st.Mounts) != len(cfg.Mounts) {
		t.Fatalf("status mounts = %v", st.Mounts)
	}
	for i, m := range st.Mounts {
		if m.HostPath != cfg.Mounts[i].HostPath || m.ContainerPath != cfg.Mounts[i].ContainerPath || m.Readonly != cfg.Mounts[i].Readonly ||
			m.Propagation != cfg.Mounts[i].Propagation || m.SelinuxRelabel != cfg.Mounts[i].SelinuxRelabel {
			t.Errorf("status mount %d = %v, want %v", i, m, cfg.Mounts[i])
		}
	}

	t.Run("read-only rootfs binds the sandbox files read-only", func(t *testing.T) {
		cfg := ctrConfig("rorootfs")
		sc(cfg).ReadonlyRootfs = true
		_, hc := e.createInspect(t, cfg)
		want := []string{
			"/var/lib/docker/containers/" + e.sandboxID + "/resolv.conf:/etc/resolv.conf:ro",
			"/var/lib/docker/containers/" + e.sandboxID + "/hosts:/etc/hosts:ro",
		}
		if !hc.ReadonlyRootfs || !slices.Equal(hc.Binds, want) {
			t.Errorf("readonly=%v binds=%q", hc.ReadonlyRootfs, hc.Binds)
		}
	})
}

func TestCreateContainerRecursiveReadOnly(t *testing.T) {
	rro := func() *runtimeapi.ContainerConfig {
		cfg := ctrConfig("rro")
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: "/src", ContainerPath: "/dst", Readonly: true, RecursiveReadOnly: true}}
		return cfg
	}
	t.Run("refused with API 1.41", func(t *testing.T) {
		e := newPodEnv(t)
		_, err := e.createErr(rro())
		if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "1.44") {
			t.Errorf("got %v, want InvalidArgument naming API 1.44", err)
		}
	})
	t.Run("forced recursive with API 1.44", func(t *testing.T) {
		e := newPodEnv(t)
		e.useEngineAPI("1.44")
		_, hc := e.createInspect(t, rro())
		if len(hc.Mounts) != 1 || !hc.Mounts[0].ReadOnly || hc.Mounts[0].BindOptions == nil || !hc.Mounts[0].BindOptions.ReadOnlyForceRecursive {
			t.Errorf("mounts = %+v", hc.Mounts)
		}
	})
	t.Run("needs readonly", func(t *testing.T) {
		e := newPodEnv(t)
		cfg := rro()
		cfg.Mounts[0].Readonly = false
		if _, err := e.createErr(cfg); codeOf(err) != codes.InvalidArgument {
			t.Errorf("got %v, want InvalidArgument", err)
		}
	})
}

func TestCreateContainerResources(t *testing.T) {
	e := newPodEnv(t, func(c *Config) { floor := -500; c.OOMScoreAdjFloor = &floor })
	cfg := ctrConfig("res")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512,
		MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: 96 << 20,
		OomScoreAdj: -997, CpusetCpus: "0-1", CpusetMems: "0",
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}},
	}
	id := e.create(t, cfg)
	hc := e.dockerInspect(t, id).HostConfig
	r := hc.Resources
	if r.CPUPeriod != 100000 || r.CPUQuota != 50000 || r.CPUShares != 512 || r.Memory != 64<<20 || r.MemorySwap != 96<<20 || r.CpusetCpus != "0-1" || r.CpusetMems != "0" {
		t.Errorf("resources = %+v", r)
	}
	if hc.OomScoreAdj != -500 {
		t.Errorf("oom_score_adj = %d, want clamped to the floor -500", hc.OomScoreAdj)
	}
	st := e.status(t, id)
	got := st.GetResources().GetLinux()
	if got.GetCpuQuota() != 50000 || got.GetMemoryLimitInBytes() != 64<<20 || got.GetMemorySwapLimitInBytes() != 96<<20 || got.GetOomScoreAdj() != -500 {
		t.Errorf("status resources = %v", got)
	}

	t.Run("memory without swap limit", func(t *testing.T) {
		cfg := ctrConfig("noswap")
		cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20, OomScoreAdj: 1000}
		_, hc := e.createInspect(t, cfg)
		if hc.Memory != 32<<20 || hc.MemorySwap != -1 || hc.OomScoreAdj != 1000 {
			t.Errorf("memory/swap/oom = %d/%d/%d, want 32Mi/-1 (no limit of its own)/1000", hc.Memory, hc.MemorySwap, hc.OomScoreAdj)
		}
	})
}

func TestCreateContainerSecurityContext(t *testing.T) {
	e := newPodEnv(t)
	profile := filepath.Join(t.TempDir(), "seccomp.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	n := uint32(100)
	check := func(t *testing.T, mutate func(*runtimeapi.LinuxContainerSecurityContext), verify func(*container.Config, *container.HostConfig)) {
		t.Helper()
		cfg := ctrConfig("sec")
		n++
		cfg.Metadata.Attempt = n
		mutate(sc(cfg))
		config, hc := e.createInspect(t, cfg)
		verify(config, hc)
	}

	t.Run("identity and privileges", func(t *testing.T) {
		check(t, func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Privileged = true
			s.RunAsUser = i64(1000)
			s.RunAsGroup = i64(3000)
			s.SupplementalGroups = []int64{4000, 5000}
			s.ReadonlyRootfs = true
			s.NoNewPrivs = true
		}, func(c *container.Config, hc *container.HostConfig) {
			if c.User != "1000:3000" || !slices.Equal(hc.GroupAdd, []string{"4000", "5000"}) || !hc.Privileged || !hc.ReadonlyRootfs {
				t.Errorf("user=%q groups=%v privileged=%v readonly=%v", c.User, hc.GroupAdd, hc.Privileged, hc.ReadonlyRootfs)
			}
			if !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
				t.Errorf("security opts = %v, want no-new-privileges", hc.SecurityOpt)
			}
		})
	})
	t.Run("username", func(t *testing.T) {
		check(t, func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.RunAsUsername = "www-data"
			s.RunAsGroup = i64(33)
		}, func(c *container.Config, _ *container.HostConfig) {
			if c.User != "www-data:33" {
				t.Errorf("user = %q", c.User)
			}
		})
	})
	t.Run("capabilities with ALL", func(t *testing.T) {
		check(t, func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Capabilities = &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN", "cap_sys_time"}, DropCapabilities: []string{"all"}}
		}, func(_ *container.Config, hc *container.HostConfig) {
			if !slices.Equal(hc.CapAdd, []string{"NET_ADMIN", "CAP_SYS_TIME"}) || !slices.Equal(hc.CapDrop, []string{"ALL"}) {
				t.Errorf("cap add/drop = %v/%v", hc.CapAdd, hc.CapDrop)
			}
		})
	})
	t.Run("seccomp and apparmor", func(t *testing.T) {
		for _, c := range []struct {
			seccomp, apparmor *runtimeapi.SecurityProfile
			want              []string
		}{
			{nil, nil, []string{"seccomp=unconfined"}},
			{&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil},
			{&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, []string{"seccomp=unconfined", "apparmor=unconfined"}},
			{&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: profile}, &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/k8s-deny-write"},
				[]string{`seccomp={"defaultAction":"SCMP_ACT_ALLOW"}`, "apparmor=k8s-deny-write"}},
		} {
			check(t, func(s *runtimeapi.LinuxContainerSecurityContext) { s.Seccomp, s.Apparmor = c.seccomp, c.apparmor }, func(_ *container.Config, hc *container.HostConfig) {
				if !slices.Equal(hc.SecurityOpt, c.want) {
					t.Errorf("seccomp %v apparmor %v: security opts = %q, want %q", c.seccomp, c.apparmor, hc.SecurityOpt, c.want)
				}
			})
		}
	})
	t.Run("privileged is unconfined whatever the profiles", func(t *testing.T) {
		// A Localhost profile that does not exist: a privileged container
		// must not even read it.
		absent := filepath.Join(t.TempDir(), "absent.json")
		for name, c := range map[string]struct{ seccomp, apparmor *runtimeapi.SecurityProfile }{
			"none":             {nil, nil},
			"runtime default":  {&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}},
			"unconfined":       {&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}},
			"localhost":        {&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: profile}, &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "localhost/k8s-deny-write"}},
			"absent localhost": {&runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: absent}, nil},
		} {
			t.Run(name, func(t *testing.T) {
				check(t, func(s *runtimeapi.LinuxContainerSecurityContext) {
					s.Privileged = true
					s.Seccomp, s.Apparmor = c.seccomp, c.apparmor
				}, func(_ *container.Config, hc *container.HostConfig) {
					if want := []string{"seccomp=unconfined", "apparmor=unconfined"}; !hc.Privileged || !slices.Equal(hc.SecurityOpt, want) {
						t.Errorf("privileged=%v security opts = %q, want %q", hc.Privileged, hc.SecurityOpt, want)
					}
				})
			})
		}
	})
	t.Run("selinux", func(t *testing.T) {
		check(t, func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.SelinuxOptions = &runtimeapi.SELinuxOption{Type: "spc_t", Level: "s0:c1,c2"}
		}, func(_ *container.Config, hc *container.HostConfig) {
			if !slices.Equal(hc.SecurityOpt, []string{"seccomp=unconfined", "label=type:spc_t", "label=level:s0:c1,c2"}) {
				t.Errorf("security opts = %q", hc.SecurityOpt)
			}
		})
	})
	t.Run("masked and readonly paths", func(t *testing.T) {
		// nil: Docker's defaults.
		check(t, func(*runtimeapi.LinuxContainerSecurityContext) {}, func(_ *container.Config, hc *container.HostConfig) {
			if hc.MaskedPaths != nil || hc.ReadonlyPaths != nil {
				t.Errorf("masked/readonly = %#v/%#v, want nil (Docker's defaults)", hc.MaskedPaths, hc.ReadonlyPaths)
			}
		})
		// Empty: none at all (procMount Unmasked).
		check(t, func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.MaskedPaths, s.ReadonlyPaths = []string{}, []string{}
		}, func(_ *container.Config, hc *container.HostConfig) {
			if hc.MaskedPaths == nil || len(hc.MaskedPaths) != 0 || hc.ReadonlyPaths == nil || len(hc.ReadonlyPaths) != 0 {
				t.Errorf("masked/readonly = %#v/%#v, want empty and non-nil", hc.MaskedPaths, hc.ReadonlyPaths)
			}
		})
		check(t, func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.MaskedPaths, s.ReadonlyPaths = []string{"/proc/kcore"}, []string{"/proc/sys"}
		}, func(_ *container.Config, hc *container.HostConfig) {
			if !slices.Equal(hc.MaskedPaths, []string{"/proc/kcore"}) || !slices.Equal(hc.ReadonlyPaths, []string{"/proc/sys"}) {
				t.Errorf("masked/readonly = %v/%v", hc.MaskedPaths, hc.ReadonlyPaths)
			}
		})
		// Privileged: none given to Docker, whatever kubelet sends (its
		// defaults, as for every container): Docker 29 applied them and
		// kube-proxy could not write net.ipv4.conf.all.route_localnet.
		check(t, func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Privileged = true
			s.MaskedPaths, s.ReadonlyPaths = []string{"/proc/kcore"}, []string{"/proc/sys"}
		}, func(_ *container.Config, hc *container.HostConfig) {
			if hc.MaskedPaths != nil || hc.ReadonlyPaths != nil {
				t.Errorf("privileged: masked/readonly = %#v/%#v, want nil", hc.MaskedPaths, hc.ReadonlyPaths)
			}
		})
	})
}

func TestCreateContainerRefusesWhatDockerCannotDo(t *testing.T) {
	e := newPodEnv(t)
	cases := map[string]func(*runtimeapi.ContainerConfig){
		"group without user": func(c *runtimeapi.ContainerConfig) { sc(c).RunAsGroup = i64(5) },
		"ambient capabilities": func(c *runtimeapi.ContainerConfig) {
			sc(c).Capabilities = &runtimeapi.Capability{AddAmbientCapabilities: []string{"NET_RAW"}}
		},
		"relative mount": func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/a", ContainerPath: "rel"}}
		},
		"mount without source": func(c *runtimeapi.ContainerConfig) { c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/a"}} },
		"duplicate mount target": func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/a", ContainerPath: "/x"}, {HostPath: "/b", ContainerPath: "/x/"}}
		},
		"image volume": func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/a", Image: &runtimeapi.ImageSpec{Image: "x"}}}
		},
		"localhost seccomp file missing": func(c *runtimeapi.ContainerConfig) {
			sc(c).Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/nonexistent/profile.json"}
		},
		"env without name": func(c *runtimeapi.ContainerConfig) { c.Envs = []*runtimeapi.KeyValue{{Value: []byte("v")}} },
		"CDI device": func(c *runtimeapi.ContainerConfig) {
			c.CDIDevices = []*runtimeapi.CDIDevice{{Name: "vendor.com/gpu=0"}}
		},
		"no metadata": func(c *runtimeapi.ContainerConfig) { c.Metadata = nil },
		"no image":    func(c *runtimeapi.ContainerConfig) { c.Image = nil },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := ctrConfig("bad")
			mutate(cfg)
			e.docker.ResetCalls()
			_, err := e.createErr(cfg)
			if codeOf(err) != codes.InvalidArgument {
				t.Fatalf("got %v (code %v), want InvalidArgument", err, codeOf(err))
			}
			if n := e.docker.Count("ContainerCreate"); n != 0 {
				t.Errorf("%d containers created for an invalid config", n)
			}
		})
	}
}

func TestStopSignalFromImage(t *testing.T) {
	// The fake's images have no STOPSIGNAL: wrap its ImageInspect.
	docker := newFakeDocker()
	docker.Do(func(s *fakedocker.State) { s.Images[testPauseImage] = map[string]string{} })
	docker.AddImage(fakedocker.Image{ID: testImageID}, testImage)
	ckpt, err := checkpoint.NewManager(filepath.Join(t.TempDir(), "sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := NewDockerService(Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake"}, stopSignalImages{docker, "3"}, ckpt, []network.NetworkPlugin{&fakePlugin{}})
	if err != nil {
		t.Fatal(err)
	}
	startService(t, ds)
	e := &podEnv{testEnv: &testEnv{ds: ds, docker: docker}, sandbox: podConfig("sig")}
	e.sandboxID = e.run(t, e.sandbox)

	id := e.create(t, ctrConfig("sig"))
	if st := e.status(t, id); st.StopSignal != runtimeapi.Signal_SIGNAL_SIGQUIT {
		t.Errorf("stop signal = %v, want the image's (3 = SIGQUIT)", st.StopSignal)
	}
	cfg := ctrConfig("sig")
	cfg.Metadata.Attempt = 3
	cfg.StopSignal = runtimeapi.Signal_SIGNAL_SIGUSR1
	id = e.create(t, cfg)
	if st := e.status(t, id); st.StopSignal != runtimeapi.Signal_SIGNAL_SIGUSR1 {
		t.Errorf("stop signal = %v, want the config's SIGUSR1 over the image's", st.StopSignal)
	}
}

type stopSignalImages struct {
	*fakedocker.Engine
	signal string
}

func (s stopSignalImages) ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error) {
	img, err := s.Engine.ImageInspect(ctx, ref, opts...)
	if err == nil && img.Config != nil {
		img.Config.StopSignal = s.signal
	}
	return img, err
}

func i64(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }

// TestCreateContainerMinimalConfig: crictl and critest leave most of the
// config out, the Linux part included.
func TestCreateContainerMinimalConfig(t *testing.T) {
	e := newPodEnv(t)
	cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "min"}, Image: &runtimeapi.ImageSpec{Image: testImage}}
	config, hc := e.createInspect(t, cfg)
	sb := "container:" + e.sandboxID
	if string(hc.NetworkMode) != sb || string(hc.IpcMode) != sb || string(hc.PidMode) != sb {
		t.Errorf("net/ipc/pid = %q/%q/%q, want the sandbox's", hc.NetworkMode, hc.IpcMode, hc.PidMode)
	}
	if config.User != "" || hc.Privileged || hc.MaskedPaths != nil || !slices.Equal(hc.SecurityOpt, []string{"seccomp=unconfined"}) {
		t.Errorf("user %q privileged %v masked %v security %q", config.User, hc.Privileged, hc.MaskedPaths, hc.SecurityOpt)
	}
	if len(config.Entrypoint) != 0 || len(config.Cmd) != 0 {
		t.Errorf("entrypoint/cmd = %q/%q, want the image's", config.Entrypoint, config.Cmd)
	}
}
