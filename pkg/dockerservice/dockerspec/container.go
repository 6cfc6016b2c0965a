package dockerspec

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/strslice"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/podns"
)

// This file maps a CRI ContainerConfig to Docker's Config and HostConfig.
// The rules, and what Docker (API 1.41, Docker 20.10) cannot express, are
// commented where they apply.

const (
	// Docker's own log of a container stays json-file whatever the
	// daemon's default: the CRI log follower reads it back through
	// ContainerLogs, which not every driver supports. It is capped, as
	// kubelet caps the CRI file it rotates: the follower copies it as it
	// is written, so Docker's copy is only needed to resume after a
	// netshim restart.
	dockerLogDriver   = "json-file"
	dockerLogMaxSize  = "10m"
	dockerLogMaxFiles = "3"

	// minReadOnlyNonRecursiveAPI is the first Docker API (Docker 25) that
	// makes a read-only bind recursively read-only by default, and with
	// it BindOptions.ReadOnlyNonRecursive to ask for the old behaviour.
	// Below it, a read-only bind is read-only at the top only and the
	// option does not exist (the engine would ignore it).
	minReadOnlyNonRecursiveAPI = "1.44"

	etcResolvConf = "/etc/resolv.conf"
	etcHosts      = "/etc/hosts"
)

// ContainerInput is what the mapping needs besides the CRI config.
type ContainerInput struct {
	Config *runtimeapi.ContainerConfig
	Labels map[string]string
	// sandboxID is the infra container whose namespaces the container joins.
	SandboxID string
	// sandboxNS are the sandbox's namespace options: a namespace the
	// sandbox shares with the node is the node's for its containers too.
	SandboxNS *runtimeapi.NamespaceOption
	// cgroupParent is the sandbox's cgroup parent: the pod's cgroup.
	CgroupParent string
	// ResolvConfPath and HostsPath are the sandbox's files, which every
	// container of the pod sees (empty when Docker made none).
	ResolvConfPath, HostsPath string
	// pidTarget is the container whose pid namespace a TARGET mode joins.
	PidTarget string
	// apiVersion is the negotiated Docker API version.
	APIVersion string
	// selinux says SELinux is enabled on the host: only then can a mount's
	// relabel request change anything.
	SELinux bool
	// pauseless is the checkpoint of a pause-less sandbox: the container
	// joins its pinned namespaces through the OCI wrapper instead of an
	// infra container's (container_pauseless.go). nil otherwise.
	Pauseless *checkpoint.PodSandbox
	// ociKey signs the marker of a container the OCI wrapper runs (a
	// pause-less sandbox's, one in a pod user namespace, one with Strict
	// groups); KeyDir is its directory, which signs a marker naming no
	// namespace.
	OCIKey *podns.Key
	KeyDir string
	// WrapperRuntime is the engine runtime of the OCI wrapper when the
	// engine has it ("" when not): the runtime of a container whose
	// marker asks something (containerMarker).
	WrapperRuntime string
	// UserNS is the pod's own user namespace; nil for a pod in the node's.
	UserNS *UserNS
	// OOMScoreAdj turns the oom_score_adj the CRI asks for into the one
	// Docker is given (netshim clamps it where its root cannot lower it);
	// nil keeps it as asked.
	OOMScoreAdj func(int) int
}

