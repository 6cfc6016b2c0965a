package nodeconformance

// Reasons shared by several entries of SkipList.
const (
	reasonNoSystemd = "restarts or stops kubelet or the runtime with systemctl: systemd is installed here but is not PID 1, so the suite's kubelet is not a systemd unit"
	reasonCgroupV2  = "needs cgroup v2 (this machine runs cgroup v1 only)"
	reasonNoSwap    = "needs swap and cgroup v2 (this machine has neither)"
	reasonPrivate   = "pulls gcr.io/k8s-authenticated-test with credentials: no registry with credentials offline"
)

// SkipList is the reviewed list of [NodeConformance] specs this machine
// cannot pass whatever netshim does, each with its reason. Everything else
// must pass: a failure outside this list is a netshim bug to fix, not a
// line to add here. docs/conformance.md shows this table.
var SkipList = []Skip{
	// cgroup v1 only.
	{`\[Feature:NodeSwap\]`, reasonNoSwap},
	{`must create the user namespace in the configured hostUID/hostGID range`, "needs kubelet's id range for pods set in the host's /etc/subuid and /etc/subgid (user kubelet) and shadow's getsubids; kubelet's default range is what the other user namespace specs run with"},
	{`\[FeatureGate:KubeletPSI\]`, reasonCgroupV2 + " (PSI metrics)"},
	{`Summary API \[NodeConformance\] when querying /stats/summary should report resource usage through the stats api`, reasonCgroupV2 + ": it wants PSI for every container (KubeletPSI is on by default in v1.36); it also wants kubelet's system containers (kubelet, runtime, misc), which this run does not configure because --system-cgroups would move every process of the host's root cgroup"},

	// Root without CAP_SYS_RESOURCE.
	{`\[sig-node\] PrivilegedPod \[NodeConformance\] should enable privileged commands`, "runs a privileged container: Docker 20.10 (runc 1.1.5) cannot start one here, root lacking CAP_SYS_RESOURCE"},
	{`Mount recursive read-only .* should accept (non-)?recursive read-only mounts`, "its pod mounts a tmpfs from a privileged init container with Bidirectional propagation: no privileged container starts under Docker 20.10 here (no CAP_SYS_RESOURCE)"},
	{`MirrorPod when recreating a static pod .* temporarily failed termination due to volume failing to unmount`, "its static pod mounts an NFS volume served by a privileged pod (e2e-test-images/volume/nfs): no privileged container, nor its sandbox, starts under Docker 20.10 here (no CAP_SYS_RESOURCE), and that image is not built here"},
	{`\[sig-storage\] HostPath should support (r/w|subPath) \[NodeConformance\]`, "its containers are privileged (to write the host directory): no privileged container, nor the sandbox of a pod that has one, starts under Docker 20.10 here (no CAP_SYS_RESOURCE)"},

	// kubelet is not a systemd unit here.
	{`when kubelet restarts`, reasonNoSystemd},
	{`and kubelet restarts`, reasonNoSystemd},
	{`Containers Lifecycle when A node running restartable init containers reboots`, reasonNoSystemd},
	{`the container runtime is temporarily down`, reasonNoSystemd},
	{`KubletTLS .* certificate reload`, reasonNoSystemd},
	{`ReloadKubeletClientCAFileTest`, reasonNoSystemd},
	{`ImageGarbageCollect \[Serial\] \[NodeConformance\] when ImageMaximumGCAge is set`, reasonNoSystemd + " (it rewrites kubelet's config and restarts it)"},
	{`Kubelet Endpoints \[NodeConformance\] \[Serial\] when config is updated`, reasonNoSystemd + " (it rewrites kubelet's config and restarts it)"},
	{`OOMKiller \[LinuxOnly\] \[NodeConformance\] \[Serial\]`, reasonNoSystemd + " (each case rewrites kubelet's config, singleProcessOOMKill, and restarts it, through sudo systemctl)"},

	// Images that cannot be made offline (hack/node-e2e-images.sh blocked).
	{`should be able to pull from private registry with secret`, reasonPrivate},
	{`should be able to pull from private registry with credential provider`, reasonPrivate + "; also restarts kubelet with a credential provider config"},
	{`\[Feature:DevicePlugin\]`, "runs the sample device plugin image (registry.k8s.io/e2e-test-images/sample-device-plugin), not built here, and restarts kubelet"},
	{`\[Feature:CPUManager\]`, "reconfigures kubelet with the static CPU manager and restarts it (systemd), and needs more CPUs than this 2-core machine has"},
	{`POD Resources API .*(SRIOV|CPU manager Static policy)`, "SR-IOV devices and the static CPU manager with a kubelet restart"},
}

// QuickFocus is the reviewed subset `make node-conformance-quick` runs in
// CI, where the full run does not fit the time budget: the pod lifecycle
// through netshim end to end (sandbox and containers created, started,
// hooked, logged, exec'd into, stopped, removed; init containers; images
// pulled and refused; security contexts), which is what a CRI runtime must
// get right first. The probe specs are left out: most of them wait minutes
// on purpose, and lifecycle hooks exercise the same exec and HTTP paths.
// docs/conformance.md explains the choice.
var QuickFocus = []string{
	`\[sig-node\] Container Runtime blackbox test `,
	`\[sig-node\] Container Lifecycle Hook `,
	`\[sig-node\] Kubelet when scheduling `,
	`\[sig-node\] InitContainer \[NodeConformance\]`,
	`\[sig-node\] Security Context `,
	`\[sig-node\] Pods should`,
	`\[sig-node\] User Namespaces for Restricted Pod Security Standards `,
}

// QuickLabels is the label filter of a narrowed run: the conformance set,
// and the specs of two features outside it that netshim implements
// (issue 26): pods with hostUsers: false and SupplementalGroupsPolicy.
const QuickLabels = `NodeConformance || Feature:UserNamespacesSupport || Feature:SupplementalGroupsPolicy`

// QuickFeatureTags are those features' tags in the specs' names, which
// the count of a narrowed run takes with ConformanceTag's.
var QuickFeatureTags = []string{"[Feature:UserNamespacesSupport]", "[Feature:SupplementalGroupsPolicy]"}

// QuickExcept leaves the [Slow] and [Serial] specs out of the quick
// subset (they are not counted, as if outside its focus).
const QuickExcept = `\[Slow\]|\[Serial\]`
