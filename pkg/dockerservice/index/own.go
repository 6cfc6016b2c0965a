package index

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	dnetwork "github.com/docker/docker/api/types/network"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// Docker emits a container's create and start events before it answers the
// create and start calls. Without care, the events loop would inspect each
// of netshim's own containers twice more while the caller is about to
// record them itself. ownOps marks those operations in flight so the loop
// skips them: the writer, not the loop, makes the index current.

func ownCreateKey(name string) string { return "name:" + trimSlash(name) }
func ownStartKey(id string) string    { return "start:" + id }

func trimSlash(name string) string {
	if len(name) > 0 && name[0] == '/' {
		return name[1:]
	}
	return name
}

// beginOwnOp marks an operation in flight until the returned func runs.
func (x *Index) beginOwnOp(key string) func() {
	x.mu.Lock()
	x.ownOps[key]++
	x.mu.Unlock()
	return func() {
		x.mu.Lock()
		if x.ownOps[key]--; x.ownOps[key] <= 0 {
			delete(x.ownOps, key)
		}
		x.mu.Unlock()
	}
}

func (x *Index) isOwnOp(key string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ownOps[key] > 0
}

// ErrNotOwned is returned for a container that lacks netshim's labels.
var ErrNotOwned = errors.New("not a container netshim manages")

// Create creates a container and records it before returning, with its
// create event skipped by the loop. decorate, if set, adds what the caller
// knows to the record before it is stored.
//
// When the create fails in a way that does not prove Docker made nothing
// (a timeout, a broken connection), Create looks the name up: a container
// made by this call is indexed and its ID returned with the error, so the
// caller can remove it instead of leaving an orphan no one sees.
func (x *Index) Create(ctx context.Context, cfg *container.Config, hc *container.HostConfig, name string, decorate func(*store.Record)) (container.CreateResponse, error) {
	defer x.beginOwnOp(ownCreateKey(name))()
	began := time.Now()
	cctx, cancel := context.WithTimeout(ctx, x.opts.CallTimeout)
	created, err := x.client.ContainerCreate(cctx, cfg, hc, (*dnetwork.NetworkingConfig)(nil), nil, name)
	cancel()
	if err == nil {
		rec := x.decode(inspectFromCreate(created.ID, name, cfg, hc, began))
		if rec == nil {
			return created, fmt.Errorf("created container %s (%s): %w", name, created.ID, ErrNotOwned)
		}
		if decorate != nil {
			decorate(rec)
		}
		x.store.Put(rec)
		return created, nil
	}
	if errdefs.IsConflict(err) || errdefs.IsNotFound(err) || errdefs.IsInvalidArgument(err) {
		return container.CreateResponse{}, err // Docker refused: nothing was made
	}
	if rec := x.findCreated(ctx, name, began); rec != nil {
		klog.InfoS("Container create failed after Docker made the container", "name", name, "containerID", rec.ID, "err", err)
		return container.CreateResponse{ID: rec.ID}, err
	}
	return container.CreateResponse{}, err
}

// findCreated looks up a container a failed create may have made. Only a
// container created after the call began counts: an older one of the
// same name was not made by it.
func (x *Index) findCreated(ctx context.Context, name string, began time.Time) *store.Record {
	since := x.store.Generation()
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.opts.InspectTimeout)
	defer cancel()
	c, err := x.client.ContainerInspect(ictx, name)
	if err != nil {
		if !errdefs.IsNotFound(err) {
			klog.ErrorS(err, "Failed to look up a container a failed create may have made; a resync will index it", "name", name)
			x.requestResync()
		}
		return nil
	}
	rec := x.decode(c)
	if rec == nil || rec.CreatedAt < began.Add(-time.Second).UnixNano() {
		return nil
	}
	return x.putInspected(rec, since)
}