// ContainerConfig maps a CRI container config to Docker's. Errors
// are InvalidArgument: they name what the request asked that Docker cannot
// do.
func ContainerConfig(in ContainerInput) (*container.Config, *container.HostConfig, error) {
	cfg := in.Config
	linux := cfg.GetLinux()
	sc := linux.GetSecurityContext()

	config := &container.Config{
		Image:      cfg.GetImage().GetImage(),
		Entrypoint: strslice.StrSlice(nonEmpty(cfg.GetCommand())),
		Cmd:        strslice.StrSlice(nonEmpty(cfg.GetArgs())),
		WorkingDir: cfg.GetWorkingDir(),
		Labels:     in.Labels,
		Tty:        cfg.GetTty(),
		OpenStdin:  cfg.GetStdin(),
		StdinOnce:  cfg.GetStdin() && cfg.GetStdinOnce(),
		// Docker sends the stop signal on ContainerStop; API 1.41 has no
		// per-stop signal, so the CRI's is set here. Empty keeps the
		// image's STOPSIGNAL (Docker merges it in), else SIGTERM.
		StopSignal: labelcodec.DockerSignal(cfg.GetStopSignal()),
	}
	for _, kv := range cfg.GetEnvs() {
		if kv.GetKey() == "" {
			return nil, nil, crirpc.InvalidArgf("environment variable with an empty name (value %q)", kv.GetValue())
		}
		config.Env = append(config.Env, kv.GetKey()+"="+string(kv.GetValue()))
	}
	if len(cfg.GetCDIDevices()) > 0 {
		return nil, nil, crirpc.InvalidArgf("CDI devices are not supported: Docker API 1.41 has no CDI device requests")
	}

	hc := &container.HostConfig{
		LogConfig: container.LogConfig{Type: dockerLogDriver, Config: map[string]string{"max-size": dockerLogMaxSize, "max-file": dockerLogMaxFiles}},
		// The restart policy stays "no": kubelet decides what restarts.
	}
	hc.CgroupParent = in.CgroupParent

	var paths podns.Paths
	if in.Pauseless != nil {
		var err error
		if paths, err = setPauselessNamespaces(config, hc, in); err != nil {
			return nil, nil, err
		}
	} else if err := setNamespaces(hc, in); err != nil {
		return nil, nil, err
	}
	marker, err := containerMarker(in, paths)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case in.Pauseless != nil:
		// Always set, even asking nothing: the container runs under the
		// wrapper, and netshim's entry overrides one the image's ENV has.
		config.Env = append(config.Env, marker.Env(in.OCIKey))
	case !marker.Empty():
		config.Env = append(config.Env, marker.Env(in.OCIKey))
		hc.Runtime = in.WrapperRuntime
	}
	binds, mounts, err := containerMounts(cfg.GetMounts(), in.APIVersion, in.SELinux)
	if err != nil {
		return nil, nil, err
	}
	fileBinds, fileMounts := sandboxFileBinds(cfg.GetMounts(), in, sc.GetReadonlyRootfs())
	fileBinds = append(fileBinds, pauselessShmBind(cfg.GetMounts(), in)...)
	hc.Binds, hc.Mounts = append(binds, fileBinds...), append(mounts, fileMounts...)

	for _, d := range cfg.GetDevices() {
		if !filepath.IsAbs(d.GetContainerPath()) || d.GetHostPath() == "" {
			return nil, nil, crirpc.InvalidArgf("device %q -> %q: the host path is required and the container path must be absolute", d.GetHostPath(), d.GetContainerPath())
		}
		perms := d.GetPermissions()
		if perms == "" {
			perms = "rwm"
		}
		hc.Devices = append(hc.Devices, container.DeviceMapping{PathOnHost: d.GetHostPath(), PathInContainer: d.GetContainerPath(), CgroupPermissions: perms})
	}

	if err := setResources(&hc.Resources, &hc.OomScoreAdj, linux.GetResources(), cfg.GetMetadata().GetName(), in.OOMScoreAdj); err != nil {
		return nil, nil, err
	}
	if err := setSecurityContext(config, hc, sc); err != nil {
		return nil, nil, err
	}
	return config, hc, nil
}

func nonEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// setNamespaces puts the container in its pod: the sandbox's network and
// IPC namespaces (or the node's when the pod uses those), and the pid
// namespace the CRI asks for. The hostname comes with the network: Docker
// gives a container in another's network that one's hostname.
func setNamespaces(hc *container.HostConfig, in ContainerInput) error {
	ns := in.Config.GetLinux().GetSecurityContext().GetNamespaceOptions()
	sandboxMode := container.NetworkMode("container:" + in.SandboxID)
	node := func(own, pod runtimeapi.NamespaceMode) bool {
		return own == runtimeapi.NamespaceMode_NODE || pod == runtimeapi.NamespaceMode_NODE
	}

	if node(ns.GetNetwork(), in.SandboxNS.GetNetwork()) {
		// The node's network, and its hostname (kubelet gives host-network
		// pods the node's name).
		hc.NetworkMode, hc.UTSMode = "host", "host"
	} else {
		hc.NetworkMode = sandboxMode
	}

	if node(ns.GetIpc(), in.SandboxNS.GetIpc()) {
		hc.IpcMode = "host"
	} else {
		hc.IpcMode = container.IpcMode(sandboxMode)
	}

	return setPid(hc, in, container.PidMode(sandboxMode))
}

