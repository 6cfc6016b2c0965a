// Package podstate is netshim's own state of pod sandboxes, the part the
// engine does not keep: the in-memory mirror of the checkpoint files (so
// that no hot path reads them from disk), why a checkpoint could not be
// loaded at start-up, the names of sandboxes a RunPodSandbox is creating,
// the pause-less sandboxes last seen without their pinned files, and the
// lock that serialises one sandbox's lifecycle. It keeps the checkpoint
// files too (Load, Save, Remove): a change is written to disk first, then
// to the mirror, so the mirror never holds what a restart would lose.
//
// The store owns its lock and hands out no map. Checkpoint records are
// immutable once stored, like the index's records (package store): a
// change stores a modified copy, so a reader holds a plain pointer and
// never sees a record half-written. Every change of what the store holds
// bumps its generation, which the caches of the answers kubelet polls
// are keyed by.
package podstate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/keylock"
)

// Issue is why a sandbox's checkpoint could not be loaded.
type Issue struct {
	Err string
	// Rewrite is set when the file was moved aside (corrupt): the
	// rebuilt checkpoint is written in its place. A newer version's file
	// is left for the netshim that wrote it, and an unreadable one cannot
	// be trusted to take a write: those are rebuilt in memory only.
	Rewrite bool
}

// Store holds the state of the sandboxes netshim knows. The zero value is
// not usable; call New.
type Store struct {
	// disk keeps the checkpoint files.
	disk *checkpoint.Manager
	// lifecycle serialises the steps of one sandbox (run, stop, remove,
	// start-up teardown and recovery) and the writes of its checkpoint's
	// disk and memory copies; different sandboxes proceed in parallel.
	lifecycle keylock.Locks
	gen       atomic.Uint64

	mu        sync.Mutex
	sandboxes map[string]*checkpoint.PodSandbox
	issues    map[string]Issue
	creating  map[string]bool
	unpinned  map[string]bool
}

// New returns an empty store whose checkpoint files disk keeps; Load
// reads them.
func New(disk *checkpoint.Manager) *Store {
	return &Store{
		disk:      disk,
		sandboxes: map[string]*checkpoint.PodSandbox{},
		issues:    map[string]Issue{},
		creating:  map[string]bool{},
		unpinned:  map[string]bool{},
	}
}

// Generation changes whenever the sandboxes, the load issues or the set of
// unpinned sandboxes change. It is bumped after the change is made, so an
// answer built after reading a generation is at least as new as it.
func (s *Store) Generation() uint64 { return s.gen.Load() }

// changed bumps the generation; called with mu held, after the change.
func (s *Store) changed() { s.gen.Add(1) }

// Lock takes the lifecycle lock of one sandbox, waiting at most as long as
// ctx allows.
func (s *Store) Lock(ctx context.Context, id string) (unlock func(), err error) {
	return s.lifecycle.Lock(ctx, id)
}

// Load fills the mirror from the checkpoint files. No single checkpoint
// can stop the daemon: one that is corrupt (moved aside by the manager),
// written by a newer netshim, or unreadable is reported, logged and
// skipped (Issues), and its sandbox is rebuilt from what is still known
// once the engine's state is read. A crash loop under systemd would leave
// every pod on the node unmanaged for the sake of one file. Only a
// checkpoint directory that cannot be listed is an error.
func (s *Store) Load() error {
	ids, err := s.disk.List()
	if err != nil {
		return fmt.Errorf("listing checkpoints: %w", err)
	}
	for _, id := range ids {
		cp, err := s.disk.Get(id)
		if err != nil {
			var (
				ce *checkpoint.CorruptError
				ue *checkpoint.UnsupportedVersionError
			)
			issue := Issue{Err: err.Error()}
			switch {
			case errors.As(err, &ce):
				// The path is free again: the rebuilt checkpoint
				// can be written there.
				issue.Rewrite = ce.MovedTo != ""
				klog.ErrorS(err, "Corrupt sandbox checkpoint set aside; the sandbox will be rebuilt from its container and the CNI cache", "podSandboxID", id, "movedTo", ce.MovedTo)
			case errors.As(err, &ue):
				klog.ErrorS(err, "Sandbox checkpoint from a newer netshim left in place; the sandbox will be rebuilt in memory from its container and the CNI cache", "podSandboxID", id)
			default:
				klog.ErrorS(err, "Unreadable sandbox checkpoint skipped; the sandbox will be rebuilt in memory from its container and the CNI cache", "podSandboxID", id)
			}
			s.SetIssue(id, issue)
			continue
		}
		s.Put(cp)
	}
	klog.InfoS("Loaded sandbox checkpoints", "count", s.Len(), "skipped", len(s.Issues()))
	return nil
}

// Save writes the checkpoint of a sandbox to disk, then to the mirror.
// The store keeps cp: the caller must not modify it afterwards.
func (s *Store) Save(cp *checkpoint.PodSandbox) error {
	if err := s.disk.Put(cp); err != nil {
		return fmt.Errorf("writing checkpoint of sandbox %s: %w", cp.SandboxID, err)
	}
	s.Put(cp)
	return nil
}

