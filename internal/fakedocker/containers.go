package fakedocker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	dnetwork "github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// errInspect is what an inspect State.FailInspect names fails with: not a
// not-found, so the caller cannot conclude the container is gone.
var errInspect = errors.New("inspect failed: connection reset by peer")

func notFound(ref string) error {
	return errdefs.ErrNotFound.WithMessage("No such container: " + ref)
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// findLocked resolves an ID, a unique ID prefix or a name, as Docker does.
// Called with f.mu held.
func (f *Engine) findLocked(ref string) *container.InspectResponse {
	if c, ok := f.s.Containers[ref]; ok {
		return c
	}
	var match *container.InspectResponse
	for id, c := range f.s.Containers {
		if c.Name == "/"+ref || strings.HasPrefix(id, ref) {
			if match != nil {
				return nil // ambiguous
			}
			match = c
		}
	}
	return match
}

// Container describes a container a test puts into the engine with
// AddContainer.
type Container struct {
	// ID is the container's ID; Name its name without Docker's leading
	// slash ("" for the ID).
	ID, Name string
	// Status is Docker's state: "created", "running" or "exited". A
	// running container gets a pid and a start time.
	Status string
	Labels map[string]string
	// Created is when it was made; zero for now.
	Created time.Time
	// Tty is whether the container has a terminal, which decides how
	// attaching to it streams.
	Tty bool
	// Attach, if set, plays the container's process on an attach
	// connection (State.Attach).
	Attach func(p *Proc)
}

// AddContainer stores a container made behind the client's back, sending
// no event: one that existed before the code under test connected, or
// whose event was lost.
func (f *Engine) AddContainer(c Container) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := c.Name
	if name == "" {
		name = c.ID
	}
	created := c.Created
	if created.IsZero() {
		created = time.Now()
	}
	st := &container.State{Status: container.ContainerState(c.Status)}
	if c.Status == "running" {
		f.nextPid++
		st.Running, st.Pid, st.StartedAt = true, f.nextPid, now()
	}
	f.s.Containers[c.ID] = &container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: c.ID, Name: "/" + name, Created: created.UTC().Format(time.RFC3339Nano), State: st, HostConfig: &container.HostConfig{}},
		Config:            &container.Config{Labels: maps.Clone(c.Labels), Tty: c.Tty},
	}
	if c.Attach != nil {
		f.s.Attach[c.ID] = c.Attach
	}
}

// SetStatus changes a container's state with no event, as when its
// event was lost: only a resync can tell.
func (f *Engine) SetStatus(id, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.s.Containers[id].State
	st.Status, st.Running = container.ContainerState(status), status == "running"
	if !st.Running {
		st.Pid = 0
	}
}

// DropContainer deletes a container with no event (a lost destroy).
func (f *Engine) DropContainer(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.s.Containers, id)
}

// RemoveBehindBack deletes a container as `docker rm -f` would, with the
// die (if it ran) and destroy events.
func (f *Engine) RemoveBehindBack(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.s.Containers[id]; ok && c.State.Running {
		c.State.Status, c.State.Running, c.State.Pid, c.State.ExitCode = "exited", false, 0, 137
		f.emitLocked(events.ActionDie, id, map[string]string{"exitCode": "137"})
	}
	delete(f.s.Containers, id)
	f.emitLocked(events.ActionDestroy, id, nil)
}

// KillBehindBack kills a container's process as `docker kill` would.
func (f *Engine) KillBehindBack(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.s.Containers[id]
	c.State.Status, c.State.Running, c.State.Pid, c.State.ExitCode = "exited", false, 0, 137
	f.emitLocked(events.ActionDie, id, map[string]string{"exitCode": "137"})
}

// ExitBehindBack makes a running container exit as its process would:
// optionally OOM-killed first, then dead with an exit code. The events
// carry what Docker's do.
func (f *Engine) ExitBehindBack(id string, code int, oom bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.s.Containers[id]
	if oom {
		c.State.OOMKilled = true
		f.emitLocked(events.ActionOOM, id, nil)
	}
	c.State.Status, c.State.Running, c.State.Pid, c.State.ExitCode = "exited", false, 0, code
	c.State.FinishedAt = now()
	f.emitLocked(events.ActionDie, id, map[string]string{"exitCode": strconv.Itoa(code)})
}

// ContainerIDs returns the IDs of the engine's containers, to compare
// what a test left behind.
func (f *Engine) ContainerIDs() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]bool, len(f.s.Containers))
	for id := range f.s.Containers {
		out[id] = true
	}
	return out
}

// HasContainer reports whether ref (ID, unique prefix or name) names a
// container, without logging a call.
func (f *Engine) HasContainer(ref string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.findLocked(ref) != nil
}

// GateInspect makes inspects of ref wait until the returned channel is
// closed (State.InspectGates).
func (f *Engine) GateInspect(ref string) chan struct{} {
	g := make(chan struct{})
	f.Do(func(s *State) { s.InspectGates[ref] = g })
	return g
}