// inspectFromCreate is what Docker would say of a container it just
// created, in the form the decoder reads.
func inspectFromCreate(id, name string, cfg *container.Config, hc *container.HostConfig, at time.Time) container.InspectResponse {
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID:         id,
			Name:       "/" + trimSlash(name),
			Created:    at.UTC().Format(time.RFC3339Nano),
			State:      &container.State{Status: container.StateCreated},
			HostConfig: hc,
		},
		Config: cfg,
	}
}

// Start starts a container and records its new state (pid, start time)
// before returning, with its start event skipped by the loop. If Docker
// refuses the start, the record shows why (Docker stores the exit code and
// error on the container). If the write-back inspect fails, the workers
// refresh the record later, so it does not stay stale.
func (x *Index) Start(ctx context.Context, id string) (*store.Record, error) {
	defer x.beginOwnOp(ownStartKey(id))()
	sctx, cancel := context.WithTimeout(ctx, x.opts.CallTimeout)
	err := x.client.ContainerStart(sctx, id, container.StartOptions{})
	cancel()
	if err != nil {
		_, _ = x.Refresh(context.WithoutCancel(ctx), id)
		return nil, err
	}
	rec, err := x.Refresh(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("inspecting started container %s: %w", id, err)
	}
	return rec, nil
}

// Refresh re-reads one container into the index and returns its record.
// A container Docker does not know is removed from the index (the error
// is then NotFound). When the inspect fails otherwise, a detached, timed
// refresh is queued for the workers.
func (x *Index) Refresh(ctx context.Context, id string) (*store.Record, error) {
	since := x.store.Generation()
	ictx, cancel := context.WithTimeout(ctx, x.opts.InspectTimeout)
	c, err := x.client.ContainerInspect(ictx, id)
	cancel()
	if errdefs.IsNotFound(err) {
		x.forget(id)
		return nil, err
	}
	if err != nil {
		x.sched.add(id)
		return nil, err
	}
	rec := x.decode(c)
	if rec == nil {
		return nil, fmt.Errorf("container %s: %w", id, ErrNotOwned)
	}
	if rec = x.putInspected(rec, since); rec == nil {
		return nil, fmt.Errorf("container %s was removed: %w", id, errdefs.ErrNotFound)
	}
	return rec, nil
}

// Lookup finds a container by ID or unique ID prefix in the index and,
// when the index lacks it (dropped events, a resync not yet done), asks
// Docker, so that Stop and Remove never skip a container that exists. It
// returns (nil, nil) when neither knows one netshim owns.
func (x *Index) Lookup(ctx context.Context, idOrPrefix string) (*store.Record, error) {
	if idOrPrefix == "" {
		return nil, nil
	}
	rec, err := x.store.Resolve(idOrPrefix)
	if err != nil || rec != nil {
		return rec, err
	}
	rec, err = x.Refresh(ctx, idOrPrefix)
	if errdefs.IsNotFound(err) || errors.Is(err, ErrNotOwned) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("asking Docker for container %s: %w", idOrPrefix, err)
	}
	return rec, nil
}

// putInspected stores a record built from an inspect begun at generation
// since, unless the index holds newer news: the container was destroyed
// meanwhile, or its death was recorded after the inspect saw it alive (the
// events loop and an RPC each inspect and store on their own). A container
// never goes from exited back to created or running except by a new start,
// which has a later start time. It returns the record stored afterwards.
func (x *Index) putInspected(rec *store.Record, since uint64) *store.Record {
	return x.store.Apply(rec.ID, since, func(cur *store.Record) *store.Record {
		if cur != nil && olderThan(rec, cur) {
			return nil
		}
		return rec
	})
}

// olderThan says whether inspected describes an earlier moment than
// current: current has exited and inspected shows the container before
// that exit.
func olderThan(inspected, current *store.Record) bool {
	return current.State == store.StateExited && current.FinishedAt != 0 &&
		inspected.State != store.StateExited && inspected.StartedAt <= current.FinishedAt
}
