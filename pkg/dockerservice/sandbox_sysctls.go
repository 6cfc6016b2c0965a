package dockerservice

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/podns"
)

// A pod's sysctls and its network (docs/design/sandbox-modes.md, "Sysctls
// and the network"): in every mode the pod's namespaced sysctls are in its
// namespaces before the CNI ADD runs, so that what the ADD configures is
// final (a net.ipv6.conf.all.disable_ipv6=1 written after it would remove
// the IPv6 address PodSandboxStatus reports) and net.ipv4.conf.default.*
// reaches the interfaces the ADD makes (eth0 inherits the defaults when it
// is made). Who writes them:
//
//   - docker mode: runc, as the pause container starts, which is before
//     the ADD (dockerspec.SandboxConfig);
//   - pinned mode: netshim, net.* into the pinned netns right after pinning
//     it (writePodSysctls), before the pause container exists; the IPC ones
//     stay with the pause container, whose IPC namespace it is, and runc
//     writes them as it starts;
//   - pause-less mode: netshim, net.* and IPC ones into the pinned
//     namespaces right after pinning them; containers are created without
//     them.
//
// In the pinned and pause-less modes netshim adds the engine's own
// defaults for a container's network namespace (engineNetSysctls), and
// the OCI wrapper drops every sysctl of a namespace it pins from the
// configs of the containers it puts there: nothing writes them again
// after the ADD.

// writePodSysctls writes the pod's sysctls of the namespaces paths names
// into them. A sysctl the kernel refuses there is InvalidArgument, with
// what to change; nothing is left to undo here (the caller removes the
// namespaces).
func (ds *DockerService) writePodSysctls(cfg *runtimeapi.PodSandboxConfig, paths podns.Paths) error {
	sysctls := cfg.GetLinux().GetSysctls()
	if _, ok := paths[podns.Net]; ok {
		sysctls = withDefaults(sysctls, ds.pins.netSysctlDefaults)
	}
	err := ds.pins.writeSysctls(paths, sysctls)
	if err == nil {
		return nil
	}
	pod := klog.KRef(cfg.GetMetadata().GetNamespace(), cfg.GetMetadata().GetName())
	var se *podns.SysctlError
	if !errors.As(err, &se) {
		return fmt.Errorf("pod %s: writing its sysctls: %w", pod, err)
	}
	switch {
	case errors.Is(se.Err, fs.ErrNotExist) && se.Kind == podns.Net:
		return crirpc.WithCode(codes.InvalidArgument, fmt.Errorf("pod %s: sysctl %s does not exist in the pod's network namespace before its network is set up, when netshim sets it: the kernel has no such setting in a pod's network namespace, or it names an interface the CNI plugin makes later (set net.ipv4.conf.default.* or net.ipv6.conf.default.* instead, or use the CNI tuning plugin): %w", pod, se.Name, err))
	case errors.Is(se.Err, fs.ErrNotExist):
		return crirpc.WithCode(codes.InvalidArgument, fmt.Errorf("pod %s: sysctl %s does not exist in the pod's %s namespace: the kernel has no such setting: %w", pod, se.Name, se.Kind, err))
	case errors.Is(se.Err, syscall.EINVAL), errors.Is(se.Err, syscall.ERANGE):
		return crirpc.WithCode(codes.InvalidArgument, fmt.Errorf("pod %s: the kernel refuses value %s for sysctl %s: %w", pod, dockerspec.ShortQuote(se.Value), se.Name, err))
	case errors.Is(se.Err, fs.ErrPermission):
		return crirpc.WithCode(codes.InvalidArgument, fmt.Errorf("pod %s: sysctl %s is read-only in a pod's %s namespace: %w", pod, se.Name, se.Kind, err))
	}
	return fmt.Errorf("pod %s: %w", pod, err)
}

// engineNetSysctls are the sysctls Docker gives every container with a
// network namespace of its own, so a pause container's in the docker mode:
// unprivileged ICMP echo sockets, and ports below 1024 without
// CAP_NET_BIND_SERVICE. In the pinned and pause-less modes netshim writes
// them into the pod's netns with the pod's own, before the ADD, and the OCI
// wrapper drops them from the containers' configs (podns.ApplyToConfig):
// runc would write them again at every container's start, after the ADD
// and over the pod's own values. So a pod's network namespace is the same
// in every mode.
var engineNetSysctls = []struct{ name, value string }{
	{"net.ipv4.ping_group_range", "0 2147483647"},
	{"net.ipv4.ip_unprivileged_port_start", "0"},
}

// engineNetSysctlDefaults are those of engineNetSysctls the kernel has
// (Docker leaves out the ones it lacks, too).
func engineNetSysctlDefaults(exists func(name string) bool) map[string]string {
	out := map[string]string{}
	for _, s := range engineNetSysctls {
		if exists(s.name) {
			out[s.name] = s.value
		}
	}
	return out
}

// hostHasSysctl says whether the kernel has a sysctl (netshim's network
// namespace has every one a pod's can have).
func hostHasSysctl(name string) bool {
	parts, ok := podns.SplitSysctl(name)
	if !ok {
		return false
	}
	_, err := os.Stat(filepath.Join(append([]string{"/proc/sys"}, parts...)...))
	return err == nil
}

// withDefaults is the pod's sysctls with each default it does not set
// itself (in either name form) added; sysctls itself when there is none to
// add.
func withDefaults(sysctls, defaults map[string]string) map[string]string {
	if len(defaults) == 0 {
		return sysctls
	}
	set := map[string]bool{}
	for k := range sysctls {
		if parts, ok := podns.SplitSysctl(k); ok {
			set[strings.Join(parts, "/")] = true
		}
	}
	out := maps.Clone(sysctls)
	for k, v := range defaults {
		parts, ok := podns.SplitSysctl(k)
		if !ok || set[strings.Join(parts, "/")] {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// withoutSysctlsOf returns the sysctls but those of the namespace kind
// (podns.SysctlKind), nil when none is left.
func withoutSysctlsOf(sysctls map[string]string, kind podns.Kind) map[string]string {
	var out map[string]string
	for k, v := range sysctls {
		if parts, ok := podns.SplitSysctl(k); ok && podns.SysctlKind(parts) == kind {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}
