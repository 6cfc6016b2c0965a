package main

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// serveGate holds every CRI call until netshim may answer it (under a
// service manager: once it has read Docker's containers and sent READY=1).
//
// netshim used to hold the connections instead, by not accepting any
// before then: a client's connection waited in the socket's backlog. But
// a gRPC client gives a connection 5 s to complete the HTTP/2 handshake
// (the server preface; cri-client's MinConnectTimeout), and kubelet's
// first call does not wait for a connection that failed: on a node
// booting, where netshim starts with Docker and reads its state, kubelet
// exited with "validate CRI v1 runtime API ... error reading server
// preface" and was restarted by systemd, two or three times (seen on the
// VM node of make e2e-vm). Serving the handshake at once and holding the
// calls keeps what the backlog gave (no early answer, no Unavailable) and
// bounds each call's wait by its own deadline (kubelet's is 2 minutes).
type serveGate struct {
	once sync.Once
	open chan struct{}
	// closed is closed when netshim stops without ever opening.
	closeOnce sync.Once
	closed    chan struct{}
}

func newServeGate() *serveGate {
	return &serveGate{open: make(chan struct{}), closed: make(chan struct{})}
}

// Open lets every held and later call through.
func (g *serveGate) Open() { g.once.Do(func() { close(g.open) }) }

// Close ends the held calls: netshim stops before it served.
func (g *serveGate) Close() { g.closeOnce.Do(func() { close(g.closed) }) }

// wait returns nil once the gate is open, or the reason the call ends.
func (g *serveGate) wait(ctx context.Context) error {
	select {
	case <-g.open:
		return nil
	default:
	}
	select {
	case <-g.open:
		return nil
	case <-g.closed:
		return status.Error(codes.Unavailable, "netshim is stopping before it served: it had not read Docker's containers yet")
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

func (g *serveGate) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (g *serveGate) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := g.wait(ss.Context()); err != nil {
		return err
	}
	return handler(srv, ss)
}
