package dockerspec

import (
	"strconv"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
)

// SandboxInput is what the mapping of a sandbox needs besides its CRI
// config.
type SandboxInput struct {
	// Image is the pause image.
	Image string
	// RuntimeHandler is the pod's handler, a Docker runtime's name; ""
	// leaves the engine's default.
	RuntimeHandler string
	// CgroupParent is the config's cgroup parent in Docker's form.
	CgroupParent string
	// OOMScoreAdj is the infra container's oom_score_adj.
	OOMScoreAdj int
}

// SandboxConfig maps a CRI sandbox config to Docker's config of its infra
// (pause) container.
func SandboxConfig(cfg *runtimeapi.PodSandboxConfig, in SandboxInput) (*container.Config, *container.HostConfig, error) {
	runtimeHandler, cgroupParent := in.RuntimeHandler, in.CgroupParent
	labels, err := labelcodec.SandboxLabels(cfg, runtimeHandler)
	if err != nil {
		return nil, nil, err
	}
	linux := cfg.GetLinux()
	sc := linux.GetSecurityContext()
	ns := sc.GetNamespaceOptions()
	config := &container.Config{
		Image:    in.Image,
		Hostname: cfg.GetHostname(),
		Labels:   labels,
	}
	hc := &container.HostConfig{
		NetworkMode: "none",
		IpcMode:     "shareable",
		// runc writes them into the pause container's namespaces as
		// it starts, which is before the ADD in the docker mode
		// (sandbox_sysctls.go); a pinned sandbox's net.* ones are
		// netshim's to write (RunPodSandbox).
		Sysctls:        linux.GetSysctls(),
		OomScoreAdj:    in.OOMScoreAdj,
		Privileged:     sc.GetPrivileged(),
		ReadonlyRootfs: sc.GetReadonlyRootfs(),
		// A handler is a Docker runtime's name; "" leaves the engine's
		// default (runtime_handlers.go).
		Runtime: runtimeHandler,
		// The restart policy stays "no": kubelet decides what restarts.
	}
	hc.CgroupParent = cgroupParent
	if ns.GetNetwork() == runtimeapi.NamespaceMode_NODE {
		hc.NetworkMode = "host"
		// Docker refuses a hostname with host networking; the pod then
		// has the node's, as kubelet expects.
		config.Hostname = ""
	}
	if ns.GetIpc() == runtimeapi.NamespaceMode_NODE {
		hc.IpcMode = "host"
	}
	if ns.GetPid() == runtimeapi.NamespaceMode_NODE {
		hc.PidMode = "host"
	}
	if dns := cfg.GetDnsConfig(); dns != nil {
		// Docker writes the pod's resolv.conf from these, so nothing has
		// to be rewritten after start.
		hc.DNS = dns.Servers
		hc.DNSSearch = dns.Searches
		hc.DNSOptions = dns.Options
	}
	if uid := sc.GetRunAsUser(); uid != nil {
		config.User = strconv.FormatInt(uid.Value, 10)
		if gid := sc.GetRunAsGroup(); gid != nil {
			config.User += ":" + strconv.FormatInt(gid.Value, 10)
		}
	}
	for _, g := range sc.GetSupplementalGroups() {
		hc.GroupAdd = append(hc.GroupAdd, strconv.FormatInt(g, 10))
	}
	if sc.GetPrivileged() {
		hc.SecurityOpt = privilegedSecurityOpts()
	} else {
		secOpts, err := seccompSecurityOpt(sc.GetSeccomp())
		if err != nil {
			return nil, nil, err
		}
		hc.SecurityOpt = secOpts
	}
	// The pod's SELinux label is the pause container's, as dockershim
	// set it: the pod's shared IPC namespace and /dev/shm carry it, and
	// the containers that join them run with the same label.
	selinux, err := selinuxSecurityOpts(sc.GetSelinuxOptions())
	if err != nil {
		return nil, nil, err
	}
	hc.SecurityOpt = append(hc.SecurityOpt, selinux...)
	return config, hc, nil
}

// seccompSecurityOpt maps a CRI seccomp profile to Docker's security-opt.
// Docker's API takes a Localhost profile's content, not its path.
func seccompSecurityOpt(p *runtimeapi.SecurityProfile) ([]string, error) {
	switch p.GetProfileType() {
	case runtimeapi.SecurityProfile_Unconfined:
		return []string{"seccomp=unconfined"}, nil
	case runtimeapi.SecurityProfile_Localhost:
		data, err := ReadSeccompProfile(p.GetLocalhostRef())
		if err != nil {
			return nil, crirpc.InvalidArgf("reading seccomp profile %q: %v", p.GetLocalhostRef(), err)
		}
		return []string{"seccomp=" + string(data)}, nil
	default:
		// RuntimeDefault: Docker's default profile applies.
		return nil, nil
	}
}
