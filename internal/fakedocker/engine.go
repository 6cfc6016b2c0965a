// Package fakedocker is an in-memory Docker engine for unit tests: one fake
// shared by the tests of every package that talks to Docker, so that what
// the fake knows of Docker's behaviour is written, and corrected, once.
//
// Engine has the methods of the Docker client that netshim's packages use
// (engine.Client, index.Client, streaming.DockerAPI). It keeps
// its world and its knobs in a State, which tests read and change through
// Engine.Do, under the engine's lock, so that a test may turn a knob while
// the code under test is calling in from other goroutines.
//
// This package must not import the packages whose tests use it: their
// tests import it, and the interfaces it satisfies are asserted there.
package fakedocker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/api/types/versions"
)

// ClientMaxAPI is the client's newest API version, which ClientVersion
// says until negotiated, as the real client does: code that reads the
// version before negotiating sees a version the engine may not speak.
const ClientMaxAPI = "1.51"

// ErrUnreachable is what calls fail with while State.Down is set, as the
// real client's do when dockerd does not answer.
var ErrUnreachable = errors.New("cannot connect to the Docker daemon")

// State is the engine's world (containers, images, what Info says), the
// knobs that make it misbehave, and the recorders of what it was asked.
// Engine reads it under its lock; a test reads or changes it with
// Engine.Do. Maps are never nil.
type State struct {
	// Containers by ID. A test may store one built by hand (a container
	// made before the code under test connected, or by another client) or
	// change a field the fake does not model (GraphDriver, labels).
	Containers map[string]*container.InspectResponse
	// Images maps every image reference to the image's labels, which
	// Docker merges into the labels of a container made from it. A
	// reference is a tag ("busybox:1") or a digest reference
	// ("name@sha256:..."), in the form the test stored it: lookups compare
	// references normalised, as Docker does.
	Images map[string]map[string]string
	// ImageMeta gives a reference an image ID, a user and a size:
	// references that share an ID are tags of one image. A reference
	// without one is an image of its own, whose ID is the sha256 of the
	// reference.
	ImageMeta map[string]Image

	// Info is what Info returns: the storage driver, root dir, cgroup
	// driver and runtimes the code under test adapts to.
	Info system.Info
	// InfoErr makes Info fail, as a busy or restarting engine does.
	InfoErr error
	// InfoGate, when set, holds Info until it is closed or the call's
	// context ends: a slow engine, for deadline tests.
	InfoGate chan struct{}
	// LayersSize is what DiskUsage reports for images (the containerd
	// image store's layers, which live outside Docker's root).
	LayersSize int64

	// APIVersion is the engine's API version, which Ping reports.
	APIVersion string
	// ClientVersion is the client's API version once negotiated; "" until
	// then, when ClientVersion says ClientMaxAPI.
	ClientVersion string
	// PingErr makes Ping fail (an engine that is down, for the version
	// negotiation's error path).
	PingErr error
	// Down makes the engine unreachable: Events and ContainerList fail
	// with ErrUnreachable. Use SetDown to also break open event streams.
	Down bool

	// ListErr makes ContainerList fail with this error.
	ListErr error
	// CreateErr makes ContainerCreate fail. With CreateMakes the container
	// is made anyway, and its create event sent, before the call fails:
	// a client that timed out while Docker did the work.
	CreateErr   error
	CreateMakes bool
	// NewID, when set, gives a created container its ID from its name, so
	// that a test knows IDs ahead; nil makes 64-hex IDs like Docker's.
	NewID func(name string) string
	// AnyImage lets ContainerCreate make a container from an image the
	// engine does not have (tests of the bookkeeping around creates, which
	// pull nothing); otherwise the create fails as Docker's does.
	AnyImage bool
	// OnStart runs at the start of every ContainerStart, without the
	// engine's lock: a test can act between a create and its start.
	OnStart func(id string)
	// StartErr makes ContainerStart fail; the container is left exited
	// with code 128, as when runc cannot start the process.
	StartErr error
	// StopErr makes ContainerStop fail; the container keeps running.
	StopErr error
	// RemoveErr makes ContainerRemove fail; the container stays.
	RemoveErr error
	// UpdateErr makes ContainerUpdate fail.
	UpdateErr error

	// FailInspect makes the next n inspects of a reference fail with a
	// transport-like error (not a not-found).
	FailInspect map[string]int
	// InspectGates hold inspects of a reference until the gate is closed
	// or the caller's context ends. The inspect reads the container first,
	// so it answers with what it saw before it waited, as a slow dockerd.
	InspectGates map[string]chan struct{}
	// LossyEvents drops an event for a subscriber whose buffer is full,
	// as dockerd does to a slow reader; otherwise the engine waits for
	// room, so that no test loses an event it did not mean to.
	LossyEvents bool

	// PullErrs makes ImagePull of a reference report this error in the
	// progress stream, after the call succeeded, as Docker does.
	PullErrs map[string]string
	// PullStream, when set, is the progress stream of every pull; the
	// image counts as pulled. For tests of progress and its deadlines.
	PullStream func(ctx context.Context) io.ReadCloser

	// OnExec decides what an exec's process does, from its command; nil
	// prints nothing and exits 0. See Script.
	OnExec func(cmd []string) Script
	// ExecPid, when set, gives the pid an exec reports (0 for none, or a
	// real process's, for tests that kill for real); nil makes pids up.
	ExecPid func() int
	// ExecExitDelay is how long after its output ends an exec is reported
	// as finished: Docker records the exit a moment after the stream ends,
	// and code that reads the exit code must wait for it.
	ExecExitDelay time.Duration
	// AnyExecContainer lets ContainerExecCreate run in any container ID,
	// known or not, running or not: for tests of the exec streams alone.
	// Otherwise it fails as Docker's does.
	AnyExecContainer bool
	// Attach says what attaching to a container shows: the function plays
	// the container's main process on the attach connection. A container
	// without one cannot be attached to.
	Attach map[string]func(p *Proc)
	// ResizeFailures makes that many resize calls fail first, as Docker
	// fails a resize of an exec that has not started yet.
	ResizeFailures int
	// TB, when set, gets an error for a misuse of the API that Docker
	// would not report but that breaks a real session: an exec started
	// with a Tty setting other than the one it was created with.
	TB testing.TB

	// Calls logs each call as "Method arg" (see Engine.Calls).
	Calls []string
	// Inspects counts container inspects by the reference asked for.
	Inspects map[string]int
	// PullOpts records each pull's options (the registry auth sent).
	PullOpts []image.PullOptions
	// StopTimeouts is the grace period (s) of each container's last stop,
	// by the reference the stop named.
	StopTimeouts map[string]int
	// AttachOpts records the options of each ContainerAttach.
	AttachOpts []container.AttachOptions
	// Resizes records every successful resize, of execs and containers.
	Resizes []Resize
}

