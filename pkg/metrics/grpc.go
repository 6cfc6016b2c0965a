package metrics

import (
	"context"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// UnaryInterceptor times each unary RPC by method and status code. It must
// be the outermost interceptor of the chain, so that the error it sees is
// the status the client gets (after the runtime's own interceptor has
// turned errors into statuses).
func (m *Metrics) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m == nil {
		return handler(ctx, req)
	}
	start := time.Now()
	resp, err := handler(ctx, req)
	m.ObserveRPC(path.Base(info.FullMethod), status.Code(err).String(), time.Since(start))
	return resp, err
}

// StreamInterceptor is UnaryInterceptor for streaming RPCs: the duration
// is the stream's whole life.
func (m *Metrics) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if m == nil {
		return handler(srv, ss)
	}
	start := time.Now()
	err := handler(srv, ss)
	m.ObserveRPC(path.Base(info.FullMethod), status.Code(err).String(), time.Since(start))
	return err
}
