package dockerservice

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	dnetwork "github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// fakeDocker is an in-memory Docker engine: enough of containers and
// images for the CRI logic, with hooks to inject failures and a call log.
type fakeDocker struct {
	mu         sync.Mutex
	containers map[string]*container.InspectResponse
	images     map[string]map[string]string // ref -> image labels
	// imageMeta gives a ref of images an ID (refs sharing one are tags of
	// one image), a user and a size; see image_fake_docker_test.go.
	imageMeta map[string]fakeImage
	// pullErrs makes ImagePull of a ref report this error in its
	// progress stream, as Docker does; pullOpts records each pull's options.
	pullErrs map[string]string
	pullOpts []image.PullOptions
	// stopTimeouts is the grace (s) of each container's last stop.
	stopTimeouts map[string]int
	// info is what Info returns.
	info    system.Info
	calls   []string
	nextID  int
	nextPid int

	// infoErr makes Info fail; infoGate, when set, holds Info until it
	// is closed (or the call's context ends).
	infoErr  error
	infoGate chan struct{}

	// subscribers receive the events the fake emits, like Docker's
	// events stream; each has an error channel to break the stream.
	subscribers []*fakeSubscriber

	// down makes the engine unreachable: Events and ContainerList fail.
	down bool

	pingErr  error
	startErr error
	// stopErr makes ContainerStop fail (the container keeps running).
	stopErr error
	// pullStream, if set, is the progress stream of every pull (the
	// image counts as pulled).
	pullStream func(ctx context.Context) io.ReadCloser
	// layersSize is what DiskUsage reports for images.
	layersSize int64
	// removeErr makes ContainerRemove fail (the container stays).
	removeErr error
	// createErrAfter makes creates fail after making the container, as a
	// client timing out while Docker works does.
	createErrAfter error
	// onStart runs before a container is started (under no lock).
	onStart func(id string)
	// cx is the exec/logs/update half; see container_fake_docker_test.go.
	cx *fakeContainerExtras
}

var _ DockerClient = (*fakeDocker)(nil)

func newFakeDocker() *fakeDocker {
	return &fakeDocker{containers: map[string]*container.InspectResponse{}, images: map[string]map[string]string{}, imageMeta: map[string]fakeImage{}, pullErrs: map[string]string{}, nextPid: 1000}
}

func (f *fakeDocker) record(call string) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
}

// count returns how many calls of a kind were made.
func (f *fakeDocker) count(kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, kind) {
			n++
		}
	}
	return n
}

func (f *fakeDocker) resetCalls() {
	f.mu.Lock()
	f.calls = nil
	f.mu.Unlock()
}

// find resolves an ID, unique ID prefix or name, as Docker does.
func (f *fakeDocker) find(ref string) *container.InspectResponse {
	if c, ok := f.containers[ref]; ok {
		return c
	}
	var match *container.InspectResponse
	for id, c := range f.containers {
		if c.Name == "/"+ref || strings.HasPrefix(id, ref) {
			if match != nil {
				return nil
			}
			match = c
		}
	}
	return match
}

func notFound(what string) error {
	return errdefs.ErrNotFound.WithMessage("No such container: " + what)
}

func (f *fakeDocker) Ping(context.Context) (types.Ping, error) {
	f.record("Ping")
	f.mu.Lock()
	defer f.mu.Unlock()
	return types.Ping{APIVersion: f.extras().apiVersion}, f.pingErr
}

func (f *fakeDocker) ServerVersion(context.Context) (types.Version, error) {
	f.record("ServerVersion")
	return types.Version{Version: "20.10.24", APIVersion: "1.41"}, nil
}

