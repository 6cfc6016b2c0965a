package dockerservice

import (
	"context"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/index"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/stats"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// The index (pkg/dockerservice/index) follows Docker's events stream and
// resyncs from listings; this file wires it to the service: it decodes
// what Docker says into records (the decoder below), and starts what needs
// a synced index (log followers, teardown retries) each time it syncs.

// versionTimeout bounds the version read made when the stream connects.
const versionTimeout = 10 * time.Second

// ownedFilter selects the containers netshim owns. Taking over
// cri-dockerd's containers, it cannot select by label: Docker ANDs label
// filters, and cri-dockerd's containers carry none of netshim's. The
// listings and events then cover every container, and the decoder keeps
// the pods' (on a Kubernetes node, nearly all of them).
func ownedFilter(adopt bool) filters.Args {
	if adopt {
		return filters.NewArgs()
	}
	return filters.NewArgs(filters.Arg("label", labelcodec.LabelType))
}

// newIndex builds the index over Docker with this package's decoder.
func (ds *DockerService) newIndex() *index.Index {
	decode := recordFromInspect
	if ds.cfg.AdoptCRIDockerd {
		decode = recordFromInspectAdopting
	}
	return index.New(ds.engine.Client, decode, index.Options{Filter: ownedFilter(ds.cfg.AdoptCRIDockerd), BeforeSynced: ds.beforeIndexSynced, OnSync: ds.onIndexSync, Metrics: ds.cfg.Metrics})
}

// Start keeps the index in sync with Docker until ctx ends. It returns once
// the first sync has been tried, so a daemon started with dockerd up serves
// correct answers from its first RPC; with dockerd down it keeps retrying
// in the background and Status reports RuntimeReady=false.
func (ds *DockerService) Start(ctx context.Context) {
	go ds.index.Run(ctx)
	ds.containers.layers.Start(ctx) // pkg/dockerservice/stats
	go ds.events.Run(ctx)
	go func() {
		select {
		case <-ds.index.SyncedCh():
			// Once the index is known, free what dead sandboxes still
			// hold (sandbox_teardown_retry.go).
			ds.startup.tearDown.Do(func() { ds.retryPendingTearDowns(ctx) })
		case <-ctx.Done():
		}
	}()
	select {
	case <-ds.index.FirstSync():
	case <-ctx.Done():
	}
}

// beforeIndexSynced runs each time a new events stream has synced the
// index, before readers are let in; ctx ends with that stream. The first
// time, the pods cri-dockerd left are taken over (adopt.go, with
// --adopt-cri-dockerd) and sandboxes whose checkpoint could not be loaded
// are rebuilt (checkpoint_recover.go), so that no reader sees them without
// one; every
// time, log copies are marked and resumed (container_log.go), so that no
// exit is reported before its log is drained.
func (ds *DockerService) beforeIndexSynced(ctx context.Context) {
	ds.startup.recover.Do(func() {
		if ds.cfg.AdoptCRIDockerd {
			ds.adoptCRIDockerd(context.WithoutCancel(ctx))
		}
		ds.recoverCheckpoints(context.WithoutCancel(ctx))
		ds.sweepPinnedNetNS() // sandbox_netns.go
	})
	ds.resumeContainerLogs(ctx) // marks, then works in the background
}

// onIndexSync runs, in its own goroutine, each time a new events stream
// has synced the index; ctx ends with that stream.
func (ds *DockerService) onIndexSync(ctx context.Context) {
	// A new stream may be a new dockerd: what was read of the old one's
	// settings is read again (pkg/dockerservice/images, fsinfo.go).
	ds.engine.NextSession()
	ds.refreshVersion(ctx)
	nctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	if _, err := ds.engine.Negotiate(nctx); err != nil {
		klog.ErrorS(err, "Failed to negotiate the Docker API version; the next container create retries")
	}
}

// createOwned creates a container through the index, which records it
// before returning. A create that failed after Docker made the container
// (the call timed out) is undone here: such a container was never
// reported to kubelet, and its name would block the retry.
func (ds *DockerService) createOwned(ctx context.Context, config *container.Config, hc *container.HostConfig, name string, decorate func(*store.Record)) (container.CreateResponse, error) {
	created, err := ds.index.Create(ctx, config, hc, name, decorate)
	if err != nil && created.ID != "" {
		rctx, cancel := context.WithTimeout(backgroundCtx(ctx), cleanupTimeout)
		defer cancel()
		if rerr := ds.engine.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true}); rerr != nil && !errdefs.IsNotFound(rerr) {
			klog.FromContext(ctx).Error(rerr, "Failed to remove a container whose create failed; it stays listed for kubelet to remove", "name", name, "containerID", created.ID)
			return container.CreateResponse{}, err
		}
		ds.store().Delete(created.ID)
		return container.CreateResponse{}, err
	}
	return created, err
}

