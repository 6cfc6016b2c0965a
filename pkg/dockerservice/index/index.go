// Package index keeps netshim's in-memory index of its Docker containers
// (a store.Store) current: it follows Docker's events stream, resyncs from
// a full listing when the stream (re)connects and periodically, and is the
// one writer of records for netshim's own creates and starts.
//
// Its one rule is that nothing Docker does can freeze it. Every Docker call
// has a deadline; inspects run on a small worker pool, never on the events
// loop, so one container whose inspect hangs (dockerd holds a container's
// lock while a start or kill is stuck) delays only that container's record;
// the loop keeps reading events (dockerd drops events for a subscriber
// that stops reading) and Health says so when it falls behind.
package index

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	dnetwork "github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/netshim/netshim/pkg/dockerservice/store"
	"github.com/netshim/netshim/pkg/metrics"
)

// Client is the part of the Docker API the index uses.
type Client interface {
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *dnetwork.NetworkingConfig, platform *ocispec.Platform, containerName string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, container string, options container.StartOptions) error
	ContainerInspect(ctx context.Context, container string) (container.InspectResponse, error)
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
}

// Decoder turns an inspect into a record, or nil for a container netshim
// does not own. The index also feeds it inspects it builds itself from a
// create's config or a listing's summary, so one function decides what a
// record says.
type Decoder func(container.InspectResponse) *store.Record

// Options tune the index; zero fields take the defaults.
type Options struct {
	// Filter selects netshim's containers in listings and events (label
	// filters).
	Filter filters.Args
	// Workers is how many inspects may run at once for the events loop.
	Workers int
	// InspectTimeout bounds one inspect, ListTimeout one listing and
	// CallTimeout a create or start.
	InspectTimeout, ListTimeout, CallTimeout time.Duration
	// ResyncPeriod is the safety-net resync's period; MinResyncGap is the
	// least time between two resyncs that something triggered (a failed
	// inspect, a stalled loop).
	ResyncPeriod, MinResyncGap time.Duration
	// StuckAfter is how long events may wait for an inspect, or the loop
	// go without running, before Health reports the runtime not ready.
	StuckAfter time.Duration
	// ReconnectMinDelay and ReconnectMaxDelay bound the backoff between
	// attempts to reconnect the events stream.
	ReconnectMinDelay, ReconnectMaxDelay time.Duration
	// OnSync, if set, runs in its own goroutine each time a new events
	// stream's first resync succeeds; ctx ends with that stream.
	OnSync func(ctx context.Context)
	// BeforeSynced, if set, runs each time a new events stream's first
	// resync succeeds, before the index reports itself synced (readers
	// are refused until then); ctx ends with that stream. It must be
	// quick or bounded: events are not applied while it runs.
	BeforeSynced func(ctx context.Context)
	// Metrics, if set, counts events applied, their lag and resyncs.
	Metrics *metrics.Metrics
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	def(&o.InspectTimeout, 10*time.Second)
	def(&o.ListTimeout, 30*time.Second)
	// kubelet gives each runtime call 2 minutes by default; this only
	// bounds callers that set no deadline.
	def(&o.CallTimeout, 2*time.Minute)
	def(&o.ResyncPeriod, 10*time.Minute)
	def(&o.MinResyncGap, 30*time.Second)
	def(&o.StuckAfter, 30*time.Second)
	def(&o.ReconnectMinDelay, 100*time.Millisecond)
	def(&o.ReconnectMaxDelay, 2*time.Second)
}

// Index is the index and the machinery that keeps it current.
type Index struct {
	client Client
	decode Decoder
	opts   Options
	store  *store.Store
	sched  *scheduler

	// resyncNow asks the current events session for an early resync.
	resyncNow chan struct{}
	firstOnce sync.Once
	first     chan struct{}
	syncOnce  sync.Once
	syncedCh  chan struct{}

	mu sync.Mutex
	// ownOps counts netshim's own creates and starts in flight (own.go).
	ownOps map[string]int
	// Health: connected while an events stream is up and its first
	// resync succeeded; synced once any resync has; resyncErr is the last
	// resync's failure; lastBeat is when the loop last ran.
	connected bool
	synced    bool
	connErr   string
	resyncErr error
	lastBeat  time.Time
	// heartbeat is lastBeat for readers that must not wait for mu
	// (heartbeat.go).
	heartbeat atomic.Int64
}

