package index

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
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// Run keeps the index in sync with Docker until ctx ends: subscribe to
// events, resync, apply events; on a broken stream, start over after a
// backoff. The inspect workers live as long as Run.
func (x *Index) Run(ctx context.Context) {
	defer x.signalFirst()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		x.runWorkers(ctx)
	}()
	defer wg.Wait()

	delay := x.opts.ReconnectMinDelay
	for ctx.Err() == nil {
		// Retrying a Docker that is down is being alive (heartbeat.go).
		x.beat()
		synced, err := x.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if synced {
			delay = x.opts.ReconnectMinDelay
		}
		x.setConnected(err)
		klog.ErrorS(err, "Lost Docker events stream; reconnecting", "delay", delay)
		x.signalFirst()
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, x.opts.ReconnectMaxDelay)
	}
}

func (x *Index) eventsOptions() events.ListOptions {
	f := x.opts.Filter.Clone()
	f.Add("type", string(events.ContainerEventType))
	for _, a := range []events.Action{events.ActionCreate, events.ActionStart, events.ActionDie, events.ActionOOM, events.ActionDestroy, events.ActionRename} {
		f.Add("event", string(a))
	}
	return events.ListOptions{Filters: f}
}

// session follows one events stream until it breaks. The resync runs
// beside the loop, not in it: the stream is read from the moment it is
// open, and events applied meanwhile are newer than the listing, which
// store.Replace respects. The loop itself makes no Docker call.
func (x *Index) session(ctx context.Context) (synced bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, errs := x.client.Events(ctx, x.eventsOptions())

	resyncDone := make(chan error, 1)
	var running, rerun bool
	var lastStart time.Time
	startResync := func() {
		if running {
			rerun = true
			return
		}
		running, rerun, lastStart = true, false, time.Now()
		first := !synced
		go func() {
			err := x.resync(ctx)
			if err == nil && first && x.opts.BeforeSynced != nil {
				// Readers still wait: the service completes its own
				// state from the index before they are let in.
				x.opts.BeforeSynced(ctx)
			}
			resyncDone <- err
		}()
	}
	next := time.NewTimer(x.opts.ResyncPeriod)
	defer next.Stop()
	beat := time.NewTicker(x.beatInterval())
	defer beat.Stop()
	startResync()
	for {
		select {
		case <-ctx.Done():
			return synced, ctx.Err()
		case err := <-errs:
			if err == nil {
				err = errors.New("events stream closed")
			}
			return synced, err
		case m := <-msgs:
			x.apply(m)
			x.opts.Metrics.IndexEventApplied(eventTime(m), time.Now())
		case err := <-resyncDone:
			running = false
			x.opts.Metrics.IndexResynced(err)
			switch {
			case err != nil && !synced:
				// No trustworthy index on this stream: start over.
				return false, err
			case err != nil:
				klog.ErrorS(err, "Docker state index resync failed; retrying")
				x.setResyncErr(err)
				next.Reset(x.opts.ReconnectMaxDelay)
				continue
			case !synced:
				synced = true
				x.setConnected(nil)
				klog.InfoS("Docker state index synced", "containers", x.store.Len())
				if x.opts.OnSync != nil {
					go x.opts.OnSync(ctx)
				}
				x.signalFirst()
			default:
				x.setResyncErr(nil)
			}
			if rerun {
				next.Reset(x.opts.MinResyncGap)
			} else {
				next.Reset(x.opts.ResyncPeriod)
			}
		case <-next.C:
			startResync()
		case <-x.resyncNow:
			if running {
				rerun = true
			} else {
				next.Reset(max(0, time.Until(lastStart.Add(x.opts.MinResyncGap))))
			}
		case <-beat.C:
			if gap := x.beat(); gap > x.opts.StuckAfter {
				// While the loop did not run, dockerd may have
				// dropped events for us.
				klog.InfoS("Docker events loop was stalled; resyncing", "stalledFor", gap)
				x.requestResync()
			}
		}
	}
}

