package dockerservice

import (
	"context"

	"github.com/docker/docker/api/types/container"
	dnetwork "github.com/docker/docker/api/types/network"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// Docker emits a container's create and start events before it answers the
// create and start calls. Without care, the events loop would inspect each
// of netshim's own containers twice more while the caller is about to
// record them itself (after create, and with its post-start inspect).
// ownOps marks those operations in flight so the loop skips them: the
// writer, not the loop, makes the index current.

func ownCreateKey(name string) string { return "name:" + trimSlash(name) }
func ownStartKey(id string) string    { return "start:" + id }

// beginOwnOp marks an operation in flight until the returned func runs.
func (ds *DockerService) beginOwnOp(key string) func() {
	ds.mu.Lock()
	ds.ownOps[key]++
	ds.mu.Unlock()
	return func() {
		ds.mu.Lock()
		if ds.ownOps[key]--; ds.ownOps[key] <= 0 {
			delete(ds.ownOps, key)
		}
		ds.mu.Unlock()
	}
}

func (ds *DockerService) isOwnOp(key string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.ownOps[key] > 0
}

// createOwned is ContainerCreate followed by the synchronous index write,
// with the create event suppressed in between. decorate, if set, adds what
// the caller knows to the record before it is stored.
func (ds *DockerService) createOwned(ctx context.Context, config *container.Config, hc *container.HostConfig, name string, decorate func(*store.Record)) (container.CreateResponse, error) {
	defer ds.beginOwnOp(ownCreateKey(name))()
	created, err := ds.client.ContainerCreate(ctx, config, hc, (*dnetwork.NetworkingConfig)(nil), nil, name)
	if err == nil {
		rec := recordFromCreate(created.ID, name, config)
		if decorate != nil {
			decorate(rec)
		}
		ds.store.Put(rec)
	}
	return created, err
}