// Engine is the fake Docker engine. Its zero value is not usable: make one
// with New.
type Engine struct {
	mu sync.Mutex
	s  State

	subscribers []*subscriber
	nextID      int
	nextPid     int
	execs       map[string]*execProc
	nextExec    int
	logs        map[string][]logEntry
	// barriers counts the barrier events sent; barriersSeen are those
	// whose container someone inspected (see Barrier).
	barriers     int
	barriersSeen map[string]bool
}

// New returns an empty engine speaking API 1.41 (Docker 20.10, the oldest
// netshim supports).
func New() *Engine {
	return &Engine{
		s: State{
			Containers:   map[string]*container.InspectResponse{},
			Images:       map[string]map[string]string{},
			ImageMeta:    map[string]Image{},
			APIVersion:   "1.41",
			FailInspect:  map[string]int{},
			InspectGates: map[string]chan struct{}{},
			PullErrs:     map[string]string{},
			Attach:       map[string]func(*Proc){},
			Inspects:     map[string]int{},
			StopTimeouts: map[string]int{},
		},
		nextPid:      1000,
		execs:        map[string]*execProc{},
		logs:         map[string][]logEntry{},
		barriersSeen: map[string]bool{},
	}
}

// Do runs fn with the engine's state, under the engine's lock: the one way
// a test reads or changes the state while the code under test may be
// calling in. fn must not call the engine.
func (f *Engine) Do(fn func(s *State)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.s)
}

// Record logs a call. The engine logs its own; a test's wrapper that
// answers a call itself uses it so the log stays complete.
func (f *Engine) Record(call string) {
	f.mu.Lock()
	f.s.Calls = append(f.s.Calls, call)
	f.mu.Unlock()
}

// Calls returns a copy of the call log, for a test to show or compare.
func (f *Engine) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.s.Calls...)
}

// Count returns how many logged calls start with prefix ("ContainerInspect",
// or "ContainerStart <id>"), to bound what an operation costs the engine.
func (f *Engine) Count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.s.Calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// ResetCalls empties the call log, so that a test counts the calls of one
// operation alone.
func (f *Engine) ResetCalls() {
	f.mu.Lock()
	f.s.Calls = nil
	f.mu.Unlock()
}

// Ping reports the engine's API version, or State.PingErr.
func (f *Engine) Ping(context.Context) (types.Ping, error) {
	f.Record("Ping")
	f.mu.Lock()
	defer f.mu.Unlock()
	return types.Ping{APIVersion: f.s.APIVersion}, f.s.PingErr
}