// InspectCount returns how many times ref was inspected.
func (f *Engine) InspectCount(ref string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s.Inspects[ref]
}

// ContainerCreate makes a container, merging the image's labels into its
// own as Docker does, and sends its create event.
func (f *Engine) ContainerCreate(_ context.Context, cfg *container.Config, hc *container.HostConfig, _ *dnetwork.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
	f.Record("ContainerCreate " + name)
	f.mu.Lock()
	defer f.mu.Unlock()
	imgLabels, ok := f.s.Images[cfg.Image]
	if !ok && !f.s.AnyImage {
		return container.CreateResponse{}, errdefs.ErrNotFound.WithMessage("No such image: " + cfg.Image)
	}
	for _, c := range f.s.Containers {
		if c.Name == "/"+name {
			return container.CreateResponse{}, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Conflict. The container name %q is already in use by container %q", "/"+name, c.ID))
		}
	}
	if f.s.CreateErr != nil && !f.s.CreateMakes {
		return container.CreateResponse{}, f.s.CreateErr
	}
	var id string
	if f.s.NewID != nil {
		id = f.s.NewID(name)
	} else {
		f.nextID++
		sum := sha256.Sum256([]byte(strconv.Itoa(f.nextID)))
		id = hex.EncodeToString(sum[:])
	}
	labels := maps.Clone(imgLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, cfg.Labels)
	c := *cfg
	c.Labels = labels
	var h container.HostConfig
	if hc != nil {
		h = *hc
	}
	f.s.Containers[id] = &container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID: id, Name: "/" + name, Created: now(),
			State: &container.State{Status: "created"}, HostConfig: &h, Image: cfg.Image,
		},
		Config: &c,
	}
	f.emitLocked(events.ActionCreate, id, map[string]string{"name": name})
	if f.s.CreateErr != nil {
		return container.CreateResponse{}, f.s.CreateErr
	}
	return container.CreateResponse{ID: id}, nil
}

