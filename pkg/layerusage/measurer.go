// Package layerusage measures the disk usage of containers' writable
// layers in the background, so that a stats RPC answers at once with the
// last measurement and never waits for a walk of a directory tree.
//
// One worker walks the tracked directories (Walk: du-like, bytes allocated
// and inodes, never following symlinks nor crossing mount points), one
// slice at a time under a budget of time and entries. How often a layer is
// measured depends on what it cost: a layer measured within one slice is
// measured again every Interval; one that needed more slices is measured
// half as often each time (up to MaxInterval), and the slices of its walk
// are spaced by SlotGap. After every slice the worker rests as long as the
// slice took, so measuring takes at most half of one CPU. A container with
// millions of files thus costs a bounded share of the machine, however
// large it grows.
package layerusage

import (
	"context"
	"errors"
	"io/fs"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Usage is what a layer was last measured to use.
type Usage struct {
	Bytes, Inodes uint64
	// At is when the figures were measured: the end of the walk, or of
	// the last slice of a walk under way when Partial.
	At time.Time
	// Partial says the figures come from a walk not finished yet: they
	// are a lower bound of the usage at At. They are reported only when
	// there is no complete measurement yet, or when they already exceed
	// it (the layer grew).
	Partial bool
}

// StepFunc runs one slice of a walk. Tests replace it; the default is
// (*Walk).Step.
type StepFunc func(ctx context.Context, w *Walk, b Budget) (done bool, err error)

// Options tune a Measurer; zero fields take the defaults.
type Options struct {
	// Interval is how often a layer measured within one slice is
	// measured again (default 1m).
	Interval time.Duration
	// MaxInterval caps the back-off of costly layers (default 30m).
	MaxInterval time.Duration
	// SlotTime and SlotEntries bound one slice (default 500ms, 50000
	// entries).
	SlotTime    time.Duration
	SlotEntries int
	// SlotGap is the wait between two slices of one walk (default 10s).
	SlotGap time.Duration
	// Clock times everything (default the real clock).
	Clock clock.Clock
	// Step runs a slice (default (*Walk).Step).
	Step StepFunc
}

// Defaults.
const (
	DefaultInterval    = time.Minute
	DefaultMaxInterval = 30 * time.Minute
	DefaultSlotTime    = 500 * time.Millisecond
	DefaultSlotEntries = 50000
	DefaultSlotGap     = 10 * time.Second
)

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Interval, DefaultInterval)
	def(&o.MaxInterval, DefaultMaxInterval)
	o.MaxInterval = max(o.MaxInterval, o.Interval)
	def(&o.SlotTime, DefaultSlotTime)
	def(&o.SlotGap, DefaultSlotGap)
	if o.SlotEntries <= 0 {
		o.SlotEntries = DefaultSlotEntries
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Step == nil {
		o.Step = func(ctx context.Context, w *Walk, b Budget) (bool, error) { return w.Step(ctx, b) }
	}
}

// entry is one tracked layer.
type entry struct {
	dir string
	// last is the last complete measurement (valid when have).
	last Usage
	have bool
	// walk is the walk under way, nil between walks; progress is its
	// sums after its last slice, slots how many slices it took so far.
	walk     *walk
	progress Usage
	// interval is the current period between walks; next when the next
	// slice is due.
	interval time.Duration
	next     time.Time
}

type walk struct {
	w     *Walk
	slots int
}

// Measurer measures tracked layers in the background. Track, Forget and
// Get never wait for a walk.
type Measurer struct {
	opts Options
	wake chan struct{}

	mu      sync.Mutex
	entries map[string]*entry
}

// New returns a measurer; Run does the measuring.
func New(opts Options) *Measurer {
	opts.setDefaults()
	return &Measurer{opts: opts, wake: make(chan struct{}, 1), entries: map[string]*entry{}}
}

// Track measures dir as the layer of id, at once if it is new. Tracking
// an id again with another dir starts over.
func (m *Measurer) Track(id, dir string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[id]; ok && e.dir == dir {
		return
	}
	m.entries[id] = &entry{dir: dir, interval: m.opts.Interval, next: m.opts.Clock.Now()}
	m.poke()
}

// Forget stops measuring id; a walk of it under way is abandoned.
func (m *Measurer) Forget(id string) {
	m.mu.Lock()
	delete(m.entries, id)
	m.mu.Unlock()
}

// Tracked returns the dir tracked for id.
func (m *Measurer) Tracked(id string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[id]
	if !ok {
		return "", false
	}
	return e.dir, true
}

// IDs lists the tracked ids.
func (m *Measurer) IDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.entries))
	for id := range m.entries {
		out = append(out, id)
	}
	return out
}

