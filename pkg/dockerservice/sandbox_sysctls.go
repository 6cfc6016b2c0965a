package dockerservice

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

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
//     the ADD (sandboxDockerConfig);
//   - pinned mode: netshim, net.* into the pinned netns right after pinning
//     it (writePodSysctls), before the pause container exists; the IPC ones
//     stay with the pause container, whose IPC namespace it is, and runc
//     writes them as it starts;
//   - pause-less mode: netshim, net.* and IPC ones into the pinned
//     namespaces right after pinning them; containers are created without
//     them (but those of sandboxes an earlier netshim made, which never
//     wrote them: checkpoint.Pauseless.SysctlsWritten).

// writePodSysctls writes the pod's sysctls of the namespaces paths names
// into them. A sysctl the kernel refuses there is InvalidArgument, with
// what to change; nothing is left to undo here (the caller removes the
// namespaces).
func (ds *DockerService) writePodSysctls(cfg *runtimeapi.PodSandboxConfig, paths podns.Paths) error {
	err := ds.writeSysctls(paths, cfg.GetLinux().GetSysctls())
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
		return withCode(codes.InvalidArgument, fmt.Errorf("pod %s: sysctl %s does not exist in the pod's network namespace before its network is set up, when netshim sets it: the kernel has no such setting in a pod's network namespace, or it names an interface the CNI plugin makes later (set net.ipv4.conf.default.* or net.ipv6.conf.default.* instead, or use the CNI tuning plugin): %w", pod, se.Name, err))
	case errors.Is(se.Err, fs.ErrNotExist):
		return withCode(codes.InvalidArgument, fmt.Errorf("pod %s: sysctl %s does not exist in the pod's %s namespace: the kernel has no such setting: %w", pod, se.Name, se.Kind, err))
	case errors.Is(se.Err, syscall.EINVAL), errors.Is(se.Err, syscall.ERANGE):
		return withCode(codes.InvalidArgument, fmt.Errorf("pod %s: the kernel refuses value %s for sysctl %s: %w", pod, shortQuote(se.Value), se.Name, err))
	case errors.Is(se.Err, fs.ErrPermission):
		return withCode(codes.InvalidArgument, fmt.Errorf("pod %s: sysctl %s is read-only in a pod's %s namespace: %w", pod, se.Name, se.Kind, err))
	}
	return fmt.Errorf("pod %s: %w", pod, err)
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