// ContainerStart starts a container and sends its start event; see
// State.OnStart and State.StartErr.
func (f *Engine) ContainerStart(_ context.Context, id string, _ container.StartOptions) error {
	f.Record("ContainerStart " + id)
	f.mu.Lock()
	onStart := f.s.OnStart
	f.mu.Unlock()
	if onStart != nil {
		onStart(id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.findLocked(id)
	if c == nil {
		return notFound(id)
	}
	if f.s.StartErr != nil {
		c.State.Status, c.State.ExitCode = "exited", 128
		return f.s.StartErr
	}
	f.nextPid++
	c.State.Status, c.State.Running, c.State.Pid = "running", true, f.nextPid
	c.State.StartedAt = now()
	f.emitLocked(events.ActionStart, c.ID, nil)
	return nil
}

// ContainerStop stops a running container (exit code 0, die event) and
// records the grace period asked for.
func (f *Engine) ContainerStop(_ context.Context, id string, opts container.StopOptions) error {
	f.Record("ContainerStop " + id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if opts.Timeout != nil {
		f.s.StopTimeouts[id] = *opts.Timeout
	}
	c := f.findLocked(id)
	if c == nil {
		return notFound(id)
	}
	if f.s.StopErr != nil {
		return f.s.StopErr
	}
	if c.State.Running {
		c.State.Status, c.State.Running, c.State.Pid = "exited", false, 0
		c.State.FinishedAt = now()
		f.emitLocked(events.ActionDie, c.ID, map[string]string{"exitCode": "0"})
	}
	return nil
}

// ContainerRemove removes a container, refusing a running one unless
// forced, as Docker does.
func (f *Engine) ContainerRemove(_ context.Context, id string, opts container.RemoveOptions) error {
	f.Record("ContainerRemove " + id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.s.RemoveErr != nil {
		return f.s.RemoveErr
	}
	c := f.findLocked(id)
	if c == nil {
		return notFound(id)
	}
	if c.State.Running && !opts.Force {
		return errdefs.ErrConflict.WithMessage("container is running")
	}
	if c.State.Running {
		c.State.Running = false
		f.emitLocked(events.ActionDie, c.ID, map[string]string{"exitCode": "137"})
	}
	delete(f.s.Containers, c.ID)
	f.emitLocked(events.ActionDestroy, c.ID, nil)
	return nil
}

// ContainerInspect returns a copy of the container's state; see
// State.FailInspect and State.InspectGates.
func (f *Engine) ContainerInspect(ctx context.Context, ref string) (container.InspectResponse, error) {
	if f.sawBarrier(ref) {
		return container.InspectResponse{}, notFound(ref)
	}
	f.Record("ContainerInspect " + ref)
	if strings.TrimSpace(ref) == "" {
		// As Docker's client, which refuses a blank ID before any request.
		return container.InspectResponse{}, errdefs.ErrInvalidArgument.WithMessage("invalid container name or ID: value is empty")
	}
	f.mu.Lock()
	f.s.Inspects[ref]++
	var snap container.InspectResponse
	found := f.findLocked(ref)
	if found != nil {
		snap = *found
		base, st := *found.ContainerJSONBase, *found.State
		base.State = &st
		snap.ContainerJSONBase = &base
	}
	gate, fail := f.s.InspectGates[ref], f.s.FailInspect[ref] > 0
	if fail {
		f.s.FailInspect[ref]--
	}
	f.mu.Unlock()
	if err := waitGate(ctx, gate); err != nil {
		return container.InspectResponse{}, err
	}
	switch {
	case fail:
		return container.InspectResponse{}, errInspect
	case found == nil:
		return container.InspectResponse{}, notFound(ref)
	}
	return snap, nil
}

// ContainerList lists the containers, by ID, filtered by All and the id
// and label filters, as Docker does.
func (f *Engine) ContainerList(_ context.Context, opts container.ListOptions) ([]container.Summary, error) {
	f.Record("ContainerList")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.s.Down {
		return nil, ErrUnreachable
	}
	if f.s.ListErr != nil {
		return nil, f.s.ListErr
	}
	var out []container.Summary
	for id, c := range f.s.Containers {
		if !opts.All && !c.State.Running {
			continue
		}
		if !matchFilters(opts, id, c.Config.Labels) {
			continue
		}
		created, _ := time.Parse(time.RFC3339Nano, c.Created)
		out = append(out, container.Summary{ID: id, Names: []string{c.Name}, Labels: c.Config.Labels, State: c.State.Status, Created: created.Unix(), Image: c.Image})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func matchFilters(opts container.ListOptions, id string, labels map[string]string) bool {
	for _, v := range opts.Filters.Get("id") {
		if !strings.HasPrefix(id, v) {
			return false
		}
	}
	for _, l := range opts.Filters.Get("label") {
		k, v, hasValue := strings.Cut(l, "=")
		got, ok := labels[k]
		if !ok || (hasValue && got != v) {
			return false
		}
	}
	return true
}

// ContainerUpdate changes a container's resources; like Docker, it leaves
// a zero field unchanged.
func (f *Engine) ContainerUpdate(_ context.Context, id string, u container.UpdateConfig) (container.UpdateResponse, error) {
	f.Record("ContainerUpdate " + id)
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.findLocked(id)
	if c == nil {
		return container.UpdateResponse{}, notFound(id)
	}
	if f.s.UpdateErr != nil {
		return container.UpdateResponse{}, f.s.UpdateErr
	}
	r := &c.HostConfig.Resources
	for _, p := range []struct {
		dst *int64
		v   int64
	}{{&r.CPUPeriod, u.CPUPeriod}, {&r.CPUQuota, u.CPUQuota}, {&r.CPUShares, u.CPUShares}, {&r.Memory, u.Memory}, {&r.MemorySwap, u.MemorySwap}} {
		if p.v != 0 {
			*p.dst = p.v
		}
	}
	if u.CpusetCpus != "" {
		r.CpusetCpus = u.CpusetCpus
	}
	if u.CpusetMems != "" {
		r.CpusetMems = u.CpusetMems
	}
	return container.UpdateResponse{}, nil
}

// logEntry is one message of a container's Docker log.
type logEntry struct {
	stderr bool
	ts     time.Time
	text   string
}

// AddLog appends a message to a container's Docker log (ContainerLogs).
func (f *Engine) AddLog(id string, stderr bool, text string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs[id] = append(f.logs[id], logEntry{stderr: stderr, ts: time.Now().UTC(), text: text})
}

// ContainerLogs streams the container's log with timestamps, multiplexed
// (the fake has no TTY logs). With Follow it keeps the stream open while
// the container runs, sending what is added meanwhile.
func (f *Engine) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error) {
	f.Record("ContainerLogs " + id)
	f.mu.Lock()
	c := f.findLocked(id)
	f.mu.Unlock()
	if c == nil {
		return nil, notFound(id)
	}
	pr, pw := io.Pipe()
	go func() {
		sent := 0
		for {
			f.mu.Lock()
			entries := append([]logEntry(nil), f.logs[c.ID][sent:]...)
			running := c.State.Running
			f.mu.Unlock()
			for _, e := range entries {
				stream := stdcopy.Stdout
				if e.stderr {
					stream = stdcopy.Stderr
				}
				line := e.ts.Format("2006-01-02T15:04:05.000000000Z07:00") + " " + e.text
				if _, err := stdcopy.NewStdWriter(pw, stream).Write([]byte(line)); err != nil {
					return
				}
			}
			sent += len(entries)
			if !opts.Follow || !running || ctx.Err() != nil {
				pw.Close()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return pr, nil
}
