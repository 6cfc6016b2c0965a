package crirpc

import (
	"context"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// mutatingRPCs change pods, containers, images or the runtime's config.
// Their success is logged at -v=2, so that an operator can follow what
// kubelet did to a node without the status polling that -v=4 adds.
// Exec, Attach and PortForward only hand out URLs and are not here.
var mutatingRPCs = map[string]bool{
	"RunPodSandbox": true, "StopPodSandbox": true, "RemovePodSandbox": true,
	"UpdatePodSandboxResources": true,
	"CreateContainer":           true, "StartContainer": true, "StopContainer": true, "RemoveContainer": true,
	"UpdateContainerResources": true, "ReopenContainerLog": true,
	"UpdateRuntimeConfig": true,
	"PullImage":           true, "RemoveImage": true,
}

// The CRI messages name what they concern through generated getters; these
// interfaces let one function read the ids of any request or response
// without a case per message type.
type (
	sandboxIDGetter   interface{ GetPodSandboxId() string }
	containerIDGetter interface{ GetContainerId() string }
	imageRefGetter    interface{ GetImageRef() string }
	imageSpecGetter   interface{ GetImage() *runtimeapi.ImageSpec }
	podConfigGetter   interface {
		GetConfig() *runtimeapi.PodSandboxConfig
	} // RunPodSandbox
	sandboxConfigGetter interface {
		GetSandboxConfig() *runtimeapi.PodSandboxConfig
	} // CreateContainer, PullImage
	containerConfigGetter interface {
		GetConfig() *runtimeapi.ContainerConfig
	} // CreateContainer
)

// Log keys of the ids. They match the keys the handlers already use, so a
// handler line naming the same id again does not repeat it (klog keeps one
// of two equal pairs).
const (
	logKeyRPC         = "rpc"
	logKeySandboxID   = "podSandboxID"
	logKeyContainerID = "containerID"
	logKeyPod         = "pod"
	logKeyPodUID      = "podUID"
	logKeyContainer   = "container"
	logKeyImage       = "image"
	logKeyImageRef    = "imageRef"
)

// requestLogger is the logger of one RPC: the one ctx carries (klog's
// global logger in the daemon) with the RPC's name and the ids of the pod,
// sandbox, container or image it concerns. Handlers log through
// klog.FromContext, so each of their lines can be tied to its pod.
func requestLogger(ctx context.Context, method string, req any) klog.Logger {
	kv := make([]any, 0, 12)
	kv = append(kv, logKeyRPC, method)
	kv = appendRequestIDs(kv, req)
	return klog.LoggerWithValues(klog.FromContext(ctx), kv...)
}

// appendRequestIDs appends the ids req names; empty ones are left out.
func appendRequestIDs(kv []any, req any) []any {
	if r, ok := req.(sandboxIDGetter); ok {
		if id := r.GetPodSandboxId(); id != "" {
			kv = append(kv, logKeySandboxID, id)
		}
	}
	if r, ok := req.(containerIDGetter); ok {
		if id := r.GetContainerId(); id != "" {
			kv = append(kv, logKeyContainerID, id)
		}
	}
	var pod *runtimeapi.PodSandboxMetadata
	switch r := req.(type) {
	case podConfigGetter:
		pod = r.GetConfig().GetMetadata()
	case sandboxConfigGetter:
		pod = r.GetSandboxConfig().GetMetadata()
	}
	if pod.GetName() != "" || pod.GetNamespace() != "" {
		kv = append(kv, logKeyPod, klog.KRef(pod.GetNamespace(), pod.GetName()))
	}
	if uid := pod.GetUid(); uid != "" {
		kv = append(kv, logKeyPodUID, uid)
	}
	if r, ok := req.(containerConfigGetter); ok {
		if name := r.GetConfig().GetMetadata().GetName(); name != "" {
			kv = append(kv, logKeyContainer, name)
		}
	}
	if r, ok := req.(imageSpecGetter); ok {
		if image := r.GetImage().GetImage(); image != "" {
			kv = append(kv, logKeyImage, image)
		}
	}
	return kv
}

// appendResultIDs appends the id of what a successful RPC made: the sandbox
// of RunPodSandbox, the container of CreateContainer, the image of
// PullImage.
func appendResultIDs(kv []any, resp any) []any {
	switch r := resp.(type) {
	case sandboxIDGetter:
		if id := r.GetPodSandboxId(); id != "" {
			kv = append(kv, logKeySandboxID, id)
		}
	case containerIDGetter:
		if id := r.GetContainerId(); id != "" {
			kv = append(kv, logKeyContainerID, id)
		}
	case imageRefGetter:
		if ref := r.GetImageRef(); ref != "" {
			kv = append(kv, logKeyImageRef, ref)
		}
	}
	return kv
}

// rpcVerbosity is the level a successful RPC is logged at.
func rpcVerbosity(method string) int {
	switch {
	case mutatingRPCs[method]:
		return 2
	case hotRPCs[method]:
		return 6
	}
	return 4
}

// loggedStream hands a streaming handler the context with its RPC's
// logger.
type loggedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s loggedStream) Context() context.Context { return s.ctx }
