package dockerspec

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"unicode"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/network"
	"github.com/netshim/netshim/pkg/podns"
)

// This file checks a RunPodSandbox request before anything is pulled,
// created or written, and holds the checks validate_container.go shares.
// Everything refused here would otherwise fail later, halfway (Docker
// refuses it only at start, after the container and checkpoint exist), or
// would make netshim or Docker act outside what the request is entitled
// to. Every error is InvalidArgument and names the field.

const (
	// maxNameLen bounds each part of a Docker container name netshim
	// builds (pod name, namespace, uid, container name): Kubernetes names
	// are at most 253 characters.
	maxNameLen = 253
	// maxHostnameLen is what kubelet truncates pod hostnames to, and fits
	// the kernel's 64-byte limit.
	maxHostnameLen = 63
	// MaxLabelBytes bounds the labels plus annotations of one sandbox or
	// container. They become Docker labels, which Docker repeats in every
	// event and list answer. Kubernetes allows 256 KiB of annotations per
	// object; this leaves room for labels and kubelet's own keys.
	MaxLabelBytes = 512 << 10
	// maxSeccompProfileSize bounds a Localhost seccomp profile, which
	// netshim reads into memory and hands to Docker inline.
	maxSeccompProfileSize = 1 << 20
	// maxShownLen is how much of a bad value an error message quotes.
	maxShownLen = 64
)

// ValidateSandboxConfig rejects, before anything is created, what would
// otherwise fail halfway or produce a pod nobody can address.
func ValidateSandboxConfig(cfg *runtimeapi.PodSandboxConfig) error {
	if cfg == nil {
		return crirpc.InvalidArgf("pod sandbox config is required")
	}
	md := cfg.GetMetadata()
	if md == nil {
		return crirpc.InvalidArgf("pod sandbox config: metadata is required")
	}
	for _, f := range []struct{ field, v string }{{"name", md.Name}, {"namespace", md.Namespace}, {"uid", md.Uid}} {
		if err := validateNamePart("pod sandbox metadata: "+f.field, f.v); err != nil {
			return err
		}
	}
	if err := validateHostname(cfg.GetHostname()); err != nil {
		return err
	}
	if err := ValidateLogDirectory(cfg.GetLogDirectory()); err != nil {
		return err
	}
	if err := validateLabelSize("pod sandbox", cfg.GetLabels(), cfg.GetAnnotations()); err != nil {
		return err
	}
	if err := validatePortMappings(cfg.GetPortMappings()); err != nil {
		return err
	}
	if _, _, err := network.ExtractPodBandwidth(cfg.GetAnnotations()); err != nil {
		return crirpc.InvalidArgf("%v", err)
	}
	if err := validateDNSConfig(cfg.GetDnsConfig()); err != nil {
		return err
	}
	linux := cfg.GetLinux()
	if err := validateCgroupParent(linux.GetCgroupParent()); err != nil {
		return err
	}
	// Nothing applies the pod-level resources (kubelet sizes the pod's
	// cgroup itself), but a value no cgroup can hold says the request is
	// wrong; only the kernel's ranges are checked, not Docker's limits.
	if err := ValidateResourceRanges("pod sandbox resources", linux.GetResources()); err != nil {
		return err
	}
	if err := ValidateResourceRanges("pod sandbox overhead", linux.GetOverhead()); err != nil {
		return err
	}
	sc := linux.GetSecurityContext()
	ns := sc.GetNamespaceOptions()
	if err := validateNamespaceModes("pod sandbox", ns); err != nil {
		return err
	}
	if ns.GetNetwork() == runtimeapi.NamespaceMode_CONTAINER || ns.GetNetwork() == runtimeapi.NamespaceMode_TARGET {
		return crirpc.InvalidArgf("network namespace mode %s is not supported for a pod sandbox", ns.GetNetwork())
	}
	// A nil UsernsOptions reads as mode POD (the enum's zero): only an
	// explicit POD asks for a user namespace. Whether this node can give
	// one is RunPodSandbox's to say (usernsSupport).
	if err := ValidateUserNamespace("pod sandbox", ns.GetUsernsOptions()); err != nil {
		return err
	}
	if _, _, ok := PodUserNS(ns); ok {
		for _, m := range []struct {
			kind string
			mode runtimeapi.NamespaceMode
		}{{"network", ns.GetNetwork()}, {"pid", ns.GetPid()}, {"ipc", ns.GetIpc()}} {
			if m.mode == runtimeapi.NamespaceMode_NODE {
				return crirpc.InvalidArgf("pod sandbox: a pod with its own user namespace (hostUsers: false) cannot use the node's %s namespace", m.kind)
			}
		}
	}
	if err := validateSysctls(linux.GetSysctls(), ns); err != nil {
		return err
	}
	if err := validateIDs("pod sandbox", sc.GetRunAsUser(), sc.GetRunAsGroup(), sc.GetSupplementalGroups()); err != nil {
		return err
	}
	if err := ValidateGroupsPolicy("pod sandbox", sc.GetSupplementalGroupsPolicy()); err != nil {
		return err
	}
	return validateSeccompProfile("pod sandbox", sc.GetSeccomp())
}