func (f *fakeDocker) Info(ctx context.Context) (system.Info, error) {
	f.record("Info")
	f.mu.Lock()
	gate := f.infoGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return system.Info{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.info, f.infoErr
}

// DiskUsage answers images only: diskUsage's layers size.
func (f *fakeDocker) DiskUsage(_ context.Context, opts types.DiskUsageOptions) (types.DiskUsage, error) {
	f.record("DiskUsage")
	f.mu.Lock()
	defer f.mu.Unlock()
	return types.DiskUsage{LayersSize: f.layersSize}, nil
}

func (f *fakeDocker) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	f.record("ImageInspect " + ref)
	f.mu.Lock()
	defer f.mu.Unlock()
	id, refs, ok := f.lookupImageLocked(ref)
	if !ok {
		return image.InspectResponse{}, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	return f.inspectImageLocked(id, refs), nil
}

func (f *fakeDocker) ImagePull(ctx context.Context, ref string, opts image.PullOptions) (io.ReadCloser, error) {
	f.record("ImagePull " + ref)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pullOpts = append(f.pullOpts, opts)
	if f.pullStream != nil {
		f.images[ref] = map[string]string{}
		return f.pullStream(ctx), nil
	}
	if msg, ok := f.pullErrs[ref]; ok {
		return io.NopCloser(strings.NewReader(`{"status":"Pulling"}` + "\n" + `{"errorDetail":{"message":"` + msg + `"},"error":"` + msg + `"}` + "\n")), nil
	}
	f.images[ref] = map[string]string{}
	return io.NopCloser(strings.NewReader(`{"status":"Pulling"}` + "\n" + `{"status":"Done"}` + "\n")), nil
}

func (f *fakeDocker) ContainerCreate(_ context.Context, cfg *container.Config, hc *container.HostConfig, _ *dnetwork.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
	f.record("ContainerCreate " + name)
	f.mu.Lock()
	defer f.mu.Unlock()
	imgLabels, ok := f.images[cfg.Image]
	if !ok {
		return container.CreateResponse{}, errdefs.ErrNotFound.WithMessage("No such image: " + cfg.Image)
	}
	for _, c := range f.containers {
		if c.Name == "/"+name {
			return container.CreateResponse{}, errdefs.ErrConflict.WithMessage(fmt.Sprintf("Conflict. The container name %q is already in use by container %q", "/"+name, c.ID))
		}
	}
	f.nextID++
	sum := sha256.Sum256([]byte(strconv.Itoa(f.nextID)))
	id := hex.EncodeToString(sum[:])
	labels := map[string]string{}
	for k, v := range imgLabels { // Docker merges image labels in.
		labels[k] = v
	}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	c := *cfg
	c.Labels = labels
	h := *hc
	f.containers[id] = &container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID: id, Name: "/" + name, Created: time.Now().UTC().Format(time.RFC3339Nano),
			State: &container.State{Status: "created"}, HostConfig: &h, Image: cfg.Image,
		},
		Config: &c,
	}
	f.emit(events.ActionCreate, id, map[string]string{"name": name})
	if f.createErrAfter != nil {
		return container.CreateResponse{}, f.createErrAfter
	}
	return container.CreateResponse{ID: id}, nil
}

