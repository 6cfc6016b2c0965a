// Package store is netshim's in-memory index of the Docker containers it
// owns (pod sandboxes and their containers). Every read kubelet polls
// (ListPodSandbox, PodSandboxStatus, ListContainers, ContainerStatus) is
// answered from it, so polling costs no Docker round trip.
//
// Records are immutable once stored: an update stores a modified copy.
// Readers therefore hold plain pointers with no lock, and a reader never
// sees a record half-updated.
package store

import (
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
)

// Kind tells sandboxes from workload containers.
type Kind uint8

const (
	KindSandbox Kind = iota + 1
	KindContainer
)

// State is a container's lifecycle state as Docker reports it, reduced to
// what the CRI distinguishes.
type State uint8

const (
	StateUnknown State = iota
	StateCreated
	StateRunning
	StateExited
)

// Record is what the index knows of one container.
type Record struct {
	ID   string
	Kind Kind
	// Name is the Docker name, without the leading '/'.
	Name string
	// SandboxID is the owning sandbox of a workload container.
	SandboxID string
	// DockerLabels are the container's labels as Docker has them; the
	// runtime decodes CRI labels, annotations and metadata from them.
	DockerLabels map[string]string
	Image        string // as requested
	ImageID      string // resolved image ID
	State        State
	Pid          int
	// Timestamps in unix nanoseconds; 0 when not reached.
	CreatedAt, StartedAt, FinishedAt int64
	ExitCode                         int
	OOMKilled                        bool
	// Error is Docker's error for a container that failed to start.
	Error string
	// WritableLayerDir is the container's writable layer on the host
	// when Docker's inspect reports it (overlay2's UpperDir), else "".
	WritableLayerDir string
	// Sandbox and Container are the record's decoded labels
	// (pkg/dockerservice/labelcodec): Sandbox on a sandbox's record,
	// Container on a workload container's, nil when they could not be
	// decoded. Read them through SandboxInfo and ContainerInfo; the store
	// never looks inside.
	Sandbox   *labelcodec.Sandbox
	Container *labelcodec.Container
	// Local marks a record netshim keeps for something that is not a
	// Docker container (a pause-less sandbox): Docker's listings never
	// drop it, only Delete does.
	Local bool

	gen uint64
}

// SandboxInfo is the record's decoded sandbox labels, empty (never nil)
// when it has none.
func (r *Record) SandboxInfo() *labelcodec.Sandbox {
	if r.Sandbox != nil {
		return r.Sandbox
	}
	return labelcodec.EmptySandbox()
}

// ContainerInfo is the record's decoded container labels, empty (never
// nil) when it has none.
func (r *Record) ContainerInfo() *labelcodec.Container {
	if r.Container != nil {
		return r.Container
	}
	return labelcodec.EmptyContainer()
}

// Running reports whether the container's process is alive.
func (r *Record) Running() bool { return r.State == StateRunning }

// Store is the index. The zero value is not usable; use New.
type Store struct {
	mu        sync.RWMutex
	byID      map[string]*Record
	bySandbox map[string]map[string]*Record
	// deleted remembers when each ID was deleted, so that a listing
	// started before the delete cannot bring the record back.
	deleted map[string]uint64
	gen     uint64
	// onChange is told the ID of every record stored or deleted.
	onChange func(id string)
}

// New returns an empty store.
func New() *Store {
	return &Store{byID: map[string]*Record{}, bySandbox: map[string]map[string]*Record{}, deleted: map[string]uint64{}}
}

// OnChange registers fn to be told the ID of every record stored or
// deleted, once the store already holds the change (readers may lag until
// the write's lock is released). fn runs under the store's lock: it must
// return at once and must not call the store. Set it before the store is
// shared.
func (s *Store) OnChange(fn func(id string)) {
	s.mu.Lock()
	s.onChange = fn
	s.mu.Unlock()
}

func (s *Store) changed(id string) {
	if s.onChange != nil {
		s.onChange(id)
	}
}

// Put stores r, replacing any record with the same ID. The store owns r
// afterwards: callers must not modify it.
func (s *Store) Put(r *Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(r)
}