// apply updates the index from one event. Most events carry what is
// needed; the rest ask the workers for an inspect.
func (x *Index) apply(m events.Message) {
	id := m.Actor.ID
	rec, known := x.store.Get(id)
	switch m.Action {
	case events.ActionDestroy:
		x.forget(id)
		return
	case events.ActionDie:
		if known {
			exit, _ := strconv.Atoi(m.Actor.Attributes["exitCode"])
			x.store.Update(id, func(r *store.Record) {
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
			x.store.Update(id, func(r *store.Record) { r.OOMKilled = true })
			return
		}
	case events.ActionCreate:
		if known || x.isOwnOp(ownCreateKey(m.Actor.Attributes["name"])) {
			return
		}
	case events.ActionStart:
		// netshim's own starts are recorded by the starter's inspect.
		if x.isOwnOp(ownStartKey(id)) || (known && rec.Running() && rec.Pid != 0 && rec.StartedAt != 0) {
			return
		}
	}
	x.sched.add(id)
}

// resync lists netshim's containers and rebuilds the index, inspecting
// only what it does not already know in the listed state. Only a failed
// listing fails it: a container whose inspect fails keeps what the index
// knew with the listed state, or is indexed from its listing, and a later
// event or resync completes it.
func (x *Index) resync(ctx context.Context) error {
	since := x.store.Generation()
	lctx, cancel := context.WithTimeout(ctx, x.opts.ListTimeout)
	list, err := x.client.ContainerList(lctx, container.ListOptions{All: true, Filters: x.opts.Filter})
	cancel()
	if err != nil {
		return fmt.Errorf("listing containers: %w", err)
	}
	recs := make([]*store.Record, len(list))
	sem := make(chan struct{}, x.opts.Workers)
	var wg sync.WaitGroup
	for i, s := range list {
		listed := x.decode(inspectFromSummary(s))
		if listed == nil {
			continue
		}
		old, ok := x.store.Get(s.ID)
		if ok && old.State == listed.State {
			recs[i] = old
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			recs[i] = x.resyncOne(ctx, s.ID, old, listed)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	kept := recs[:0]
	for _, r := range recs {
		if r != nil {
			kept = append(kept, r)
		}
	}
	x.store.Replace(kept, since)
	return nil
}

// resyncOne inspects a container the index has wrong. When the inspect
// fails, the record keeps what the index knew with the listed state (or
// is what the listing says): the container stays visible, and the loop
// does not wait on it.
func (x *Index) resyncOne(ctx context.Context, id string, old, listed *store.Record) *store.Record {
	ictx, cancel := context.WithTimeout(ctx, x.opts.InspectTimeout)
	c, err := x.client.ContainerInspect(ictx, id)
	cancel()
	if errdefs.IsNotFound(err) {
		return nil // removed since the listing
	}
	if err == nil {
		return x.decode(c)
	}
	klog.ErrorS(err, "Failed to inspect container during resync; indexing what the listing says", "containerID", id)
	if old == nil {
		return listed
	}
	r := *old
	r.State = listed.State
	if r.State != store.StateRunning {
		r.Pid = 0
	}
	return &r
}

// inspectFromSummary is what a listing says of a container, in the form
// the decoder reads.
func inspectFromSummary(s container.Summary) container.InspectResponse {
	name := ""
	if len(s.Names) > 0 {
		name = s.Names[0]
	}
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID:      s.ID,
			Name:    name,
			Image:   s.ImageID,
			Created: time.Unix(s.Created, 0).UTC().Format(time.RFC3339Nano),
			State:   &container.State{Status: s.State, Running: s.State == container.StateRunning},
		},
		Config: &container.Config{Labels: s.Labels, Image: s.Image},
	}
}

// eventTime is when Docker says the event happened, or zero if it does not
// say.
func eventTime(m events.Message) time.Time {
	switch {
	case m.TimeNano != 0:
		return time.Unix(0, m.TimeNano)
	case m.Time != 0:
		return time.Unix(m.Time, 0)
	}
	return time.Time{}
}
