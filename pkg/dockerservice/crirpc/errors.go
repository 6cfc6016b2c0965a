package crirpc

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// codedError attaches a gRPC code to an error while keeping the chain
// intact, so handlers say what kind of failure it is and the interceptor
// alone turns it into a status.
type codedError struct {
	code codes.Code
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func WithCode(code codes.Code, err error) error {
	if err == nil {
		return nil
	}
	return &codedError{code: code, err: err}
}

func InvalidArgf(format string, args ...any) error {
	return WithCode(codes.InvalidArgument, fmt.Errorf(format, args...))
}

func NotFoundf(format string, args ...any) error {
	return WithCode(codes.NotFound, fmt.Errorf(format, args...))
}

// Code is the gRPC code err becomes at the boundary (ToStatus).
func Code(err error) codes.Code { return status.Code(ToStatus(err)) }

// ToStatus maps an error to a gRPC status. Order matters: an explicit code
// wins over what the wrapped Docker error says.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var ce *codedError
	switch {
	case errors.As(err, &ce):
		return status.Error(ce.code, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case client.IsErrConnectionFailed(err), errors.Is(err, syscall.ECONNREFUSED):
		// dockerd is down or restarting: kubelet retries, and Status
		// already says the runtime is not ready.
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		// A full disk is the operator's to fix; the call may succeed
		// once there is room again.
		return status.Error(codes.ResourceExhausted, err.Error())
	case errdefs.IsNotFound(err):
		return status.Error(codes.NotFound, err.Error())
	case errdefs.IsInvalidArgument(err):
		return status.Error(codes.InvalidArgument, err.Error())
	case errdefs.IsConflict(err):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errdefs.IsUnavailable(err):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}