// ServerVersion reports a Docker 20.10 engine.
func (f *Engine) ServerVersion(context.Context) (types.Version, error) {
	f.Record("ServerVersion")
	return types.Version{Version: "20.10.24", APIVersion: "1.41"}, nil
}

// Info returns State.Info, after State.InfoGate, or State.InfoErr.
func (f *Engine) Info(ctx context.Context) (system.Info, error) {
	f.Record("Info")
	f.mu.Lock()
	gate := f.s.InfoGate
	f.mu.Unlock()
	if err := waitGate(ctx, gate); err != nil {
		return system.Info{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s.Info, f.s.InfoErr
}

// DiskUsage answers for images only: State.LayersSize.
func (f *Engine) DiskUsage(context.Context, types.DiskUsageOptions) (types.DiskUsage, error) {
	f.Record("DiskUsage")
	f.mu.Lock()
	defer f.mu.Unlock()
	return types.DiskUsage{LayersSize: f.s.LayersSize}, nil
}

// ClientVersion is the client's API version: ClientMaxAPI until
// negotiated.
func (f *Engine) ClientVersion() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v := f.s.ClientVersion; v != "" {
		return v
	}
	return ClientMaxAPI
}

// NegotiateAPIVersionPing lowers the client's version to the engine's;
// like the real client's, it never raises it.
func (f *Engine) NegotiateAPIVersionPing(p types.Ping) {
	f.Record("NegotiateAPIVersionPing " + p.APIVersion)
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.s.ClientVersion
	if v == "" {
		v = ClientMaxAPI
	}
	if p.APIVersion != "" && versions.LessThan(p.APIVersion, v) {
		v = p.APIVersion
	}
	f.s.ClientVersion = v
}

// waitGate waits until gate, if any, is closed, or ctx ends: a call that
// a test holds to play a slow engine.
func waitGate(ctx context.Context, gate <-chan struct{}) error {
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the engine: %w", ctx.Err())
	}
}

type subscriber struct {
	ctx  context.Context
	msgs chan events.Message
	errs chan error
}

// Events subscribes to the container events the engine sends from now on.
// The stream ends with an error when the engine goes down (SetDown).
func (f *Engine) Events(ctx context.Context, _ events.ListOptions) (<-chan events.Message, <-chan error) {
	f.Record("Events")
	sub := &subscriber{ctx: ctx, msgs: make(chan events.Message, 100), errs: make(chan error, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.s.Down {
		sub.errs <- ErrUnreachable
		return sub.msgs, sub.errs
	}
	f.subscribers = append(f.subscribers, sub)
	return sub.msgs, sub.errs
}

// Emit sends a container event to every subscriber, as if something
// outside the code under test had acted (or to replay an event twice).
func (f *Engine) Emit(action events.Action, id string, attrs map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.emitLocked(action, id, attrs)
}

// emitLocked sends an event to every subscriber whose context is live,
// forgetting the others. Called with f.mu held.
func (f *Engine) emitLocked(action events.Action, id string, attrs map[string]string) {
	m := events.Message{Type: events.ContainerEventType, Action: action, Actor: events.Actor{ID: id, Attributes: attrs}, TimeNano: time.Now().UnixNano()}
	live := f.subscribers[:0]
	for _, s := range f.subscribers {
		if s.ctx.Err() != nil {
			continue
		}
		live = append(live, s)
		if f.s.LossyEvents {
			select {
			case s.msgs <- m:
			default:
			}
			continue
		}
		s.msgs <- m
	}
	f.subscribers = live
}

// SetDown stops or restarts the engine. Stopping it ends every events
// stream with an error, as a dockerd restart does, and makes the calls
// State.Down names fail.
func (f *Engine) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s.Down = down
	if down {
		for _, s := range f.subscribers {
			s.errs <- errors.New("unexpected EOF")
		}
		f.subscribers = nil
	}
}

// barrierPrefix names the containers of barrier events: none exists, and
// the engine neither logs nor counts their inspects.
const barrierPrefix = "fakedocker-barrier-"

// Barrier sends a start event for a container that does not exist and
// returns its ID. A consumer that inspects the containers of events it
// does not know, in order, has handled every earlier event once
// BarrierSeen says that ID was inspected: a test waits for it before it
// counts the calls of one operation alone.
func (f *Engine) Barrier() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.barriers++
	id := barrierPrefix + strconv.Itoa(f.barriers)
	f.emitLocked(events.ActionStart, id, nil)
	return id
}

// BarrierSeen reports whether the barrier container id was inspected.
func (f *Engine) BarrierSeen(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.barriersSeen[id]
}

// sawBarrier notes the inspect of a barrier's container; false for any
// other container.
func (f *Engine) sawBarrier(id string) bool {
	if !strings.HasPrefix(id, barrierPrefix) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.barriersSeen[id] = true
	return true
}
