package dockerservice

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/crilog"
)

// containerRuntime is the state the workload-container RPCs keep besides
// the index.
type containerRuntime struct {
	// logs copies each started container's Docker log into its CRI log
	// file, reading it through streams.
	logs    *crilog.Manager
	streams *logStreams
	// stats reads containers' CPU and memory usage from their cgroups.
	stats *statsReader
	// killProcessTree kills an exec'd process and its descendants (host
	// pids); tests replace it.
	killProcessTree func(pid int) error

	mu sync.Mutex
	// cgroupDriver is Docker's, read once: it cannot change without a
	// dockerd restart, which kubelet does not survive either.
	cgroupDriver *runtimeapi.CgroupDriver
}

func newContainerRuntime(client DockerClient) *containerRuntime {
	streams := newLogStreams(client)
	return &containerRuntime{
		logs:            crilog.NewManager(streams),
		streams:         streams,
		stats:           newStatsReader(),
		killProcessTree: func(pid int) error { return killProcessTree("/proc", pid) },
	}
}

// RuntimeConfig tells kubelet (1.36 asks) which cgroup driver to use: the
// one Docker uses, or the pods' cgroups would land in a hierarchy Docker
// does not manage.
func (ds *DockerService) RuntimeConfig(ctx context.Context, _ *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	c := ds.containers
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cgroupDriver == nil {
		info, err := ds.client.Info(ctx)
		if err != nil {
			return nil, withCode(codes.Unavailable, fmt.Errorf("asking Docker for its cgroup driver: %w", err))
		}
		var d runtimeapi.CgroupDriver
		switch strings.ToLower(info.CgroupDriver) {
		case "systemd":
			d = runtimeapi.CgroupDriver_SYSTEMD
		case "cgroupfs":
			d = runtimeapi.CgroupDriver_CGROUPFS
		default:
			return nil, withCode(codes.FailedPrecondition, fmt.Errorf("docker reports cgroup driver %q, which the CRI cannot express (want systemd or cgroupfs)", info.CgroupDriver))
		}
		c.cgroupDriver = &d
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: *c.cgroupDriver}}, nil
}
