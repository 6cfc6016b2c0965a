package dockerspec

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/imageref"
	"github.com/netshim/netshim/pkg/podns"
)

// This file checks a CreateContainer request before any Docker call, as
// validate_sandbox.go does for RunPodSandbox: what Docker would refuse only
// at start, and what would make Docker use host paths the request did not
// give cleanly (a relative host path is a named volume to Docker).

const (
	// Docker's and the kernel's bounds for CFS bandwidth (microseconds)
	// and CPU shares (cgroup v1).
	minCPUPeriod = 1000
	maxCPUPeriod = 1000000
	minCPUQuota  = 1000
	maxCPUShares = 262144
	// maxCPUQuota is the kernel's largest CFS quota (MAX_BW, 2^44-1
	// microseconds, about 203 days): it refuses a larger one with EINVAL,
	// which runc reports only when the container starts.
	maxCPUQuota = 1<<44 - 1
)

// ValidateCreateContainer rejects what cannot make a container, before
// any Docker call.
func ValidateCreateContainer(r *runtimeapi.CreateContainerRequest) error {
	if err := ValidateID("pod sandbox", "pod_sandbox_id", r.GetPodSandboxId()); err != nil {
		return err
	}
	cfg := r.GetConfig()
	if cfg == nil {
		return crirpc.InvalidArgf("container config is required")
	}
	if cfg.GetMetadata() == nil || cfg.GetMetadata().GetName() == "" {
		return crirpc.InvalidArgf("container config: metadata with a name is required")
	}
	if cfg.GetImage().GetImage() == "" {
		return crirpc.InvalidArgf("container %s: image is required", cfg.GetMetadata().GetName())
	}
	return ValidateContainerSpec(cfg)
}

// ValidateContainerSpec checks a container config whose metadata and
// image are present (ValidateCreateContainer checked that).
func ValidateContainerSpec(cfg *runtimeapi.ContainerConfig) error {
	name := cfg.GetMetadata().GetName()
	if err := validateNamePart("container metadata: name", name); err != nil {
		return err
	}
	what := "container " + name
	if _, err := imageref.LookupRef(cfg.GetImage().GetImage()); err != nil {
		return crirpc.InvalidArgf("%s: %v", what, err)
	}
	if err := validateLabelSize(what, cfg.GetLabels(), cfg.GetAnnotations()); err != nil {
		return err
	}
	if err := validateProcess(what, cfg); err != nil {
		return err
	}
	if err := validateMounts(what, cfg.GetMounts()); err != nil {
		return err
	}
	if err := validateDevices(what, cfg.GetDevices()); err != nil {
		return err
	}
	linux := cfg.GetLinux()
	if err := ValidateResources(what, linux.GetResources()); err != nil {
		return err
	}
	sc := linux.GetSecurityContext()
	if err := validateNamespaceModes(what, sc.GetNamespaceOptions()); err != nil {
		return err
	}
	if ns := sc.GetNamespaceOptions(); ns.GetPid() == runtimeapi.NamespaceMode_TARGET {
		if err := ValidateID("container", "namespace_options.target_id", ns.GetTargetId()); err != nil {
			return fmt.Errorf("%s: pid namespace target: %w", what, err)
		}
	}
	if err := validateIDs(what, sc.GetRunAsUser(), sc.GetRunAsGroup(), sc.GetSupplementalGroups()); err != nil {
		return err
	}
	if err := ValidateGroupsPolicy(what, sc.GetSupplementalGroupsPolicy()); err != nil {
		return err
	}
	if err := validateSeccompProfile(what, sc.GetSeccomp()); err != nil {
		return err
	}
	return validateAppArmorProfile(what, sc.GetApparmor())
}

// validateProcess checks what becomes the process's argv, environment
// and working directory: a NUL in any of them makes the start fail, and
// a '=' in a variable's name would set another variable.
func validateProcess(what string, cfg *runtimeapi.ContainerConfig) error {
	for _, kv := range cfg.GetEnvs() {
		if strings.ContainsAny(kv.GetKey(), "=\x00") {
			return crirpc.InvalidArgf("%s: environment variable name %s must not contain '=' or NUL", what, ShortQuote(kv.GetKey()))
		}
		if strings.ContainsRune(string(kv.GetValue()), 0) {
			return crirpc.InvalidArgf("%s: environment variable %s has a NUL in its value", what, ShortQuote(kv.GetKey()))
		}
		if kv.GetKey() == podns.EnvKey {
			// netshim's OCI wrapper reads it to choose a container's
			// namespaces (sandbox_netns.go): no pod may set it.
			return crirpc.InvalidArgf("%s: environment variable %s is reserved for netshim", what, podns.EnvKey)
		}
	}
	for _, a := range append(append([]string{}, cfg.GetCommand()...), cfg.GetArgs()...) {
		if strings.ContainsRune(a, 0) {
			return crirpc.InvalidArgf("%s: command argument %s contains NUL", what, ShortQuote(a))
		}
	}
	if wd := cfg.GetWorkingDir(); wd != "" && (!filepath.IsAbs(wd) || strings.ContainsRune(wd, 0)) {
		return crirpc.InvalidArgf("%s: working directory %s must be an absolute path", what, ShortQuote(wd))
	}
	return nil
}

