package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// versionOnly answers Version, whatever the request's size.
type versionOnly struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (versionOnly) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "test", RuntimeApiVersion: "v1"}, nil
}

// The CRI server reads requests of up to 16 MiB, as kubelet sends them,
// not only grpc-go's default 4 MiB.
func TestCRIServerReceivesUpTo16MiB(t *testing.T) {
	gate := newServeGate()
	gate.Open()
	srv := newCRIServer(nil, gate, encoding.GetCodecV2(proto.Name))
	runtimeapi.RegisterRuntimeServiceServer(srv, versionOnly{})
	lis := bufconn.Listen(1 << 20)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	for _, tc := range []struct {
		name string
		size int
		code codes.Code
	}{
		{"small", 1 << 10, codes.OK},
		{"above grpc's default 4 MiB", 4<<20 + 1, codes.OK},
		{"8 MiB", 8 << 20, codes.OK},
		{"just under 16 MiB with the framing", maxRecvMsgSize - 64, codes.OK},
		{"above 16 MiB", maxRecvMsgSize + 1, codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := rt.Version(ctx, &runtimeapi.VersionRequest{Version: strings.Repeat("v", tc.size)})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("a %d-byte request: %v, want %v", tc.size, err, tc.code)
			}
		})
	}
}
