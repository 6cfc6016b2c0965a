package main

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/metrics"
)

// maxRecvMsgSize is the largest CRI request netshim reads: 16 MiB, the
// size kubelet's CRI client sends and receives at most, and what
// containerd's CRI server accepts. grpc-go's default, 4 MiB, refused
// (ResourceExhausted) requests kubelet considers fine, such as a
// CreateContainer with a large environment and many mounts.
//
// The send size stays grpc-go's server default (no limit below 2 GiB):
// kubelet refuses an answer over 16 MiB itself, and the answers that
// could grow that large are bounded where they are built (ExecSync's
// output, container_exec.go).
const maxRecvMsgSize = 16 << 20

// newCRIServer builds the gRPC server of the CRI services. The metrics
// interceptors come first (outermost), so that they see the status the
// client gets; the gate holds calls until netshim answers; the service's
// own interceptors log each call and turn its errors into statuses.
func newCRIServer(m *metrics.Metrics, gate *serveGate, codec encoding.CodecV2) *grpc.Server {
	return grpc.NewServer(
		grpc.MaxRecvMsgSize(maxRecvMsgSize),
		grpc.ChainUnaryInterceptor(m.UnaryInterceptor, gate.Unary, crirpc.UnaryInterceptor),
		grpc.ChainStreamInterceptor(m.StreamInterceptor, gate.Stream, crirpc.StreamInterceptor),
		grpc.ForceServerCodecV2(codec))
}
