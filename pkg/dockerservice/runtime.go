package dockerservice

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/network"
	"github.com/netshim/netshim/pkg/version"
)

const (
	// runtimeName is what Version reports: the engine that runs the
	// containers, as kubelet and operators expect to see it.
	runtimeName = "docker"
	// pingTimeout bounds Status: kubelet polls it and must not hang on a
	// wedged dockerd.
	pingTimeout = 2 * time.Second
)

// Version reports the Docker engine's version and the CRI version.
func (ds *DockerService) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	v, err := ds.client.ServerVersion(ctx)
	if err != nil {
		return nil, withCode(codes.Unavailable, fmt.Errorf("asking Docker for its version: %w", err))
	}
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       runtimeName,
		RuntimeVersion:    v.Version,
		RuntimeApiVersion: version.CRIVersion,
	}, nil
}

// Status reports runtime and network readiness.
func (ds *DockerService) Status(ctx context.Context, _ *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	runtimeReady := &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if _, err := ds.client.Ping(pctx); err != nil {
		runtimeReady.Status = false
		runtimeReady.Reason = "DockerDaemonNotReady"
		runtimeReady.Message = fmt.Sprintf("docker: failed to ping the engine: %v", err)
	}
	networkReady := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if err := ds.network.Status(); err != nil {
		networkReady.Status = false
		networkReady.Reason = "NetworkPluginNotReady"
		networkReady.Message = fmt.Sprintf("network plugin %s is not ready: %v", ds.network.PluginName(), err)
	}
	return &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{runtimeReady, networkReady}},
	}, nil
}

// UpdateRuntimeConfig hands the node's pod CIDR to the network plugin.
func (ds *DockerService) UpdateRuntimeConfig(_ context.Context, r *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	cidr := strings.TrimSpace(r.GetRuntimeConfig().GetNetworkConfig().GetPodCidr())
	if cidr == "" {
		return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
	}
	for _, c := range strings.Split(cidr, ",") {
		if _, _, err := net.ParseCIDR(strings.TrimSpace(c)); err != nil {
			return nil, invalidArgf("pod CIDR %q: %v", cidr, err)
		}
	}
	klog.InfoS("Pod CIDR updated", "podCIDR", cidr)
	ds.network.Event(network.NetPluginEventPodCIDRChange, map[string]any{network.NetPluginEventPodCIDRKey: cidr})
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}