// refreshRecord re-reads one container into the index (timed; on failure
// the index refreshes it later).
func (ds *DockerService) refreshRecord(ctx context.Context, id string) {
	if _, err := ds.index.Refresh(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "Failed to inspect container for the state index", "containerID", id)
	}
}

func stateFromDocker(status string, running bool) store.State {
	switch {
	case running || status == "running" || status == "paused" || status == "restarting":
		return store.StateRunning
	case status == "created":
		return store.StateCreated
	case status == "exited" || status == "dead" || status == "removing":
		return store.StateExited
	}
	return store.StateUnknown
}

// recordFromInspect turns a Docker inspect into an index record, or nil
// for a container netshim does not own.
func recordFromInspect(c container.InspectResponse) *store.Record {
	if c.ContainerJSONBase == nil || c.Config == nil {
		return nil
	}
	sb, ctr := labelcodec.Decode(c.ID, c.Config.Labels)
	if sb == nil && ctr == nil {
		return nil
	}
	return newRecord(c, sb, ctr, c.Config.Labels[labelcodec.LabelSandboxID])
}

// recordFromInspectAdopting is recordFromInspect that also takes the
// sandboxes and containers cri-dockerd made (--adopt-cri-dockerd). A
// container with netshim's labels is netshim's, whatever else it says.
func recordFromInspectAdopting(c container.InspectResponse) *store.Record {
	if c.ContainerJSONBase == nil || c.Config == nil {
		return nil
	}
	if labelcodec.Claimed(c.Config.Labels) {
		return recordFromInspect(c)
	}
	sb, ctr, err := labelcodec.DecodeCRIDockerd(c)
	if err != nil {
		klog.InfoS("Ignoring a container labelled as cri-dockerd's: its name or labels are not what cri-dockerd writes", "containerID", c.ID, "err", err)
		return nil
	}
	switch {
	case sb != nil:
		return newRecord(c, sb, nil, "")
	case ctr != nil:
		return newRecord(c, nil, ctr, c.Config.Labels[labelcodec.CRIDockerdLabelSandboxID])
	}
	return nil
}

// withLimits is a container's decoded labels completed with its current
// limits, from its HostConfig: UpdateContainerResources changes them, and
// labels cannot follow. Either nil leaves ctr as it is.
func withLimits(ctr *labelcodec.Container, hc *container.HostConfig) *labelcodec.Container {
	if ctr == nil || hc == nil {
		return ctr
	}
	return ctr.WithResources(dockerspec.ResourcesFromHostConfig(hc))
}

// newRecord is the index record of a sandbox (sb set) or a workload
// container (ctr set), with its decoded labels.
func newRecord(c container.InspectResponse, sb *labelcodec.Sandbox, ctr *labelcodec.Container, sandboxID string) *store.Record {
	labels := c.Config.Labels
	kind := store.KindSandbox
	if ctr != nil {
		kind = store.KindContainer
		ctr = withLimits(ctr, c.HostConfig)
	}
	r := &store.Record{
		ID:           c.ID,
		Kind:         kind,
		Sandbox:      sb,
		Container:    ctr,
		Name:         strings.TrimPrefix(c.Name, "/"),
		SandboxID:    sandboxID,
		DockerLabels: labels,
		Image:        c.Config.Image,
		ImageID:      c.Image,
		CreatedAt:    parseDockerTime(c.Created),
	}
	if st := c.State; st != nil {
		r.State = stateFromDocker(string(st.Status), st.Running)
		r.Pid = st.Pid
		r.StartedAt = parseDockerTime(st.StartedAt)
		r.FinishedAt = parseDockerTime(st.FinishedAt)
		r.ExitCode = st.ExitCode
		r.OOMKilled = st.OOMKilled
		r.Error = st.Error
	}
	r.WritableLayerDir = stats.WritableLayerDir(c)
	return r
}

// parseDockerTime parses Docker's RFC 3339 timestamps; Docker's zero time
// ("0001-01-01T00:00:00Z") and garbage give 0.
func parseDockerTime(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return 0
	}
	return t.UnixNano()
}

// refreshVersion caches the engine version for Version.
func (ds *DockerService) refreshVersion(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	v, err := ds.engine.ServerVersion(ctx)
	if err != nil {
		klog.ErrorS(err, "Failed to read Docker's version")
		return
	}
	ds.engine.SetEngineVersion(v.Version)
}
