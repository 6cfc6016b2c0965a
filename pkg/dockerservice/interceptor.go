package dockerservice

import (
	"context"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// hotRPCs are polled by kubelet several times a second; they are logged
// only at a higher verbosity so -v=4 stays readable.
var hotRPCs = map[string]bool{
	"ListPodSandbox": true, "ListContainers": true, "PodSandboxStatus": true,
	"ContainerStatus": true, "Status": true, "Version": true, "ImageFsInfo": true,
	"ListContainerStats": true, "ListPodSandboxStats": true, "ListImages": true, "ImageStatus": true,
}

// UnaryInterceptor is the one place where RPCs are logged and errors become
// gRPC statuses.
func UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	verbosity := klog.Level(4)
	if hotRPCs[method] {
		verbosity = 6
	}
	start := time.Now()
	resp, err := handler(ctx, req)
	if err != nil {
		err = toStatus(err)
		st, _ := status.FromError(err)
		klog.ErrorS(err, "RPC failed", "method", method, "code", st.Code().String(), "duration", time.Since(start))
		return resp, err
	}
	klog.V(verbosity).InfoS("RPC", "method", method, "duration", time.Since(start))
	return resp, nil
}