func (s *Store) putLocked(r *Record) {
	s.gen++
	r.gen = s.gen
	delete(s.deleted, r.ID)
	if old, ok := s.byID[r.ID]; ok && old.SandboxID != r.SandboxID {
		s.unlinkLocked(old)
	}
	s.byID[r.ID] = r
	if r.Kind == KindContainer && r.SandboxID != "" {
		m := s.bySandbox[r.SandboxID]
		if m == nil {
			m = map[string]*Record{}
			s.bySandbox[r.SandboxID] = m
		}
		m[r.ID] = r
	}
	s.changed(r.ID)
}

func (s *Store) unlinkLocked(r *Record) {
	if m := s.bySandbox[r.SandboxID]; m != nil {
		delete(m, r.ID)
		if len(m) == 0 {
			delete(s.bySandbox, r.SandboxID)
		}
	}
}

// Update applies fn to a copy of the record with that ID and stores the
// copy. It reports whether the record existed.
func (s *Store) Update(id string, fn func(*Record)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.byID[id]
	if !ok {
		return false
	}
	r := *old
	r.DockerLabels = maps.Clone(old.DockerLabels)
	fn(&r)
	s.putLocked(&r)
	return true
}

// Apply stores what fn makes of the current record with r's ID (nil when
// there is none), unless that ID was deleted after generation since: an
// inspect begun before a container was destroyed must not bring it back.
// fn returns the record to store, or nil to keep the current one. Apply
// returns the record the store holds afterwards (nil if none).
func (s *Store) Apply(id string, since uint64, fn func(current *Record) *Record) *Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.deleted[id]; ok && g > since {
		return nil
	}
	cur := s.byID[id]
	r := fn(cur)
	if r == nil {
		return cur
	}
	s.putLocked(r)
	return r
}

// Delete removes the record with that ID, if any.
func (s *Store) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.deleted[id] = s.gen
	if r, ok := s.byID[id]; ok {
		s.unlinkLocked(r)
		delete(s.byID, id)
		s.changed(id)
	}
}

// Get returns the record with exactly that ID.
func (s *Store) Get(id string) (*Record, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.byID[id]
	return r, ok
}

// ErrAmbiguous is returned by Resolve for a prefix matching several IDs.
type ErrAmbiguous struct{ Prefix string }

func (e ErrAmbiguous) Error() string {
	return fmt.Sprintf("ID prefix %q matches more than one container", e.Prefix)
}

// Resolve finds a record by full ID or unique ID prefix, as crictl and
// Docker accept. It returns (nil, nil) when nothing matches.
func (s *Store) Resolve(idOrPrefix string) (*Record, error) {
	if idOrPrefix == "" {
		return nil, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r, ok := s.byID[idOrPrefix]; ok {
		return r, nil
	}
	var match *Record
	for id, r := range s.byID {
		if strings.HasPrefix(id, idOrPrefix) {
			if match != nil {
				return nil, ErrAmbiguous{idOrPrefix}
			}
			match = r
		}
	}
	return match, nil
}

// List returns a snapshot of the records of one kind.
func (s *Store) List(kind Kind) []*Record {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Record, 0, len(s.byID))
	for _, r := range s.byID {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// ContainersOf returns the workload containers of a sandbox.
func (s *Store) ContainersOf(sandboxID string) []*Record {
	s.mu.RLock()
	defer s.mu.RUnlock()
	m := s.bySandbox[sandboxID]
	out := make([]*Record, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	return out
}

// Len is the number of records.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byID)
}

// Generation returns a marker to pass to Replace: records stored after it
// are newer than a listing started after it.
func (s *Store) Generation() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gen
}

// Replace makes the store hold exactly the records of a full listing
// started at generation since, except that records stored after since (by
// a write racing the listing) are kept rather than overwritten or dropped,
// and records deleted after since stay deleted.
func (s *Store) Replace(all []*Record, since uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	listed := make(map[string]bool, len(all))
	for _, r := range all {
		listed[r.ID] = true
		if old, ok := s.byID[r.ID]; ok && old.gen > since {
			continue
		}
		if g, ok := s.deleted[r.ID]; ok && g > since {
			continue
		}
		s.putLocked(r)
	}
	// Tombstones older than this listing have done their job.
	for id, g := range s.deleted {
		if g <= since {
			delete(s.deleted, id)
		}
	}
	for id, r := range s.byID {
		if !listed[id] && r.gen <= since && !r.Local {
			// A change like any other: answers cached by generation
			// must not outlive it (a listing that only drops records,
			// the last ones among them, stores nothing).
			s.gen++
			s.unlinkLocked(r)
			delete(s.byID, id)
			s.changed(id)
		}
	}
}