// setPid sets the pid namespace the CRI asks for, podPid being the pod's
// shared one ("" when the sandbox has none).
func setPid(hc *container.HostConfig, in ContainerInput, podPid container.PidMode) error {
	ns := in.Config.GetLinux().GetSecurityContext().GetNamespaceOptions()
	switch ns.GetPid() {
	case runtimeapi.NamespaceMode_NODE:
		hc.PidMode = "host"
	case runtimeapi.NamespaceMode_POD:
		switch {
		case in.SandboxNS.GetPid() == runtimeapi.NamespaceMode_NODE:
			hc.PidMode = "host"
		case podPid == "":
			// A pause-less pod has no pid namespace to share (it was run
			// with mode CONTAINER, as kubelet runs pods that do not
			// share one): the container gets its own, as kubelet would
			// have asked. POD is also the enum's zero, what a client
			// sends that leaves the options out.
		default:
			hc.PidMode = podPid
		}
	case runtimeapi.NamespaceMode_CONTAINER:
		// Its own pid namespace: Docker's default.
	case runtimeapi.NamespaceMode_TARGET:
		if in.PidTarget == "" {
			return crirpc.InvalidArgf("pid namespace mode TARGET needs a target container ID")
		}
		hc.PidMode = container.PidMode("container:" + in.PidTarget)
	default:
		return crirpc.InvalidArgf("unknown pid namespace mode %d", ns.GetPid())
	}
	// The user namespace is the wrapper's to join (containerMarker).
	return nil
}

// containerMounts maps CRI mounts to Docker binds ("src:dst:opts"), which
// create a missing host path as a directory like other CRI runtimes do,
// and accept the SELinux relabel flag. A mount Docker's bind syntax cannot
// carry (a ':' in a path, recursive read-only, or non-recursive read-only
// on API 1.44+) becomes a mount.Mount.
//
// A read-only mount is read-only at its top only unless the CRI mount sets
// recursive_read_only: kubelet and the CRI mean that, and it keeps a
// writable submount under a read-only volume writable. Docker 25 (API
// 1.44) turned "ro" binds recursive, so from that API on the mount asks
// for ReadOnlyNonRecursive; older engines do that for "ro" anyway.
func containerMounts(ms []*runtimeapi.Mount, apiVersion string, selinux bool) (binds []string, mounts []mount.Mount, err error) {
	seen := map[string]bool{}
	for _, m := range ms {
		if IsImageMount(m) {
			mt, err := imageVolumeMount(m, apiVersion, seen)
			if err != nil {
				return nil, nil, err
			}
			mounts = append(mounts, mt)
			continue
		}
		// A bind's id mappings are the OCI wrapper's to apply
		// (containerMarker), Docker has none.
		if !filepath.IsAbs(m.GetContainerPath()) {
			return nil, nil, crirpc.InvalidArgf("mount %q: the container path must be absolute", m.GetContainerPath())
		}
		if m.GetHostPath() == "" {
			return nil, nil, crirpc.InvalidArgf("mount %s: the host path is required", m.GetContainerPath())
		}
		dst := filepath.Clean(m.GetContainerPath())
		if seen[dst] {
			return nil, nil, crirpc.InvalidArgf("two mounts target %s", dst)
		}
		seen[dst] = true
		var propagation mount.Propagation
		switch m.GetPropagation() {
		case runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
			// Docker's default, rprivate.
		case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
			propagation = mount.PropagationRSlave
		case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
			propagation = mount.PropagationRShared
		default:
			return nil, nil, crirpc.InvalidArgf("mount %s: unknown propagation %d", dst, m.GetPropagation())
		}

		// Without SELinux on the host a relabel changes nothing (Docker
		// skips it), so the request does not decide how to mount.
		relabel := m.GetSelinuxRelabel() && selinux
		if m.GetRecursiveReadOnly() {
			mt, err := recursiveReadOnlyMount(m, dst, propagation, apiVersion, relabel)
			if err != nil {
				return nil, nil, err
			}
			mounts = append(mounts, mt)
			continue
		}
		nonRecursiveRO := m.GetReadonly() && readOnlyNeedsNonRecursive(apiVersion)
		colon := strings.Contains(m.GetHostPath(), ":") || strings.Contains(dst, ":")
		if colon && m.GetSelinuxRelabel() {
			return nil, nil, crirpc.InvalidArgf("mount %q -> %q: SELinux relabeling needs Docker's bind syntax, which cannot hold a ':' in a path", m.GetHostPath(), dst)
		}
		// Docker's mount API has no SELinux relabel: on an SELinux host a
		// read-only mount that asks for one keeps the bind syntax, which
		// Docker 25+ makes recursively read-only. kubelet asks for
		// relabeling (on SELinux nodes only) for the volumes it manages
		// itself (secrets, config maps, projected, empty dirs), which have
		// no submounts, so the difference does not show; refusing would
		// break them all.
		if colon || (nonRecursiveRO && !relabel) {
			bo := &mount.BindOptions{Propagation: propagation, ReadOnlyNonRecursive: nonRecursiveRO}
			if !colon {
				// As a bind does: a missing host path becomes a
				// directory (API 1.42+, so always there with 1.44).
				bo.CreateMountpoint = true
			}
			mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.GetHostPath(), Target: dst, ReadOnly: m.GetReadonly(), BindOptions: bo})
			continue
		}
		var opts []string
		if m.GetReadonly() {
			// Below API 1.44 (Docker < 25) "ro" applies to the top mount
			// only: submounts under the host path stay writable.
			opts = append(opts, "ro")
		}
		if m.GetSelinuxRelabel() {
			// A private label: kubelet asks for relabeling only for
			// volumes of this pod.
			opts = append(opts, "Z")
		}
		if propagation != "" {
			opts = append(opts, string(propagation))
		}
		b := m.GetHostPath() + ":" + dst
		if len(opts) > 0 {
			b += ":" + strings.Join(opts, ",")
		}
		binds = append(binds, b)
	}
	return binds, mounts, nil
}