// validateMounts checks the host side of every mount: an absolute path
// without '..' (what kubelet sends), or an image for an image volume.
// Docker reads a relative host path as the name of a volume it creates.
func validateMounts(what string, ms []*runtimeapi.Mount) error {
	for i, m := range ms {
		if m == nil {
			return crirpc.InvalidArgf("%s: mount %d is empty", what, i)
		}
		// image_sub_path is ignored on other mounts: kubelet copies a
		// volume's subPath there for every mount of a pod that has an
		// image volume, after applying it to the host path already.
		if IsImageMount(m) {
			if err := validateImageMount(what, m); err != nil {
				return err
			}
		} else if err := checkHostPath(m.GetHostPath()); err != nil {
			return crirpc.InvalidArgf("%s: mount %s: host path %s %v", what, ShortQuote(m.GetContainerPath()), ShortQuote(m.GetHostPath()), err)
		}
		if p := m.GetContainerPath(); !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
			return crirpc.InvalidArgf("%s: mount %s: the container path must be absolute", what, ShortQuote(p))
		}
	}
	return nil
}

// validateDevices checks device mappings like mounts, and their cgroup
// permissions.
func validateDevices(what string, ds []*runtimeapi.Device) error {
	for i, d := range ds {
		if d == nil {
			return crirpc.InvalidArgf("%s: device %d is empty", what, i)
		}
		if err := checkHostPath(d.GetHostPath()); err != nil {
			return crirpc.InvalidArgf("%s: device %s %v", what, ShortQuote(d.GetHostPath()), err)
		}
		if p := d.GetContainerPath(); !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
			return crirpc.InvalidArgf("%s: device %s: the container path %s must be absolute", what, ShortQuote(d.GetHostPath()), ShortQuote(p))
		}
		perms := d.GetPermissions()
		if strings.Trim(perms, "rwm") != "" {
			return crirpc.InvalidArgf("%s: device %s: permissions %s may only hold r, w and m", what, ShortQuote(d.GetHostPath()), ShortQuote(perms))
		}
	}
	return nil
}

func checkHostPath(p string) error {
	switch {
	case p == "":
		return ErrString("is required")
	case !filepath.IsAbs(p):
		return ErrString("must be absolute")
	case HasDotDot(p):
		return ErrString("must not contain '..'")
	case strings.ContainsRune(p, 0):
		return ErrString("must not contain NUL")
	}
	return nil
}

// ErrString is an error whose text completes a sentence.
type ErrString string

func (e ErrString) Error() string { return string(e) }

