package dockerservice

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/network"
	"github.com/netshim/netshim/pkg/version"
)

const (
	// runtimeName is what Version reports: the engine that runs the
	// containers, as kubelet and operators expect to see it.
	runtimeName = "docker"
)

// Version reports the Docker engine's version (cached when the events
// stream connects) and the CRI version.
func (ds *DockerService) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	v, _ := ds.engine.Versions()
	if v == "" {
		sv, err := ds.engine.ServerVersion(ctx)
		if err != nil {
			return nil, crirpc.WithCode(codes.Unavailable, fmt.Errorf("asking Docker for its version: %w", err))
		}
		v = sv.Version
	}
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       runtimeName,
		RuntimeVersion:    runtimeVersion(v, version.Version),
		RuntimeApiVersion: version.CRIVersion,
	}, nil
}

// runtimeVersion is the engine's version with netshim's as semver build
// metadata ("29.0.0+netshim.1.2.0"): kubelet reports it as the node's
// containerRuntimeVersion (`kubectl get nodes -o wide` shows
// docker://29.0.0+netshim.1.2.0), so an operator sees which shim serves
// each node, and a semver parser still reads the engine's version.
// Characters semver does not allow in build metadata become '-'; an
// engine version that has build metadata of its own (Debian's
// 20.10.24+dfsg1) gets netshim's appended to it.
func runtimeVersion(engine, netshim string) string {
	clean := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, netshim)
	clean = strings.Trim(clean, ".")
	if engine == "" || clean == "" {
		return engine
	}
	sep := "+"
	if strings.Contains(engine, "+") {
		sep = "."
	}
	return engine + sep + "netshim." + clean
}

// Status reports runtime and network readiness from cached state: the
// index's health (events stream up, resync working, events drained) and
// the plugin's own status, and the runtime handlers from the cached docker
// info (runtime_handlers.go). kubelet polls it every few seconds; it costs
// no Docker call but the info's refresh every engine.RuntimesMaxAge.
func (ds *DockerService) Status(ctx context.Context, r *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	runtimeReady := &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true}
	if ready, reason := ds.index.Health(); !ready {
		runtimeReady.Status = false
		runtimeReady.Reason = "DockerDaemonNotReady"
		runtimeReady.Message = reason
	}
	if msg := ds.checkpointIssuesMessage(); msg != "" && runtimeReady.Status {
		// Ready: every other pod is served. The operator still has to
		// know that some sandbox state was damaged.
		runtimeReady.Reason = "CheckpointsNotLoaded"
		runtimeReady.Message = "WARNING: " + msg
	}
	networkReady := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if err := ds.network.Status(); err != nil {
		networkReady.Status = false
		networkReady.Reason = "NetworkPluginNotReady"
		networkReady.Message = fmt.Sprintf("network plugin %s is not ready: %v", ds.network.PluginName(), err)
	} else if w := ds.network.Warnings(); len(w) > 0 {
		// Ready, but something the operator must fix (network/optional.go).
		networkReady.Reason = "NetworkPluginWarning"
		networkReady.Message = "WARNING: " + strings.Join(w, "; WARNING: ")
	}
	var info map[string]string
	if r.GetVerbose() {
		// `crictl info`: where new sandboxes' netns comes from, and why;
		// and the runtime's configuration, under the key and in the shape
		// containerd uses, which kubeadm reads (runtimeInfoConfig).
		info = map[string]string{"sandboxNetns": ds.netnsModeInfo(ctx), "sandboxModes": ds.sandboxModesInfo(), "config": ds.runtimeInfoConfig(), "userNamespaces": ds.usernsInfo(ctx)}
	}
	// The handlers first: their read of the engine's runtimes is the one
	// Status waits for (briefly, and only before the first); the
	// features answer from what it got.
	handlers := ds.statusRuntimeHandlers(ctx)
	return &runtimeapi.StatusResponse{
		Info:   info,
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{runtimeReady, networkReady}},
		// Docker merges the image's groups whatever the pod asks; the
		// OCI wrapper applies Strict (dockerspec.containerMarker), so the
		// policy is supported where the engine has a usable wrapper.
		Features:        &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: ds.wrapperIn(ds.engine.CachedRuntimes(), "") != ""},
		RuntimeHandlers: handlers,
	}, nil
}

// requireSynced refuses to answer reads before the index has been filled
// once: an empty answer would tell kubelet that every pod is gone.
func (ds *DockerService) requireSynced() error {
	if !ds.index.Synced() {
		_, msg := ds.index.Health()
		return crirpc.WithCode(codes.Unavailable, fmt.Errorf("netshim has not yet read the state of Docker's containers (%s); retry later", msg))
	}
	return nil
}

// UpdateRuntimeConfig hands the node's pod CIDR to the network plugin.
func (ds *DockerService) UpdateRuntimeConfig(ctx context.Context, r *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	cidr := strings.TrimSpace(r.GetRuntimeConfig().GetNetworkConfig().GetPodCidr())
	if cidr == "" {
		return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
	}
	if _, err := network.ParsePodCIDRs(cidr); err != nil {
		return nil, crirpc.InvalidArgf("%v", err)
	}
	klog.FromContext(ctx).Info("Pod CIDR updated", "podCIDR", cidr)
	ds.network.Event(network.NetPluginEventPodCIDRChange, map[string]any{network.NetPluginEventPodCIDRKey: cidr})
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// runtimeInfoConfig is the "config" entry of a verbose Status: a JSON
// object with the settings a tool may compare with its own. kubeadm's
// preflight reads config.sandboxImage (containerd's name for its pause
// image) and warns when it differs from the pause image it deploys; without
// the field it cannot check at all. The object is a subset of containerd's:
// only keys with the same meaning there.
func (ds *DockerService) runtimeInfoConfig() string {
	b, _ := json.Marshal(struct {
		SandboxImage string `json:"sandboxImage"`
	}{SandboxImage: ds.cfg.PodInfraImage})
	return string(b)
}