// Update changes the checkpoint of sandbox id, copy on write: fn gets a
// copy of the current one (a shallow copy: a nested struct fn changes it
// copies first), which is then saved, to disk and then to the mirror. The
// caller holds the sandbox's lifecycle lock (Lock), which orders the
// writers of one sandbox; readers keep the checkpoint they got. It
// returns the saved checkpoint, or nil with no error when the sandbox has
// none. When the file cannot be written, the mirror keeps the old
// checkpoint and the changed copy is returned with the error, for a caller
// that keeps it in memory anyway (Replace).
func (s *Store) Update(id string, fn func(cp *checkpoint.PodSandbox)) (*checkpoint.PodSandbox, error) {
	cur := s.Get(id)
	if cur == nil {
		return nil, nil
	}
	updated := *cur
	fn(&updated)
	if err := s.Save(&updated); err != nil {
		return &updated, err
	}
	return &updated, nil
}

// WriteFile writes the checkpoint of a sandbox to disk only: a rebuilt
// checkpoint goes into the mirror whether or not its file could be
// written.
func (s *Store) WriteFile(cp *checkpoint.PodSandbox) error {
	return s.disk.Put(cp)
}

// Remove deletes the checkpoint of a sandbox from disk, then forgets the
// sandbox (Delete).
func (s *Store) Remove(id string) error {
	if err := s.disk.Remove(id); err != nil {
		return fmt.Errorf("removing checkpoint of sandbox %s: %w", id, err)
	}
	s.Delete(id)
	return nil
}

// Get returns the checkpoint of a sandbox, or nil. The record must not be
// modified.
func (s *Store) Get(id string) *checkpoint.PodSandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sandboxes[id]
}

// Put stores the checkpoint of a sandbox in the mirror only, replacing
// its previous one: for a sandbox whose file could not be written, kept
// in memory for this process's answers. The store keeps cp: the caller
// must not modify it afterwards.
func (s *Store) Put(cp *checkpoint.PodSandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandboxes[cp.SandboxID] = cp
	s.changed()
}

// Replace stores cp in place of the sandbox's checkpoint only if the store
// still holds one: a change made while the sandbox was being removed must
// not bring it back. It reports whether cp was stored.
func (s *Store) Replace(cp *checkpoint.PodSandbox) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sandboxes[cp.SandboxID]; !ok {
		return false
	}
	s.sandboxes[cp.SandboxID] = cp
	s.changed()
	return true
}

// Delete forgets a sandbox: its checkpoint and its load issue.
func (s *Store) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sandboxes, id)
	delete(s.issues, id)
	s.changed()
}

// All returns the checkpoints of every sandbox, in no particular order.
// The records must not be modified.
func (s *Store) All() []*checkpoint.PodSandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.sandboxes))
}

// Select returns the checkpoints keep accepts, in no particular order,
// without copying the others: ListPodSandbox calls it on every poll. keep
// runs under the store's lock and must not call the store. The records
// must not be modified.
func (s *Store) Select(keep func(*checkpoint.PodSandbox) bool) []*checkpoint.PodSandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*checkpoint.PodSandbox
	for _, cp := range s.sandboxes {
		if keep(cp) {
			out = append(out, cp)
		}
	}
	return out
}

// Len is the number of sandboxes with a checkpoint.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sandboxes)
}

// IDs returns the IDs of the sandboxes with a checkpoint, sorted.
func (s *Store) IDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.sandboxes))
}

// KnownIDs returns the IDs of the sandboxes with a checkpoint and of those
// whose checkpoint could not be loaded: every sandbox whose network
// netshim may still hold.
func (s *Store) KnownIDs() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make(map[string]bool, len(s.sandboxes)+len(s.issues))
	for id := range s.sandboxes {
		ids[id] = true
	}
	for id := range s.issues {
		ids[id] = true
	}
	return ids
}

// SetIssue records why a sandbox's checkpoint could not be loaded.
func (s *Store) SetIssue(id string, issue Issue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.issues[id] = issue
	s.changed()
}

// Issues returns a copy of the load issues, by sandbox ID; nil when there
// are none, the usual case, so that Status (which kubelet polls) costs no
// allocation.
func (s *Store) Issues() map[string]Issue {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.issues) == 0 {
		return nil
	}
	return maps.Clone(s.issues)
}

// Reserve marks a sandbox name as being created. It reports false if a
// creation of that name is already in flight; otherwise release ends the
// reservation.
func (s *Store) Reserve(name string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creating[name] {
		return nil, false
	}
	s.creating[name] = true
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.creating, name)
	}, true
}

// HasUnpinned reports whether any sandbox was last seen without its
// pinned files.
func (s *Store) HasUnpinned() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.unpinned) > 0
}

// SetUnpinned records the sandboxes now seen without their pinned files,
// and reports whether that set changed (and with it the generation).
func (s *Store) SetUnpinned(gone map[string]bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := len(gone) != len(s.unpinned)
	for id := range gone {
		changed = changed || !s.unpinned[id]
	}
	if changed {
		s.unpinned = maps.Clone(gone)
		s.changed()
	}
	return changed
}