// Get returns what id's layer was last measured to use; false when it is
// not tracked or nothing has been measured yet.
func (m *Measurer) Get(id string) (Usage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[id]
	if !ok {
		return Usage{}, false
	}
	return e.usage()
}

func (e *entry) usage() (Usage, bool) {
	partial := e.walk != nil && e.walk.slots > 0
	switch {
	case partial && (!e.have || e.progress.Bytes > e.last.Bytes):
		return e.progress, true
	case e.have:
		return e.last, true
	}
	return Usage{}, false
}

// TotalBytes sums the bytes every tracked layer was last measured to use.
func (m *Measurer) TotalBytes() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum uint64
	for _, e := range m.entries {
		if u, ok := e.usage(); ok {
			sum += u.Bytes
		}
	}
	return sum
}

func (m *Measurer) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run measures until ctx ends.
func (m *Measurer) Run(ctx context.Context) {
	clk := m.opts.Clock
	var rest time.Time // no slice before then
	for {
		now := clk.Now()
		id, e, due := m.pick()
		if e != nil && rest.After(due) {
			due = rest
		}
		if e == nil || due.After(now) {
			if !m.sleep(ctx, due, now, e == nil) {
				return
			}
			continue
		}
		start := clk.Now()
		took, ok := m.slice(ctx, id, e, start)
		if !ok {
			return
		}
		// Rest as long as the slice took: at most half a CPU.
		rest = start.Add(2 * took)
	}
}

// sleep waits until due, a new layer is tracked, or ctx ends; forever
// (but for those) when idle. It reports false when ctx ended.
func (m *Measurer) sleep(ctx context.Context, due, now time.Time, idle bool) bool {
	var timer <-chan time.Time
	if !idle {
		t := m.opts.Clock.NewTimer(due.Sub(now))
		defer t.Stop()
		timer = t.C()
	}
	select {
	case <-ctx.Done():
		return false
	case <-m.wake:
	case <-timer:
	}
	return true
}

// pick returns the entry due first, with when it is due (nil when nothing
// is tracked).
func (m *Measurer) pick() (string, *entry, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var (
		bestID string
		best   *entry
	)
	for id, e := range m.entries {
		if best == nil || e.next.Before(best.next) {
			bestID, best = id, e
		}
	}
	if best == nil {
		return "", nil, time.Time{}
	}
	return bestID, best, best.next
}

// slice runs one slice of e's walk and records the outcome, unless e was
// forgotten or replaced meanwhile. It reports how long the slice took,
// and false when ctx ended.
func (m *Measurer) slice(ctx context.Context, id string, e *entry, start time.Time) (time.Duration, bool) {
	m.mu.Lock()
	wk := e.walk
	if wk == nil {
		wk = &walk{w: NewWalk(e.dir)}
		e.walk = wk
	}
	m.mu.Unlock()

	clk := m.opts.Clock
	done, err := m.opts.Step(ctx, wk.w, Budget{Deadline: start.Add(m.opts.SlotTime), Now: clk.Now, MaxEntries: m.opts.SlotEntries})
	end := clk.Now()
	if ctx.Err() != nil {
		return 0, false
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries[id] != e {
		return end.Sub(start), true // forgotten or re-tracked meanwhile
	}
	wk.slots++
	bytes, inodes := wk.w.Sums()
	switch {
	case err != nil:
		// The layer is gone (its container is being removed) or
		// unusable: try again later, less and less often.
		e.walk = nil
		e.interval = m.backoff(e.interval)
		e.next = end.Add(e.interval)
		level := klog.Level(4)
		if !errors.Is(err, fs.ErrNotExist) {
			level = 2
		}
		klog.V(level).InfoS("Cannot measure a writable layer", "id", id, "dir", e.dir, "err", err, "retryIn", e.interval)
	case done:
		e.last, e.have = Usage{Bytes: bytes, Inodes: inodes, At: end}, true
		e.walk = nil
		if wk.slots == 1 {
			e.interval = m.opts.Interval
		} else {
			e.interval = m.backoff(e.interval)
			klog.V(4).InfoS("Measured a large writable layer", "id", id, "dir", e.dir, "slices", wk.slots, "bytes", bytes, "inodes", inodes, "nextIn", e.interval)
		}
		e.next = end.Add(e.interval)
	default:
		e.progress = Usage{Bytes: bytes, Inodes: inodes, At: end, Partial: true}
		e.next = end.Add(m.opts.SlotGap)
	}
	return end.Sub(start), true
}

func (m *Measurer) backoff(d time.Duration) time.Duration {
	return min(max(2*d, m.opts.Interval), m.opts.MaxInterval)
}