// ValidateRunPodSandbox checks a whole RunPodSandbox request.
func ValidateRunPodSandbox(r *runtimeapi.RunPodSandboxRequest) error {
	// The runtime handler is checked against the engine's runtimes by
	// RunPodSandbox (runtime_handlers.go), which needs docker info.
	return ValidateSandboxConfig(r.GetConfig())
}

// ValidateLogDirectory checks the directory under which netshim, as root,
// creates the log file of each of the pod's containers, so that a pod
// whose containers could never log there is refused before anything of it
// exists. kubelet sends an absolute, clean /var/log/pods/<ns>_<name>_<uid>.
// A relative path is refused: netshim has no directory it could be
// relative to (its working directory is wherever it was started), and
// CreateContainer refuses it for every container with a log_path. A ".."
// component is refused even where it would stay under the root, as it is
// how a log file would escape the pod's directory. Empty means no logs.
// containerLogPath applies the same rule at CreateContainer, whose
// request carries the sandbox config again.
func ValidateLogDirectory(dir string) error {
	switch {
	case dir == "":
		return nil
	case strings.ContainsRune(dir, 0):
		return crirpc.InvalidArgf("pod sandbox log_directory %s contains a NUL byte", ShortQuote(dir))
	case !filepath.IsAbs(dir):
		return crirpc.InvalidArgf("pod sandbox log_directory %s must be an absolute path without '..' (kubelet sends /var/log/pods/<namespace>_<name>_<uid>)", ShortQuote(dir))
	case HasDotDot(dir):
		return crirpc.InvalidArgf("pod sandbox log_directory %s must not contain a \"..\" component: the pod's log files must stay under it", ShortQuote(dir))
	case filepath.Clean(dir) != dir:
		return crirpc.InvalidArgf("pod sandbox log_directory %s is not a clean path: write it as %s", ShortQuote(dir), ShortQuote(filepath.Clean(dir)))
	}
	return nil
}

// ValidateID checks the ID a request names a sandbox or container by
// (field, e.g. pod_sandbox_id), before it is looked up in the index or,
// for Stop and Remove when the index lacks it, in Docker. netshim's IDs
// are Docker's: 64 hex digits, or a unique prefix; Docker also resolves a
// container's name. Anything that is neither can name nothing, and is
// refused here rather than sent on: Docker's client refuses a blank ID as
// an invalid parameter, which Stop and Remove would answer as Unavailable
// (kubelet reads that as the runtime being down), and a '/' would change
// the path of the Docker API call the ID is put in. A well-formed ID that
// names nothing is not an error here: Stop and Remove are idempotent.
func ValidateID(kind, field, id string) error {
	switch {
	case id == "":
		return crirpc.InvalidArgf("%s ID is required: %s is empty", kind, field)
	case strings.TrimSpace(id) == "":
		return crirpc.InvalidArgf("%s ID is required: %s %s is only white space", kind, field, ShortQuote(id))
	}
	for i, c := range id {
		if !isAlnum(c) && (i == 0 || c != '_' && c != '.' && c != '-') {
			return crirpc.InvalidArgf("%s %s is not a %s ID: want the hex ID netshim returned (or a unique prefix of it)", field, ShortQuote(id), kind)
		}
	}
	return nil
}