// New returns an index over an empty store. Run starts following Docker.
func New(client Client, decode Decoder, opts Options) *Index {
	opts.setDefaults()
	return &Index{
		client:    client,
		decode:    decode,
		opts:      opts,
		store:     store.New(),
		sched:     newScheduler(),
		resyncNow: make(chan struct{}, 1),
		first:     make(chan struct{}),
		syncedCh:  make(chan struct{}),
		ownOps:    map[string]int{},
	}
}

// Store is the store the index writes into, for readers.
func (x *Index) Store() *store.Store { return x.store }

// Get, Resolve, List, ContainersOf and Len read the store.
func (x *Index) Get(id string) (*store.Record, bool)              { return x.store.Get(id) }
func (x *Index) Resolve(idOrPrefix string) (*store.Record, error) { return x.store.Resolve(idOrPrefix) }
func (x *Index) List(kind store.Kind) []*store.Record             { return x.store.List(kind) }
func (x *Index) ContainersOf(sandboxID string) []*store.Record {
	return x.store.ContainersOf(sandboxID)
}
func (x *Index) Len() int { return x.store.Len() }

// FirstSync is closed once Run has tried to sync the index the first
// time, whether or not it succeeded.
func (x *Index) FirstSync() <-chan struct{} { return x.first }

func (x *Index) signalFirst() { x.firstOnce.Do(func() { close(x.first) }) }

// SyncedCh is closed once the index has first been filled from Docker.
func (x *Index) SyncedCh() <-chan struct{} { return x.syncedCh }

// Synced reports whether the index has been filled from Docker at least
// once: before that, an empty index does not mean there are no pods.
func (x *Index) Synced() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.synced
}

// Health says whether the index can be trusted to follow Docker, and if
// not, why: the events stream is down, the resync fails, or events are
// not being drained (the loop stalled, or inspects have been waiting for
// a worker longer than StuckAfter). It costs no Docker call.
func (x *Index) Health() (ready bool, reason string) {
	x.mu.Lock()
	connected, connErr, resyncErr, beat := x.connected, x.connErr, x.resyncErr, x.lastBeat
	x.mu.Unlock()
	switch {
	case !connected && connErr != "":
		return false, connErr
	case !connected:
		return false, "docker: not connected yet"
	case resyncErr != nil:
		return false, fmt.Sprintf("docker: resyncing the container index failed: %v", resyncErr)
	}
	now := time.Now()
	if stalled := now.Sub(beat); stalled > x.opts.StuckAfter {
		return false, fmt.Sprintf("docker events loop stalled for %s", stalled.Round(time.Millisecond))
	}
	if n, oldest := x.sched.backlog(); n > 0 && now.Sub(oldest) > x.opts.StuckAfter {
		return false, fmt.Sprintf("docker events not drained for %s: %d pending (inspects are not finishing)", now.Sub(oldest).Round(time.Millisecond), n)
	}
	return true, ""
}

// Inspecting is how many containers wait for, or are in, an inspect the
// events asked for: 0 once the index holds what the events applied so far
// say. A caller that knows which events were applied (its own, or one it
// can tell came last) can then wait for Docker to be quiet.
func (x *Index) Inspecting() int {
	x.sched.mu.Lock()
	defer x.sched.mu.Unlock()
	return len(x.sched.pending)
}

func (x *Index) setConnected(err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err != nil {
		x.connected, x.connErr = false, fmt.Sprintf("docker: %v", err)
		return
	}
	x.connected, x.connErr, x.synced, x.resyncErr = true, "", true, nil
	x.lastBeat = time.Now()
	x.syncOnce.Do(func() { close(x.syncedCh) })
}

func (x *Index) setResyncErr(err error) {
	x.mu.Lock()
	x.resyncErr = err
	x.mu.Unlock()
}

func (x *Index) beat() (since time.Duration) {
	now := time.Now()
	x.mu.Lock()
	defer x.mu.Unlock()
	since = now.Sub(x.lastBeat)
	x.lastBeat = now
	x.heartbeat.Store(now.UnixNano())
	return since
}

// requestResync asks for an early resync (rate-limited by MinResyncGap);
// it never blocks.
func (x *Index) requestResync() {
	select {
	case x.resyncNow <- struct{}{}:
	default:
	}
}
