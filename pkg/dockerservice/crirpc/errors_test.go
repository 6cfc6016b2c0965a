package crirpc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/client"
	"google.golang.org/grpc/codes"
)

func TestToStatusCodes(t *testing.T) {
	// A real client's error when no dockerd listens.
	c, err := client.NewClientWithOpts(client.WithHost("unix://"+filepath.Join(t.TempDir(), "docker.sock")), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	_, dockerDown := c.Ping(context.Background())
	if dockerDown == nil {
		t.Fatal("Ping of a socket nobody listens on succeeded")
	}
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"explicit code wins", WithCode(codes.FailedPrecondition, errdefs.ErrNotFound), codes.FailedPrecondition},
		{"deadline", fmt.Errorf("cni: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"cancelled", fmt.Errorf("x: %w", context.Canceled), codes.Canceled},
		{"disk full", fmt.Errorf("writing checkpoint: %w", &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOSPC}), codes.ResourceExhausted},
		{"quota", fmt.Errorf("writing: %w", syscall.EDQUOT), codes.ResourceExhausted},
		{"docker not found", errdefs.ErrNotFound.WithMessage("no such container"), codes.NotFound},
		{"docker conflict", errdefs.ErrConflict, codes.FailedPrecondition},
		{"docker down", fmt.Errorf("creating infra container: %w", dockerDown), codes.Unavailable},
		{"connection refused", fmt.Errorf("x: %w", syscall.ECONNREFUSED), codes.Unavailable},
		{"anything else", errors.New("boom"), codes.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Code(tc.err); got != tc.want {
				t.Errorf("code = %v, want %v", got, tc.want)
			}
		})
	}
}