// ValidateResources refuses limits the kernel or Docker cannot take: the
// ranges of ValidateResourceRanges, then what Docker's fields cannot
// express (ResolveResources). Used by CreateContainer and
// UpdateContainerResources, whose resources are applied through Docker.
func ValidateResources(what string, res *runtimeapi.LinuxContainerResources) error {
	if res == nil {
		return nil
	}
	if err := ValidateResourceRanges(what, res); err != nil {
		return err
	}
	// The unified (cgroup v2) entries Docker has a field for must be
	// well-formed and agree with the fields; the others are not read.
	if _, err := ResolveResources(res); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// ValidateResourceRanges refuses values no cgroup can hold, whoever the
// resources are for: a container's (applied through Docker) or a pod's
// (RunPodSandbox and UpdatePodSandboxResources, where kubelet sizes the
// pod's cgroup itself and netshim applies nothing, so Docker's own limits,
// such as its 6 MiB memory minimum, are not checked). Zero means "not set"
// for every field, as for Docker; -1 means "no limit" for cpu_quota,
// memory_limit_in_bytes and memory_swap_limit_in_bytes (as for runc),
// which is how an update lifts a limit. Any other negative value can only
// be a mistake: Docker would pass it on, and the kernel refuse it at start
// or read it as something else.
func ValidateResourceRanges(what string, res *runtimeapi.LinuxContainerResources) error {
	if res == nil {
		return nil
	}
	switch s := res.GetCpuShares(); {
	case s < 0:
		return crirpc.InvalidArgf("%s: cpu_shares %d is negative: want 0 (unset) or a weight of 2-%d (kubelet sends 2 for a pod without CPU requests)", what, s, maxCPUShares)
	case s > maxCPUShares:
		return crirpc.InvalidArgf("%s: cpu_shares %d is above the kernel's maximum %d", what, s, maxCPUShares)
	}
	if p := res.GetCpuPeriod(); p != 0 && (p < minCPUPeriod || p > maxCPUPeriod) {
		return crirpc.InvalidArgf("%s: cpu_period %d is out of range %d-%d (microseconds)", what, p, minCPUPeriod, maxCPUPeriod)
	}
	// -1 is the kernel's "no limit" (kubelet sends it when exclusive CPUs
	// turn the quota off).
	switch q := res.GetCpuQuota(); {
	case q < -1 || (q > 0 && q < minCPUQuota):
		return crirpc.InvalidArgf("%s: cpu_quota %d is invalid: want 0 (unset), -1 (no limit) or at least %d microseconds", what, q, minCPUQuota)
	case q > maxCPUQuota:
		return crirpc.InvalidArgf("%s: cpu_quota %d is above the kernel's maximum %d microseconds; use -1 for no limit", what, q, maxCPUQuota)
	}
	mem, swap := res.GetMemoryLimitInBytes(), res.GetMemorySwapLimitInBytes()
	if mem < -1 {
		return crirpc.InvalidArgf("%s: memory_limit_in_bytes %d is invalid: want 0 (unset), -1 (no limit) or a byte count", what, mem)
	}
	if swap < -1 {
		return crirpc.InvalidArgf("%s: memory_swap_limit_in_bytes %d is invalid: want 0 (unset), -1 (no limit) or a byte count", what, swap)
	}
	if swap > 0 && mem > 0 && swap < mem {
		return crirpc.InvalidArgf("%s: memory_swap_limit_in_bytes %d is below memory_limit_in_bytes %d (it counts memory plus swap)", what, swap, mem)
	}
	if o := res.GetOomScoreAdj(); o < -1000 || o > 1000 {
		return crirpc.InvalidArgf("%s: oom_score_adj %d is out of range -1000-1000", what, o)
	}
	for _, f := range []struct{ field, v string }{{"cpuset_cpus", res.GetCpusetCpus()}, {"cpuset_mems", res.GetCpusetMems()}} {
		if !ValidCPUSet(f.v) {
			return crirpc.InvalidArgf("%s: %s %s is not a list like 0-3,5", what, f.field, ShortQuote(f.v))
		}
	}
	// A limit is an unsigned byte count; one without a page size names no
	// hugetlb cgroup file. kubelet sends every page size of the node, as
	// "2MB" or "1GB", with a limit of 0 unless the pod asks for hugepages.
	for i, h := range res.GetHugepageLimits() {
		if h.GetLimit() != 0 && h.GetPageSize() == "" {
			return crirpc.InvalidArgf("%s: hugepage_limits[%d]: a limit of %d bytes needs a page_size (such as \"2MB\")", what, i, h.GetLimit())
		}
	}
	return nil
}

// ValidCPUSet checks the kernel's list format ("0-3,5,7-8"); empty means
// unset.
func ValidCPUSet(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return false
		}
		if isRange {
			b, err := strconv.ParseUint(hi, 10, 16)
			if err != nil || b < a {
				return false
			}
		}
	}
	return true
}

// validateAppArmorProfile checks an AppArmor profile's type and, for
// Localhost, its name: a profile loaded on the node, which Docker hands to
// the kernel by name.
func validateAppArmorProfile(what string, p *runtimeapi.SecurityProfile) error {
	switch p.GetProfileType() {
	case runtimeapi.SecurityProfile_RuntimeDefault, runtimeapi.SecurityProfile_Unconfined:
		return nil
	case runtimeapi.SecurityProfile_Localhost:
		name := strings.TrimPrefix(p.GetLocalhostRef(), "localhost/")
		if name == "" || HasDotDot(name) || strings.IndexFunc(name, isSpaceOrControl) >= 0 {
			return crirpc.InvalidArgf("%s: apparmor profile %s: a Localhost profile needs the name of a loaded profile, without white space or '..'", what, ShortQuote(p.GetLocalhostRef()))
		}
		return nil
	}
	return crirpc.InvalidArgf("%s: unknown apparmor profile type %d", what, p.GetProfileType())
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f || r == 0x85 || r == 0xa0 }

// ValidateGroupsPolicy checks a supplemental groups policy. Docker
// always merges the groups the image's /etc/group gives the user into the
// process's (Merge); Strict is applied by the OCI wrapper, so a container
// asking for it needs one (containerMarker). A pod's policy is its
// containers' default, which kubelet copies into each container.
func ValidateGroupsPolicy(what string, p runtimeapi.SupplementalGroupsPolicy) error {
	switch p {
	case runtimeapi.SupplementalGroupsPolicy_Merge, runtimeapi.SupplementalGroupsPolicy_Strict:
		return nil
	}
	return crirpc.InvalidArgf("%s: unknown supplemental groups policy %d", what, p)
}