// recursiveReadOnlyMount makes a mount read-only all the way down, which
// only Docker API 1.44+ (Docker 25) can do: BindOptions.ReadOnlyForceRecursive
// fails the start if the kernel (< 5.12) cannot. With an older API there
// is no way to ask for it, so the request is refused rather than served
// with writable submounts. kubelet only asks when the runtime handler
// advertises the feature (Status, runtime_handlers.go: API 1.44+, kernel
// 5.12+, "rro" among the runtime's OCI features), and CreateContainer
// refuses a kernel or runtime known to lack it before this runs.
//
// relabel is the mount's SELinux relabel request on an SELinux host; on
// others (critest and kubelet may ask anyway) it is false and ignored.
func recursiveReadOnlyMount(m *runtimeapi.Mount, dst string, propagation mount.Propagation, apiVersion string, relabel bool) (mount.Mount, error) {
	if !m.GetReadonly() {
		return mount.Mount{}, crirpc.InvalidArgf("mount %s: recursive read-only needs readonly", dst)
	}
	if propagation != "" {
		return mount.Mount{}, crirpc.InvalidArgf("mount %s: recursive read-only needs private propagation", dst)
	}
	if !engine.APIAtLeast(apiVersion, engine.MinRecursiveReadOnlyAPI) {
		return mount.Mount{}, crirpc.InvalidArgf("mount %s: recursive read-only mounts need Docker API %s or later (Docker 25); this engine speaks %s", dst, engine.MinRecursiveReadOnlyAPI, apiVersion)
	}
	if relabel {
		return mount.Mount{}, crirpc.InvalidArgf("mount %s: SELinux relabeling cannot be combined with recursive read-only through Docker's mount API", dst)
	}
	return mount.Mount{Type: mount.TypeBind, Source: m.GetHostPath(), Target: dst, ReadOnly: true,
		BindOptions: &mount.BindOptions{ReadOnlyForceRecursive: true, CreateMountpoint: true}}, nil
}

// readOnlyNeedsNonRecursive reports whether a read-only bind must ask for
// non-recursive read-only explicitly on this API version.
func readOnlyNeedsNonRecursive(apiVersion string) bool {
	return engine.APIAtLeast(apiVersion, minReadOnlyNonRecursiveAPI)
}