func validatePortMappings(pms []*runtimeapi.PortMapping) error {
	type portKey struct {
		proto runtimeapi.Protocol
		ip    string
		port  int32
	}
	seen := map[portKey]int{}
	for i, pm := range pms {
		if pm == nil {
			return crirpc.InvalidArgf("port mapping %d is empty", i)
		}
		if pm.ContainerPort <= 0 || pm.ContainerPort > 65535 {
			return crirpc.InvalidArgf("port mapping %d: container port %d is out of range 1-65535", i, pm.ContainerPort)
		}
		if pm.HostPort < 0 || pm.HostPort > 65535 {
			return crirpc.InvalidArgf("port mapping %d: host port %d is out of range 0-65535", i, pm.HostPort)
		}
		if _, ok := runtimeapi.Protocol_name[int32(pm.Protocol)]; !ok {
			return crirpc.InvalidArgf("port mapping %d: unknown protocol %d (want TCP, UDP or SCTP)", i, pm.Protocol)
		}
		if pm.HostIp != "" && net.ParseIP(pm.HostIp) == nil {
			return crirpc.InvalidArgf("port mapping %d: host IP %s is not an IP address", i, ShortQuote(pm.HostIp))
		}
		if pm.HostPort == 0 {
			continue
		}
		k := portKey{pm.Protocol, pm.HostIp, pm.HostPort}
		if j, dup := seen[k]; dup {
			return crirpc.InvalidArgf("port mappings %d and %d both claim host port %s/%d", j, i, pm.Protocol, pm.HostPort)
		}
		seen[k] = i
	}
	return nil
}

// validateNamePart checks a part of the Docker container name netshim
// builds (k8s_..._<part>_...): Docker refuses names with other characters,
// but only when the container is created, after the image is pulled.
func validateNamePart(field, v string) error {
	if v == "" {
		return crirpc.InvalidArgf("%s is required", field)
	}
	if len(v) > maxNameLen {
		return crirpc.InvalidArgf("%s %s is %d characters long; at most %d are allowed", field, ShortQuote(v), len(v), maxNameLen)
	}
	for _, c := range v {
		if !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return crirpc.InvalidArgf("%s %s contains %q: only letters, digits, '_', '.' and '-' are allowed (Docker container names)", field, ShortQuote(v), c)
		}
	}
	return nil
}

// validateHostname applies RFC 1123: dot-separated labels of letters,
// digits and '-', neither starting nor ending with '-', 63 characters in
// all (the kernel refuses longer ones at start). One trailing dot is
// allowed: an absolute FQDN is what kubelet sends for setHostnameAsFQDN
// when the cluster domain is empty ("pod.sub.ns.svc."), and Docker and
// the kernel take it as it is.
func validateHostname(h string) error {
	if h == "" {
		return nil
	}
	if len(h) > maxHostnameLen {
		return crirpc.InvalidArgf("hostname %s is %d characters long; at most %d are allowed", ShortQuote(h), len(h), maxHostnameLen)
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if !isRFC1123Label(label) {
			return crirpc.InvalidArgf("hostname %s is not a valid RFC 1123 hostname: each dot-separated part must be 1-63 letters, digits or '-', and not start or end with '-'", ShortQuote(h))
		}
	}
	return nil
}

