package dockerservice

import (
	"context"
	"path"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// hotRPCs are polled by kubelet several times a second; they are logged
// only at a higher verbosity so -v=4 stays readable.
var hotRPCs = map[string]bool{
	"ListPodSandbox": true, "ListContainers": true, "PodSandboxStatus": true,
	"ContainerStatus": true, "Status": true, "Version": true, "ImageFsInfo": true,
	"ListContainerStats": true, "ListPodSandboxStats": true, "ListImages": true, "ImageStatus": true,
	"PodSandboxStats": true, "ListPodSandboxMetrics": true,
	// Their stream twins, which kubelet uses instead with CRIListStreaming.
	"StreamPodSandboxes": true, "StreamContainers": true, "StreamContainerStats": true,
	"StreamPodSandboxStats": true, "StreamPodSandboxMetrics": true, "StreamImages": true,
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
	resp, err := callRecovering(ctx, req, method, handler)
	if err != nil {
		err = toStatus(err)
		st, _ := status.FromError(err)
		klog.ErrorS(err, "RPC failed", "method", method, "code", st.Code().String(), "duration", time.Since(start))
		return resp, err
	}
	klog.V(verbosity).InfoS("RPC", "method", method, "duration", time.Since(start))
	return resp, nil
}

// callRecovering runs the handler and turns a panic into an Internal error:
// one bad request must not take down the daemon and every pod's runtime
// with it.
func callRecovering(ctx context.Context, req any, method string, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			klog.ErrorS(nil, "RPC handler panicked", "method", method, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "netshim: %s panicked: %v (see the daemon log)", method, r)
		}
	}()
	return handler(ctx, req)
}

// StreamInterceptor does for streaming RPCs what UnaryInterceptor does for
// unary ones: one log line per call, errors turned into gRPC statuses, a
// panic turned into Internal. A stream the client ended (kubelet going
// away from GetContainerEvents) is not a failure.
func StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	method := path.Base(info.FullMethod)
	verbosity := klog.Level(4)
	if hotRPCs[method] {
		verbosity = 6
	}
	start := time.Now()
	err := streamRecovering(srv, ss, method, handler)
	if err == nil {
		klog.V(verbosity).InfoS("RPC", "method", method, "duration", time.Since(start))
		return nil
	}
	err = toStatus(err)
	st, _ := status.FromError(err)
	if st.Code() == codes.Canceled && ss.Context().Err() != nil {
		klog.V(verbosity).InfoS("RPC ended by the client", "method", method, "duration", time.Since(start))
		return err
	}
	klog.ErrorS(err, "RPC failed", "method", method, "code", st.Code().String(), "duration", time.Since(start))
	return err
}

func streamRecovering(srv any, ss grpc.ServerStream, method string, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			klog.ErrorS(nil, "RPC handler panicked", "method", method, "panic", r, "stack", string(debug.Stack()))
			err = status.Errorf(codes.Internal, "netshim: %s panicked: %v (see the daemon log)", method, r)
		}
	}()
	return handler(srv, ss)
}