// sandboxFileBinds bind-mounts the sandbox's resolv.conf and hosts into the
// container, as dockershim did, so that every container of a pod sees the
// files Docker wrote for the sandbox from the pod's DNS config. This
// matters with host networking, where Docker would otherwise give the
// container a copy of the node's. A file the config mounts itself (kubelet
// manages /etc/hosts of pods on the pod network) is left to that mount.
// Read-only files are mounts with ReadOnlyNonRecursive where the API has
// it, like every read-only bind netshim makes (a file has no submounts,
// but one rule for all keeps what Docker is asked for predictable).
func sandboxFileBinds(ms []*runtimeapi.Mount, in ContainerInput, readonlyRootfs bool) (binds []string, mounts []mount.Mount) {
	mounted := map[string]bool{}
	for _, m := range ms {
		mounted[filepath.Clean(m.GetContainerPath())] = true
	}
	for _, f := range [][2]string{{etcResolvConf, in.ResolvConfPath}, {etcHosts, in.HostsPath}} {
		dst, src := f[0], f[1]
		if src == "" || mounted[dst] {
			continue
		}
		switch {
		case readonlyRootfs && readOnlyNeedsNonRecursive(in.APIVersion):
			// No CreateMountpoint: Docker made the file; if it is gone, a
			// directory in its place would be wrong.
			mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: true,
				BindOptions: &mount.BindOptions{ReadOnlyNonRecursive: true}})
		case readonlyRootfs:
			// As Docker does for its own copies of these files.
			binds = append(binds, src+":"+dst+":ro")
		default:
			binds = append(binds, src+":"+dst)
		}
	}
	return binds, mounts
}

// setSecurityContext maps the CRI security context: identity,
// capabilities, seccomp, AppArmor, SELinux, no_new_privs, masked and
// read-only paths.
func setSecurityContext(config *container.Config, hc *container.HostConfig, sc *runtimeapi.LinuxContainerSecurityContext) error {
	hc.Privileged = sc.GetPrivileged()
	hc.ReadonlyRootfs = sc.GetReadonlyRootfs()

	user, err := containerUser(sc)
	if err != nil {
		return err
	}
	config.User = user
	for _, g := range sc.GetSupplementalGroups() {
		hc.GroupAdd = append(hc.GroupAdd, strconv.FormatInt(g, 10))
	}

	if caps := sc.GetCapabilities(); caps != nil {
		if len(caps.GetAddAmbientCapabilities()) > 0 {
			return crirpc.InvalidArgf("ambient capabilities are not supported by Docker")
		}
		hc.CapAdd = normalizeCaps(caps.GetAddCapabilities())
		hc.CapDrop = normalizeCaps(caps.GetDropCapabilities())
	}

	if sc.GetPrivileged() {
		hc.SecurityOpt = append(hc.SecurityOpt, privilegedSecurityOpts()...)
	} else {
		// No seccomp profile at all means unconfined for a container, as
		// with containerd and dockershim (critest checks it); kubelet
		// always says which profile it wants.
		seccomp := []string{"seccomp=unconfined"}
		if sc.GetSeccomp() != nil {
			var err error
			if seccomp, err = seccompSecurityOpt(sc.GetSeccomp()); err != nil {
				return err
			}
		}
		hc.SecurityOpt = append(hc.SecurityOpt, seccomp...)
		apparmor, err := apparmorSecurityOpt(sc.GetApparmor())
		if err != nil {
			return err
		}
		hc.SecurityOpt = append(hc.SecurityOpt, apparmor...)
	}
	labels, err := selinuxSecurityOpts(sc.GetSelinuxOptions())
	if err != nil {
		return err
	}
	hc.SecurityOpt = append(hc.SecurityOpt, labels...)
	if sc.GetNoNewPrivs() {
		hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges")
	}

	// Docker applies its default masked and read-only paths when these are
	// nil and exactly the given ones otherwise, an empty list meaning
	// none. In-process callers keep that distinction; over gRPC an empty
	// repeated field arrives as nil, so there it means the defaults, as
	// with containerd. A privileged container gets none: kubelet sends its
	// defaults (/proc/sys read-only...) for every container, and Docker 29
	// applies paths it is given even to a privileged one, where kube-proxy
	// and CNI DaemonSets then cannot write their sysctls. Left nil, Docker
	// drops its own defaults for a privileged container; containerd skips
	// the paths for one as well.
	if sc.GetPrivileged() {
		return nil
	}
	if p := sc.GetMaskedPaths(); p != nil {
		hc.MaskedPaths = append([]string{}, p...)
	}
	if p := sc.GetReadonlyPaths(); p != nil {
		hc.ReadonlyPaths = append([]string{}, p...)
	}
	return nil
}

