package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
)

func TestToStatusCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"explicit code wins", withCode(codes.FailedPrecondition, errdefs.ErrNotFound), codes.FailedPrecondition},
		{"deadline", fmt.Errorf("cni: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"cancelled", fmt.Errorf("x: %w", context.Canceled), codes.Canceled},
		{"disk full", fmt.Errorf("writing checkpoint: %w", &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOSPC}), codes.ResourceExhausted},
		{"quota", fmt.Errorf("writing: %w", syscall.EDQUOT), codes.ResourceExhausted},
		{"docker not found", errdefs.ErrNotFound.WithMessage("no such container"), codes.NotFound},
		{"docker conflict", errdefs.ErrConflict, codes.FailedPrecondition},
		{"anything else", errors.New("boom"), codes.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := codeOf(tc.err); got != tc.want {
				t.Errorf("code = %v, want %v", got, tc.want)
			}
		})
	}
}
