package harness

import (
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRI is a client of a CRI endpoint. Its connection reconnects by itself,
// the way kubelet's does: a client made once survives a restart of the
// daemon behind the socket (calls fail with Unavailable meanwhile).
type CRI struct {
	Conn    *grpc.ClientConn
	Runtime runtimeapi.RuntimeServiceClient
	Image   runtimeapi.ImageServiceClient
}

// DialCRI makes a client of the unix socket sock. It does not connect
// yet: the first call does (pass grpc.WaitForReady to wait for a server).
func DialCRI(sock string) (*CRI, error) {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("creating a gRPC client of %s: %w", sock, err)
	}
	return &CRI{Conn: conn, Runtime: runtimeapi.NewRuntimeServiceClient(conn), Image: runtimeapi.NewImageServiceClient(conn)}, nil
}

// ConnectCRI is DialCRI for a test: the client is closed at cleanup.
func ConnectCRI(t testing.TB, sock string) *CRI {
	t.Helper()
	c, err := DialCRI(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Conn.Close() })
	return c
}