// containerUser is Docker's "user[:group]": run_as_user wins over
// run_as_username; a group needs one of them, as the CRI says.
func containerUser(sc *runtimeapi.LinuxContainerSecurityContext) (string, error) {
	var user string
	switch {
	case sc.GetRunAsUser() != nil:
		if sc.GetRunAsUser().GetValue() < 0 {
			return "", crirpc.InvalidArgf("run_as_user %d is negative", sc.GetRunAsUser().GetValue())
		}
		user = strconv.FormatInt(sc.GetRunAsUser().GetValue(), 10)
	case sc.GetRunAsUsername() != "":
		user = sc.GetRunAsUsername()
	}
	if g := sc.GetRunAsGroup(); g != nil {
		if user == "" {
			return "", crirpc.InvalidArgf("run_as_group is set without run_as_user or run_as_username")
		}
		if g.GetValue() < 0 {
			return "", crirpc.InvalidArgf("run_as_group %d is negative", g.GetValue())
		}
		user += ":" + strconv.FormatInt(g.GetValue(), 10)
	}
	return user, nil
}

// normalizeCaps upper-cases capability names; Docker accepts them with or
// without the CAP_ prefix, and "ALL".
func normalizeCaps(caps []string) []string {
	var out []string
	for _, c := range caps {
		out = append(out, strings.ToUpper(strings.TrimSpace(c)))
	}
	return out
}

// privilegedSecurityOpts confine a privileged container or sandbox by
// neither seccomp nor AppArmor, whatever profiles the request names: the
// CRI says privileged means unconfined, and kubelet still sends the pod's
// profiles. Docker < 25 skipped seccomp for privileged containers itself;
// Docker 25+ applies a profile that was asked for even then (one blocking
// sethostname blocks a privileged container), and every version applies an
// AppArmor profile that was named. So unconfined is said explicitly, and a
// Localhost seccomp profile is not even read.
// selinuxSecurityOpts maps CRI SELinux options to Docker's label
// security options, for containers and pause containers alike.
func selinuxSecurityOpts(se *runtimeapi.SELinuxOption) ([]string, error) {
	var opts []string
	for _, kv := range [][2]string{{"user", se.GetUser()}, {"role", se.GetRole()}, {"type", se.GetType()}, {"level", se.GetLevel()}} {
		// No SELinux user, role, type or level has a control
		// character; refusing them keeps a newline out of Docker's
		// security options.
		if strings.ContainsFunc(kv[1], unicode.IsControl) {
			return nil, crirpc.InvalidArgf("SELinux %s %q contains a control character", kv[0], kv[1])
		}
		if kv[1] != "" {
			opts = append(opts, "label="+kv[0]+":"+kv[1])
		}
	}
	return opts, nil
}

func privilegedSecurityOpts() []string {
	return []string{"seccomp=unconfined", "apparmor=unconfined"}
}

// apparmorSecurityOpt maps a CRI AppArmor profile to Docker's security-opt:
// RuntimeDefault is Docker's docker-default profile (nothing to say),
// Localhost a profile already loaded on the node, named by its name.
func apparmorSecurityOpt(p *runtimeapi.SecurityProfile) ([]string, error) {
	switch p.GetProfileType() {
	case runtimeapi.SecurityProfile_Unconfined:
		return []string{"apparmor=unconfined"}, nil
	case runtimeapi.SecurityProfile_Localhost:
		name := strings.TrimPrefix(p.GetLocalhostRef(), "localhost/")
		if name == "" {
			return nil, crirpc.InvalidArgf("apparmor profile type Localhost needs a profile name")
		}
		return []string{"apparmor=" + name}, nil
	case runtimeapi.SecurityProfile_RuntimeDefault:
		return nil, nil
	}
	return nil, crirpc.InvalidArgf("unknown apparmor profile type %d", p.GetProfileType())
}

// DescribeNamespaces is a one-line summary for logs.
func DescribeNamespaces(hc *container.HostConfig) string {
	return fmt.Sprintf("net=%s ipc=%s pid=%s uts=%s", hc.NetworkMode, hc.IpcMode, hc.PidMode, hc.UTSMode)
}

// setResources maps CRI resources to Docker's for a new container.
// oom_score_adj goes through the same CAP_SYS_RESOURCE clamp as
// sandboxes.
func setResources(r *container.Resources, oomScoreAdj *int, res *runtimeapi.LinuxContainerResources, name string, clamp func(int) int) error {
	if res == nil {
		return nil
	}
	q, err := ResolveResources(res)
	if err != nil {
		return err
	}
	if err := q.ApplyCreate(r); err != nil {
		return err
	}
	*oomScoreAdj = int(res.GetOomScoreAdj())
	if clamp != nil {
		*oomScoreAdj = clamp(*oomScoreAdj)
	}
	WarnSkipped(name, "CreateContainer", q.Skipped)
	return nil
}