func (f *fakeDocker) ContainerStart(_ context.Context, id string, _ container.StartOptions) error {
	f.record("ContainerStart " + id)
	if f.onStart != nil {
		f.onStart(id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.find(id)
	if c == nil {
		return notFound(id)
	}
	if f.startErr != nil {
		c.State.Status, c.State.ExitCode = "exited", 128
		return f.startErr
	}
	f.nextPid++
	c.State.Status, c.State.Running, c.State.Pid = "running", true, f.nextPid
	c.State.StartedAt = time.Now().UTC().Format(time.RFC3339Nano)
	f.emit(events.ActionStart, c.ID, nil)
	return nil
}

func (f *fakeDocker) ContainerStop(_ context.Context, id string, opts container.StopOptions) error {
	f.record("ContainerStop " + id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if opts.Timeout != nil {
		if f.stopTimeouts == nil {
			f.stopTimeouts = map[string]int{}
		}
		f.stopTimeouts[id] = *opts.Timeout
	}
	c := f.find(id)
	if c == nil {
		return notFound(id)
	}
	if f.stopErr != nil {
		return f.stopErr
	}
	if c.State.Running {
		c.State.Status, c.State.Running, c.State.Pid = "exited", false, 0
		c.State.FinishedAt = time.Now().UTC().Format(time.RFC3339Nano)
		f.emit(events.ActionDie, c.ID, map[string]string{"exitCode": "0"})
	}
	return nil
}

func (f *fakeDocker) ContainerRemove(_ context.Context, id string, opts container.RemoveOptions) error {
	f.record("ContainerRemove " + id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.removeErr != nil {
		return f.removeErr
	}
	c := f.find(id)
	if c == nil {
		return notFound(id)
	}
	if c.State.Running && !opts.Force {
		return errdefs.ErrConflict.WithMessage("container is running")
	}
	if c.State.Running {
		c.State.Running = false
		f.emit(events.ActionDie, c.ID, map[string]string{"exitCode": "137"})
	}
	delete(f.containers, c.ID)
	f.emit(events.ActionDestroy, c.ID, nil)
	return nil
}

func (f *fakeDocker) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	if f.sawBarrier(id) { // quiesce's, not the service's own
		return container.InspectResponse{}, notFound(id)
	}
	f.record("ContainerInspect " + id)
	if strings.TrimSpace(id) == "" {
		// As Docker's client, which refuses a blank ID before any request.
		return container.InspectResponse{}, errdefs.ErrInvalidArgument.WithMessage("invalid container name or ID: value is empty")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.find(id)
	if c == nil {
		return container.InspectResponse{}, notFound(id)
	}
	cp := *c
	base := *c.ContainerJSONBase
	st := *c.State
	base.State = &st
	cp.ContainerJSONBase = &base
	return cp, nil
}

func (f *fakeDocker) ContainerList(_ context.Context, opts container.ListOptions) ([]container.Summary, error) {
	f.record("ContainerList")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errors.New("Cannot connect to the Docker daemon")
	}
	var out []container.Summary
	for id, c := range f.containers {
		if !opts.All && !c.State.Running {
			continue
		}
		if !matchArgs(opts, id, c.Config.Labels) {
			continue
		}
		created, _ := time.Parse(time.RFC3339Nano, c.Created)
		out = append(out, container.Summary{ID: id, Names: []string{c.Name}, Labels: c.Config.Labels, State: c.State.Status, Created: created.Unix(), Image: c.Image})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func matchArgs(opts container.ListOptions, id string, labels map[string]string) bool {
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

type fakeSubscriber struct {
	ctx  context.Context
	msgs chan events.Message
	errs chan error
}

func (f *fakeDocker) Events(ctx context.Context, _ events.ListOptions) (<-chan events.Message, <-chan error) {
	f.record("Events")
	sub := &fakeSubscriber{ctx: ctx, msgs: make(chan events.Message, 100), errs: make(chan error, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		sub.errs <- errors.New("Cannot connect to the Docker daemon")
		return sub.msgs, sub.errs
	}
	f.subscribers = append(f.subscribers, sub)
	return sub.msgs, sub.errs
}

// emit sends an event to every live subscriber. Called with f.mu held.
func (f *fakeDocker) emit(action events.Action, id string, attrs map[string]string) {
	live := f.subscribers[:0]
	for _, s := range f.subscribers {
		if s.ctx.Err() != nil {
			continue
		}
		live = append(live, s)
		s.msgs <- events.Message{Type: events.ContainerEventType, Action: action, Actor: events.Actor{ID: id, Attributes: attrs}, TimeNano: time.Now().UnixNano()}
	}
	f.subscribers = live
}

// setDown stops or restarts the fake engine; stopping it ends every
// events stream with an error, as a dockerd restart does.
func (f *fakeDocker) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
	if down {
		for _, s := range f.subscribers {
			s.errs <- errors.New("unexpected EOF")
		}
		f.subscribers = nil
	}
}

// removeBehindBack deletes a container as `docker rm -f` would.
func (f *fakeDocker) removeBehindBack(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.containers[id]; ok && c.State.Running {
		c.State.Status, c.State.Running, c.State.Pid, c.State.ExitCode = "exited", false, 0, 137
		f.emit(events.ActionDie, id, map[string]string{"exitCode": "137"})
	}
	delete(f.containers, id)
	f.emit(events.ActionDestroy, id, nil)
}

// killBehindBack kills a container's process as `docker kill` would.
func (f *fakeDocker) killBehindBack(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[id]
	c.State.Status, c.State.Running, c.State.Pid, c.State.ExitCode = "exited", false, 0, 137
	f.emit(events.ActionDie, id, map[string]string{"exitCode": "137"})
}

// snapshotIDs returns the IDs of the engine's containers.
func (f *fakeDocker) snapshotIDs() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]bool, len(f.containers))
	for id := range f.containers {
		out[id] = true
	}
	return out
}
