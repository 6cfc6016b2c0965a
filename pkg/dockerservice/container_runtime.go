package dockerservice

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/crilog"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/dockerservice/logs"
	"github.com/netshim/netshim/pkg/dockerservice/stats"
	"github.com/netshim/netshim/pkg/procutil"
)

// containerRuntime is the state the workload-container RPCs keep besides
// the index.
type containerRuntime struct {
	// logs copies each started container's Docker log into its CRI log
	// file; streams tells whether a container's copy is done.
	logs    *crilog.Manager
	streams *logs.Streams
	// stats reads containers' CPU and memory usage from their cgroups.
	stats *stats.Reader
	// layers measures containers' writable layers (pkg/dockerservice/stats,
	// layers.go).
	layers *stats.Layers
	// oom clamps the oom_score_adj of every container, infra ones too.
	oom oomClamp
	// procRoot is where host processes are looked up: exec pids before
	// a kill, infra pids before their netns is handed out ("/proc";
	// tests point it at a fake).
	procRoot string
	// killExecTree kills an exec's process (host pid) and its
	// descendants if the pid is still a process of the container; tests
	// replace it.
	killExecTree func(containerID string, pid int) error
	// netnsPath returns the network namespace path of a container's
	// process if the pid is still a process of the container; tests,
	// whose pids are made up, replace it.
	netnsPath func(containerID string, pid int) (string, error)

	// users holds the identity of each running container's process
	// (container_user.go).
	users processUsers

	// selinux says SELinux is enabled on this host (selinuxfs mounted),
	// read once: it decides whether a mount's relabel request matters.
	selinux bool

	mu sync.Mutex
	// cgroupDriver is Docker's, read once: it cannot change without a
	// dockerd restart, which kubelet does not survive either.
	cgroupDriver string
}

func newContainerRuntime(client engine.Client, logOpts ...crilog.ManagerOption) *containerRuntime {
	mgr := crilog.NewManager(client, append([]crilog.ManagerOption{crilog.WithStateFunc(logs.StateFunc(client))}, logOpts...)...)
	c := &containerRuntime{
		logs:     mgr,
		streams:  logs.NewStreams(mgr),
		procRoot: "/proc",
		selinux:  hostSELinuxEnabled(),
	}
	c.killExecTree = c.killInContainer
	c.netnsPath = c.verifiedNetNSPath
	return c
}

func (c *containerRuntime) killInContainer(containerID string, pid int) error {
	return procutil.KillInContainer(c.procRoot, pid, containerID)
}

func (c *containerRuntime) verifiedNetNSPath(containerID string, pid int) (string, error) {
	return procutil.NetNSPath(c.procRoot, pid, containerID)
}

// RuntimeConfig tells kubelet (1.36 asks) which cgroup driver to use: the
// one Docker uses, or the pods' cgroups would land in a hierarchy Docker
// does not manage.
func (ds *DockerService) RuntimeConfig(ctx context.Context, _ *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	name, err := ds.dockerCgroupDriver(ctx)
	if err != nil {
		return nil, err
	}
	var d runtimeapi.CgroupDriver
	switch name {
	case "systemd":
		d = runtimeapi.CgroupDriver_SYSTEMD
	case "cgroupfs":
		d = runtimeapi.CgroupDriver_CGROUPFS
	default:
		return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("docker reports cgroup driver %q, which the CRI cannot express (want systemd or cgroupfs)", name))
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: d}}, nil
}

// dockerCgroupDriver is Docker's cgroup driver ("systemd", "cgroupfs"),
// lower-cased, asked once (cgroup_parent.go needs it too).
func (ds *DockerService) dockerCgroupDriver(ctx context.Context) (string, error) {
	c := ds.containers
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cgroupDriver == "" {
		info, err := ds.engine.Info(ctx)
		if err != nil {
			return "", crirpc.WithCode(codes.Unavailable, fmt.Errorf("asking Docker for its cgroup driver: %w", err))
		}
		// An engine that names none is asked again next time.
		c.cgroupDriver = strings.ToLower(info.CgroupDriver)
	}
	return c.cgroupDriver, nil
}

// hostSELinuxEnabled says whether the kernel has SELinux enabled: selinuxfs
// is mounted only then.
func hostSELinuxEnabled() bool {
	_, err := os.Stat("/sys/fs/selinux/enforce")
	return err == nil
}
