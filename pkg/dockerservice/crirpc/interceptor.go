package crirpc

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
// gRPC statuses. The handler gets a context whose logger (klog.FromContext)
// names the RPC and the ids of its request, and so does every line logged
// here: a mutating RPC's success at -v=2 with what it made, any failure as
// an error.
func UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	logger := requestLogger(ctx, method, req)
	ctx = klog.NewContext(ctx, logger)
	start := time.Now()
	resp, err := callRecovering(ctx, logger, req, method, handler)
	if err != nil {
		err = ToStatus(err)
		st, _ := status.FromError(err)
		logger.Error(err, "RPC failed", "code", st.Code().String(), "duration", time.Since(start))
		return resp, err
	}
	// Checked first so that a hot RPC logged at nobody's verbosity
	// costs no boxing of its arguments.
	if l := logger.V(rpcVerbosity(method)); l.Enabled() {
		l.Info("RPC", appendResultIDs([]any{"duration", time.Since(start)}, resp)...)
	}
	return resp, nil
}

// callRecovering runs the handler and turns a panic into an Internal error:
// one bad request must not take down the daemon and every pod's runtime
// with it.
func callRecovering(ctx context.Context, logger klog.Logger, req any, method string, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			logger.Error(nil, "RPC handler panicked", "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "netshim: %s panicked: %v (see the daemon log)", method, r)
		}
	}()
	return handler(ctx, req)
}

// StreamInterceptor does for streaming RPCs what UnaryInterceptor does for
// unary ones: one log line per call, errors turned into gRPC statuses, a
// panic turned into Internal, a logger naming the RPC in the stream's
// context. A stream the client ended (kubelet going away from
// GetContainerEvents) is not a failure.
func StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	method := path.Base(info.FullMethod)
	// The request is read by the handler, so only the RPC is known here.
	logger := klog.LoggerWithValues(klog.FromContext(ss.Context()), logKeyRPC, method)
	ss = loggedStream{ServerStream: ss, ctx: klog.NewContext(ss.Context(), logger)}
	verbosity := rpcVerbosity(method)
	start := time.Now()
	err := streamRecovering(srv, ss, logger, method, handler)
	if err == nil {
		logger.V(verbosity).Info("RPC", "duration", time.Since(start))
		return nil
	}
	err = ToStatus(err)
	st, _ := status.FromError(err)
	if st.Code() == codes.Canceled && ss.Context().Err() != nil {
		logger.V(verbosity).Info("RPC ended by the client", "duration", time.Since(start))
		return err
	}
	logger.Error(err, "RPC failed", "code", st.Code().String(), "duration", time.Since(start))
	return err
}

func streamRecovering(srv any, ss grpc.ServerStream, logger klog.Logger, method string, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			logger.Error(nil, "RPC handler panicked", "panic", r, "stack", string(debug.Stack()))
			err = status.Errorf(codes.Internal, "netshim: %s panicked: %v (see the daemon log)", method, r)
		}
	}()
	return handler(srv, ss)
}
