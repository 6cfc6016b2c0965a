package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// The index is fed by Docker's events stream; a full resync runs at
// start-up, whenever the stream reconnects (dockerd restarted) and every
// resyncPeriod as a safety net. A resync costs one ContainerList plus an
// inspect for each container whose state the index has wrong.
const (
	resyncPeriod      = 10 * time.Minute
	reconnectMinDelay = 100 * time.Millisecond
	reconnectMaxDelay = 2 * time.Second
)

// dockerHealth is the engine's health as the events stream sees it: up
// while the stream is connected, down (with the reason) from the moment it
// breaks until it is re-established and the index resynced. Status answers
// from it, so kubelet's polling costs no ping.
type dockerHealth struct {
	mu      sync.RWMutex
	ready   bool
	synced  bool // at least one full resync has completed
	message string
}

func (h *dockerHealth) set(ready bool, message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready, h.message = ready, message
	if ready {
		h.synced = true
	}
}

func (h *dockerHealth) get() (ready, synced bool, message string) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.ready, h.synced, h.message
}

// ownedFilter selects the containers netshim owns.
func ownedFilter() filters.Args { return filters.NewArgs(filters.Arg("label", labelType)) }

// Start keeps the index in sync with Docker until ctx ends. It returns once
// the first sync has been tried, so a daemon started with dockerd up serves
// correct answers from its first RPC; with dockerd down it keeps retrying
// in the background and Status reports RuntimeReady=false.
func (ds *DockerService) Start(ctx context.Context) {
	first := make(chan struct{})
	go ds.watch(ctx, first)
	select {
	case <-first:
	case <-ctx.Done():
	}
}

// watch runs the events loop: subscribe, then resync (so nothing that
// happens between the two is missed), then apply events until the stream
// breaks; then start over after a backoff.
func (ds *DockerService) watch(ctx context.Context, first chan struct{}) {
	delay := reconnectMinDelay
	signalFirst := func() {
		if first != nil {
			close(first)
			first = nil
		}
	}
	defer signalFirst()
	for ctx.Err() == nil {
		streamCtx, cancel := context.WithCancel(ctx)
		msgs, errs := ds.client.Events(streamCtx, eventsOptions())
		err := ds.resync(streamCtx)
		if err == nil {
			ds.refreshVersion(streamCtx)
			ds.health.set(true, "")
			klog.InfoS("Docker state index synced", "containers", ds.store.Len())
			go ds.resumeContainerLogs(streamCtx)
			// Once the index is known, free what dead sandboxes still
			// hold (sandbox_teardown_retry.go).
			ds.startupTearDown.Do(func() { go ds.retryPendingTearDowns(ctx) })
			delay = reconnectMinDelay
			signalFirst()
			err = ds.consumeEvents(streamCtx, msgs, errs)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		ds.health.set(false, fmt.Sprintf("docker: %v", err))
		klog.ErrorS(err, "Lost Docker events stream; reconnecting", "delay", delay)
		signalFirst()
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, reconnectMaxDelay)
	}
}

func eventsOptions() events.ListOptions {
	f := ownedFilter()
	f.Add("type", string(events.ContainerEventType))
	for _, a := range []events.Action{events.ActionCreate, events.ActionStart, events.ActionDie, events.ActionOOM, events.ActionDestroy, events.ActionRename} {
		f.Add("event", string(a))
	}
	return events.ListOptions{Filters: f}
}

// consumeEvents applies events until the stream fails; it also runs the
// periodic safety resync.
func (ds *DockerService) consumeEvents(ctx context.Context, msgs <-chan events.Message, errs <-chan error) error {
	ticker := time.NewTicker(resyncPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			if err == nil {
				err = errors.New("events stream closed")
			}
			return err
		case <-ticker.C:
			if err := ds.resync(ctx); err != nil {
				return fmt.Errorf("periodic resync: %w", err)
			}
		case m := <-msgs:
			ds.applyEvent(ctx, m)
		}
	}
}

