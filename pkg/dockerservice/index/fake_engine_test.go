package index

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	dnetwork "github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

const testLabel = "test.type"

// fakeEngine is a Docker engine reduced to what the index uses, with
// knobs to make calls hang or fail.
type fakeEngine struct {
	mu         sync.Mutex
	containers map[string]*container.InspectResponse
	subs       []chan events.Message
	nextPid    int
	// gates make inspects of an ID block (after reading the state, as a
	// slow dockerd would answer with what it saw) until closed or the
	// caller's deadline.
	gates map[string]chan struct{}
	// failInspect makes the next n inspects of an ID fail.
	failInspect map[string]int
	inspects    map[string]int
	listErr     error
	// createErr makes creates fail; with createMakes the container is
	// made anyway (the client timed out after Docker did the work).
	createErr   error
	createMakes bool
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{
		containers:  map[string]*container.InspectResponse{},
		gates:       map[string]chan struct{}{},
		failInspect: map[string]int{},
		inspects:    map[string]int{},
	}
}

// add makes a container behind the index's back, with no event.
func (f *fakeEngine) add(id, kind, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addLocked(id, "/"+id, kind, status, time.Now())
}

func (f *fakeEngine) addLocked(id, name, kind, status string, created time.Time) {
	st := &container.State{Status: container.ContainerState(status)}
	if status == "running" {
		f.nextPid++
		st.Running, st.Pid, st.StartedAt = true, f.nextPid, time.Now().UTC().Format(time.RFC3339Nano)
	}
	f.containers[id] = &container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: id, Name: name, Created: created.UTC().Format(time.RFC3339Nano), State: st},
		Config:            &container.Config{Labels: map[string]string{testLabel: kind}},
	}
}

// setState changes a container's state with no event (a dropped one).
func (f *fakeEngine) setState(id, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.containers[id].State
	st.Status, st.Running = container.ContainerState(status), status == "running"
	if !st.Running {
		st.Pid = 0
	}
}

func (f *fakeEngine) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.containers, id)
}

// emit sends an event to every subscriber; like dockerd, it drops it for
// a subscriber whose buffer is full.
func (f *fakeEngine) emit(action events.Action, id string, attrs map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.emitLocked(action, id, attrs)
}

func (f *fakeEngine) emitLocked(action events.Action, id string, attrs map[string]string) {
	m := events.Message{Type: events.ContainerEventType, Action: action, Actor: events.Actor{ID: id, Attributes: attrs}, TimeNano: time.Now().UnixNano()}
	for _, s := range f.subs {
		select {
		case s <- m:
		default:
		}
	}
}

func (f *fakeEngine) gate(id string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := make(chan struct{})
	f.gates[id] = g
	return g
}

func (f *fakeEngine) inspectCount(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inspects[id]
}

func (f *fakeEngine) ContainerCreate(_ context.Context, cfg *container.Config, _ *container.HostConfig, _ *dnetwork.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.Name == "/"+name {
			return container.CreateResponse{}, errdefs.ErrConflict.WithMessage("name in use")
		}
	}
	if f.createErr != nil && !f.createMakes {
		return container.CreateResponse{}, f.createErr
	}
	id := "id-" + name
	f.addLocked(id, "/"+name, cfg.Labels[testLabel], "created", time.Now())
	f.emitLocked(events.ActionCreate, id, map[string]string{"name": name})
	if f.createErr != nil {
		return container.CreateResponse{}, f.createErr
	}
	return container.CreateResponse{ID: id}, nil
}

func (f *fakeEngine) ContainerStart(_ context.Context, id string, _ container.StartOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return errdefs.ErrNotFound.WithMessage("no such container " + id)
	}
	f.nextPid++
	c.State.Status, c.State.Running, c.State.Pid = "running", true, f.nextPid
	c.State.StartedAt = time.Now().UTC().Format(time.RFC3339Nano)
	f.emitLocked(events.ActionStart, id, nil)
	return nil
}

func (f *fakeEngine) ContainerInspect(ctx context.Context, ref string) (container.InspectResponse, error) {
	f.mu.Lock()
	f.inspects[ref]++
	var found *container.InspectResponse
	for id, c := range f.containers {
		if id == ref || c.Name == "/"+ref {
			found = c
		}
	}
	var snap container.InspectResponse
	if found != nil {
		base, st := *found.ContainerJSONBase, *found.State
		base.State = &st
		snap = container.InspectResponse{ContainerJSONBase: &base, Config: found.Config}
	}
	gate, fail := f.gates[ref], f.failInspect[ref] > 0
	if fail {
		f.failInspect[ref]--
	}
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return container.InspectResponse{}, ctx.Err()
		}
	}
	switch {
	case fail:
		return container.InspectResponse{}, errors.New("inspect failed")
	case found == nil:
		return container.InspectResponse{}, errdefs.ErrNotFound.WithMessage("no such container " + ref)
	}
	return snap, nil
}

func (f *fakeEngine) ContainerList(_ context.Context, _ container.ListOptions) ([]container.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []container.Summary
	for id, c := range f.containers {
		created, _ := time.Parse(time.RFC3339Nano, c.Created)
		out = append(out, container.Summary{ID: id, Names: []string{c.Name}, Labels: c.Config.Labels, State: c.State.Status, Created: created.Unix()})
	}
	return out, nil
}

func (f *fakeEngine) Events(ctx context.Context, _ events.ListOptions) (<-chan events.Message, <-chan error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan events.Message, 100)
	f.subs = append(f.subs, ch)
	return ch, make(chan error)
}

// decode is a minimal decoder: the test label gives the kind.
func decode(c container.InspectResponse) *store.Record {
	if c.ContainerJSONBase == nil || c.Config == nil {
		return nil
	}
	var kind store.Kind
	switch c.Config.Labels[testLabel] {
	case "sandbox":
		kind = store.KindSandbox
	case "container":
		kind = store.KindContainer
	default:
		return nil
	}
	r := &store.Record{ID: c.ID, Kind: kind, Name: trimSlash(c.Name), DockerLabels: c.Config.Labels}
	if t, err := time.Parse(time.RFC3339Nano, c.Created); err == nil {
		r.CreatedAt = t.UnixNano()
	}
	if st := c.State; st != nil {
		switch {
		case st.Running:
			r.State = store.StateRunning
		case st.Status == "created":
			r.State = store.StateCreated
		case st.Status == "exited":
			r.State = store.StateExited
		}
		r.Pid = st.Pid
		if t, err := time.Parse(time.RFC3339Nano, st.StartedAt); err == nil {
			r.StartedAt = t.UnixNano()
		}
	}
	return r
}