func isRFC1123Label(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !isAlnum(c) && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// validateLabelSize bounds what a request stores in Docker labels.
func validateLabelSize(what string, labels, annotations map[string]string) error {
	n := 0
	for k, v := range labels {
		n += len(k) + len(v)
	}
	for k, v := range annotations {
		n += len(k) + len(v)
	}
	if n > MaxLabelBytes {
		return crirpc.InvalidArgf("%s labels and annotations take %d bytes; at most %d are allowed", what, n, MaxLabelBytes)
	}
	return nil
}

// validateDNSConfig checks what Docker writes into the pod's resolv.conf:
// a search domain or option with white space would add lines of its own.
func validateDNSConfig(dns *runtimeapi.DNSConfig) error {
	for _, s := range dns.GetServers() {
		if net.ParseIP(s) == nil {
			return crirpc.InvalidArgf("dns config: server %s is not an IP address", ShortQuote(s))
		}
	}
	for _, f := range []struct {
		field string
		vs    []string
	}{{"search domain", dns.GetSearches()}, {"option", dns.GetOptions()}} {
		for _, v := range f.vs {
			if v == "" || strings.IndexFunc(v, unicode.IsSpace) >= 0 || strings.ContainsRune(v, 0) {
				return crirpc.InvalidArgf("dns config: %s %s must be non-empty without white space", f.field, ShortQuote(v))
			}
		}
	}
	return nil
}

// validateCgroupParent refuses a cgroup parent that climbs out of the
// cgroup hierarchy kubelet manages.
func validateCgroupParent(p string) error {
	if HasDotDot(p) || strings.ContainsRune(p, 0) {
		return crirpc.InvalidArgf("cgroup parent %s must not contain '..' or NUL", ShortQuote(p))
	}
	return nil
}

// validateNamespaceModes refuses namespace modes the CRI does not define.
func validateNamespaceModes(what string, ns *runtimeapi.NamespaceOption) error {
	for _, m := range []struct {
		kind string
		mode runtimeapi.NamespaceMode
	}{{"network", ns.GetNetwork()}, {"pid", ns.GetPid()}, {"ipc", ns.GetIpc()}} {
		if _, ok := runtimeapi.NamespaceMode_name[int32(m.mode)]; !ok {
			return crirpc.InvalidArgf("%s: unknown %s namespace mode %d", what, m.kind, m.mode)
		}
	}
	return nil
}

// validateIDs refuses negative user and group IDs, which Docker takes as
// names and fails on only when the container starts.
func validateIDs(what string, uid, gid *runtimeapi.Int64Value, groups []int64) error {
	if uid != nil && uid.GetValue() < 0 {
		return crirpc.InvalidArgf("%s: run_as_user %d is negative", what, uid.GetValue())
	}
	if gid != nil && gid.GetValue() < 0 {
		return crirpc.InvalidArgf("%s: run_as_group %d is negative", what, gid.GetValue())
	}
	for _, g := range groups {
		if g < 0 {
			return crirpc.InvalidArgf("%s: supplemental group %d is negative", what, g)
		}
	}
	return nil
}

// validateSysctls refuses sysctls Docker accepts at create but runc
// refuses at start: unknown or node-wide ones, and namespaced ones whose
// namespace the pod shares with the node.
func validateSysctls(sysctls map[string]string, ns *runtimeapi.NamespaceOption) error {
	names := make([]string, 0, len(sysctls))
	for k := range sysctls {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		parts, ok := podns.SplitSysctl(name)
		if !ok {
			return crirpc.InvalidArgf("sysctl %s is not a valid sysctl name", ShortQuote(name))
		}
		if v := sysctls[name]; strings.ContainsAny(v, "\x00\n") {
			return crirpc.InvalidArgf("sysctl %s: value %s must be one line without NUL", name, ShortQuote(v))
		}
		// Only namespaced sysctls can be set for a pod: runc refuses any
		// other at start, since it would change the whole node.
		switch podns.SysctlKind(parts) {
		case podns.Net:
			if ns.GetNetwork() == runtimeapi.NamespaceMode_NODE {
				return crirpc.InvalidArgf("sysctl %s cannot be set for a pod on the host network: it would change the node's network settings", name)
			}
		case podns.IPC:
			if ns.GetIpc() == runtimeapi.NamespaceMode_NODE {
				return crirpc.InvalidArgf("sysctl %s cannot be set for a pod in the host IPC namespace: it would change the node's IPC limits", name)
			}
		case podns.UTS:
			return crirpc.InvalidArgf("sysctl %s cannot be set: use the pod's hostname instead", name)
		default:
			return crirpc.InvalidArgf("sysctl %s is not namespaced: it would change the whole node, and runc refuses it; only kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.* and net.* can be set for a pod", name)
		}
	}
	return nil
}

// validateSeccompProfile checks a seccomp profile's type and, for
// Localhost, that its reference is an absolute path that does not climb:
// kubelet always sends one under its seccomp profile root.
func validateSeccompProfile(what string, p *runtimeapi.SecurityProfile) error {
	switch p.GetProfileType() {
	case runtimeapi.SecurityProfile_RuntimeDefault, runtimeapi.SecurityProfile_Unconfined:
		return nil
	case runtimeapi.SecurityProfile_Localhost:
		return checkLocalhostProfilePath(p.GetLocalhostRef())
	}
	return crirpc.InvalidArgf("%s: unknown seccomp profile type %d", what, p.GetProfileType())
}

func checkLocalhostProfilePath(ref string) error {
	if !filepath.IsAbs(ref) || HasDotDot(ref) || strings.ContainsRune(ref, 0) {
		return crirpc.InvalidArgf("seccomp profile %s: a Localhost profile must be an absolute path without '..'", ShortQuote(ref))
	}
	return nil
}

// Filesystem magic numbers (statfs(2)) of the pseudo filesystems whose
// files are not profiles and may block or have side effects when read.
const (
	procSuperMagic = 0x9fa0
	sysfsMagic     = 0x62656572
)

// ReadSeccompProfile reads a Localhost seccomp profile. Only a non-empty
// regular file of at most maxSeccompProfileSize on a real filesystem is
// read: the path comes from the pod spec, and a FIFO, a device or a /proc
// file like kmsg would block the RPC or consume what others need. The
// file is opened non-blocking for the same reason.
func ReadSeccompProfile(path string) ([]byte, error) {
	if err := checkLocalhostProfilePath(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	if fi.Size() == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	if fi.Size() > maxSeccompProfileSize {
		return nil, fmt.Errorf("%s is %d bytes; a profile may have at most %d", path, fi.Size(), maxSeccompProfileSize)
	}
	if err := refusePseudoFS(f); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSeccompProfileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxSeccompProfileSize {
		return nil, fmt.Errorf("%s grew beyond %d bytes while being read", path, maxSeccompProfileSize)
	}
	return data, nil
}

// refusePseudoFS refuses a file on procfs or sysfs. It uses the raw
// connection: f.Fd() would put the descriptor back in blocking mode.
func refusePseudoFS(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var st syscall.Statfs_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Fstatfs(int(fd), &st) }); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	if st.Type == procSuperMagic || st.Type == sysfsMagic {
		return errors.New(f.Name() + " is on /proc or /sys, not a profile file")
	}
	return nil
}

// ShortQuote quotes a value for an error message, cut short: a hostile
// value may be megabytes long.
func ShortQuote(s string) string {
	if len(s) <= maxShownLen {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:maxShownLen], len(s))
}

// ProtocolName is the lower-case protocol name CNI's portmap expects.
func ProtocolName(p runtimeapi.Protocol) string {
	switch p {
	case runtimeapi.Protocol_UDP:
		return "udp"
	case runtimeapi.Protocol_SCTP:
		return "sctp"
	default:
		return "tcp"
	}
}

// HasDotDot reports whether the slash-separated path has a ".." component.
func HasDotDot(p string) bool {
	for c := range strings.SplitSeq(p, "/") {
		if c == ".." {
			return true
		}
	}
	return false
}