// applyEvent updates the index from one event. Most events carry what is
// needed; an inspect is made only for containers the index does not know
// yet (created by another netshim, or before a resync).
func (ds *DockerService) applyEvent(ctx context.Context, m events.Message) {
	id := m.Actor.ID
	rec, known := ds.store.Get(id)
	switch m.Action {
	case events.ActionDestroy:
		ds.store.Delete(id)
		return
	case events.ActionDie:
		if known {
			exit, _ := strconv.Atoi(m.Actor.Attributes["exitCode"])
			ds.store.Update(id, func(r *store.Record) {
				r.State, r.Pid, r.ExitCode = store.StateExited, 0, exit
				if r.FinishedAt == 0 || r.FinishedAt < r.StartedAt {
					r.FinishedAt = m.TimeNano
				}
			})
			// A workload container's status needs what the event lacks
			// (Docker's exact finish time, OOMKilled, error): one inspect
			// per death.
			if rec.Kind != store.KindContainer {
				return
			}
		}
	case events.ActionOOM:
		if known {
			ds.store.Update(id, func(r *store.Record) { r.OOMKilled = true })
			return
		}
	case events.ActionCreate:
		if known || ds.isOwnOp(ownCreateKey(m.Actor.Attributes["name"])) {
			return
		}
	case events.ActionStart:
		// netshim's own starts are recorded by the starter's inspect.
		if ds.isOwnOp(ownStartKey(id)) || (known && rec.Running() && rec.Pid != 0 && rec.StartedAt != 0) {
			return
		}
	}
	ds.refreshRecord(ctx, id)
}

// refreshRecord re-reads one container into the index.
func (ds *DockerService) refreshRecord(ctx context.Context, id string) {
	c, err := ds.client.ContainerInspect(ctx, id)
	if errdefs.IsNotFound(err) {
		ds.store.Delete(id)
		return
	}
	if err != nil {
		klog.ErrorS(err, "Failed to inspect container for the state index", "containerID", id)
		return
	}
	if rec := recordFromInspect(c); rec != nil {
		ds.putInspected(rec)
	}
}

// resync lists netshim's containers and rebuilds the index, inspecting
// only what it does not already know in the listed state.
func (ds *DockerService) resync(ctx context.Context) error {
	since := ds.store.Generation()
	list, err := ds.client.ContainerList(ctx, container.ListOptions{All: true, Filters: ownedFilter()})
	if err != nil {
		return fmt.Errorf("listing containers: %w", err)
	}
	recs := make([]*store.Record, 0, len(list))
	for _, s := range list {
		if old, ok := ds.store.Get(s.ID); ok && dockerStateMatches(old, s.State) {
			recs = append(recs, old)
			continue
		}
		c, err := ds.client.ContainerInspect(ctx, s.ID)
		if errdefs.IsNotFound(err) {
			continue // removed since the listing
		}
		if err != nil {
			return fmt.Errorf("inspecting container %s: %w", s.ID, err)
		}
		if rec := recordFromInspect(c); rec != nil {
			recs = append(recs, rec)
		}
	}
	ds.store.Replace(recs, since)
	return nil
}

// dockerStateMatches says whether a listed container's state string is
// what the record already says.
func dockerStateMatches(r *store.Record, state container.ContainerState) bool {
	return r.State == stateFromDocker(string(state), false)
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
	labels := c.Config.Labels
	kind, extra := decodeOwned(c.ID, labels)
	if kind == 0 {
		return nil
	}
	r := &store.Record{
		ID:           c.ID,
		Kind:         kind,
		Name:         trimSlash(c.Name),
		SandboxID:    labels[labelSandboxID],
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
	r.Extra = withHostConfig(extra, c.HostConfig)
	return r
}

func trimSlash(name string) string {
	if len(name) > 0 && name[0] == '/' {
		return name[1:]
	}
	return name
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
	v, err := ds.client.ServerVersion(ctx)
	if err != nil {
		klog.ErrorS(err, "Failed to read Docker's version")
		return
	}
	ds.mu.Lock()
	ds.dockerVersion = v.Version
	ds.mu.Unlock()
}
