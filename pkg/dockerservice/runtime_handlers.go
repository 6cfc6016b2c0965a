package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
)

// RuntimeClass support. A CRI runtime handler is a Docker runtime by name
// (daemon.json "runtimes", dockerd --add-runtime): the handler "" is the
// engine's default runtime, any other handler must be a runtime the
// engine has. The sandbox and every container of the pod run with it
// (HostConfig.Runtime); the handler is kept in the sandbox's meta label,
// so CreateContainer needs no lookup. What the engine has is the engine's
// runtime catalogue (pkg/dockerservice/engine, runtimes.go): docker info,
// cached.

// statusFirstReadWait is how long a Status that finds nothing cached yet
// waits for the first read: long enough for an engine that answers, short
// enough that kubelet's poll is not held by one that does not.
const statusFirstReadWait = 2 * time.Second

// statusRuntimeHandlers is Status's runtime_handlers, from the cache. It
// waits for the first read only while the engine is known to answer.
func (ds *DockerService) statusRuntimeHandlers(ctx context.Context) []*runtimeapi.RuntimeHandler {
	var wait time.Duration
	if ready, _ := ds.index.Health(); ready {
		wait = statusFirstReadWait
	}
	r := ds.engine.Runtimes(ctx, wait)
	hs := r.Handlers(ds.engine.LiveAPIVersion(r))
	for _, h := range hs {
		// With nothing read yet, nothing is known: no wait beyond the
		// one above (the checks below answer from the cache then).
		if h.Name == "" && r != nil {
			h.Features.UserNamespaces = ds.handlerSupportsUserns(ctx, "")
		}
	}
	return hs
}

// checkRuntimeHandler refuses, before anything is created, a handler that
// names no runtime of the engine. The default handler needs no look-up.
func (ds *DockerService) checkRuntimeHandler(ctx context.Context, handler string) error {
	// From the cache as it is, reading nothing: the default handler
	// costs no docker info; Status (kubelet polls it) keeps it fresh.
	if r := ds.engine.CachedRuntimes(); r != nil && r.WrapperMisuse != "" {
		return crirpc.WithCode(codes.FailedPrecondition, errors.New(r.WrapperMisuse))
	}
	if handler == "" {
		return nil
	}
	if handler == OCIWrapperRuntime {
		// It runs whatever namespaces a container's environment names:
		// only netshim may choose them (sandbox_netns.go).
		return crirpc.InvalidArgf("runtime handler %s is netshim's internal OCI runtime wrapper for pinned sandbox namespaces, not a RuntimeClass handler; use \"\" (the default) or another runtime", dockerspec.ShortQuote(handler))
	}
	if r := ds.engine.Runtimes(ctx, engine.RuntimesReadTimeout); r != nil && r.Has(handler) {
		return nil
	}
	// Not in the cache: the runtime may just have been added.
	r, err := ds.engine.RefreshRuntimes(ctx)
	if r == nil {
		if err == nil {
			err = ctx.Err()
		}
		return crirpc.WithCode(codes.Unavailable, fmt.Errorf("cannot check runtime handler %s: the Docker engine's runtimes are unknown: %w", dockerspec.ShortQuote(handler), err))
	}
	if r.Has(handler) {
		return nil
	}
	known := "no runtimes"
	if len(r.Names) > 0 {
		known = "runtimes " + strings.Join(r.Names, ", ")
	}
	return crirpc.InvalidArgf("unknown runtime handler %s: this Docker engine has %s; register one in daemon.json \"runtimes\" (or dockerd --add-runtime)", dockerspec.ShortQuote(handler), known)
}

// checkRecursiveReadOnlyMounts refuses a recursive read-only mount the
// sandbox's runtime is known not to be able to make: Docker would accept
// the create and fail only the start. An API too old for it is left to
// the mount mapping, which says so; what is not known is left to Docker.
func (ds *DockerService) checkRecursiveReadOnlyMounts(ctx context.Context, mounts []*runtimeapi.Mount, handler, apiVersion string) error {
	i := slices.IndexFunc(mounts, func(m *runtimeapi.Mount) bool { return m.GetRecursiveReadOnly() })
	if i < 0 || !engine.APIAtLeast(apiVersion, engine.MinRecursiveReadOnlyAPI) {
		return nil
	}
	r := ds.engine.Runtimes(ctx, engine.RuntimesReadTimeout)
	if s, why := r.RecursiveReadOnly(handler, apiVersion); s == engine.Unsupported {
		return crirpc.InvalidArgf("mount %s: recursive read-only mounts are not supported with runtime handler %s: %s", mounts[i].GetContainerPath(), dockerspec.ShortQuote(handler), why)
	}
	return nil
}
