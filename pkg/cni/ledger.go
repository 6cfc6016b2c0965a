package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// The ledger is netshim's own record of the CNI attachments it started:
// one small JSON file per sandbox under netshim's state directory, written
// (and synced) before the first ADD runs and shrunk only after a DEL
// succeeded.
//
// It exists because libcni's cache directory cannot say whose an
// attachment is. The cache (/var/lib/cni by default) is shared by every
// CNI user on the host (containerd, CRI-O, podman, nerdctl, a second
// netshim), possibly on the same network name from the same conf dir, and
// its entries carry nothing a runtime can trust as its own mark: container
// IDs are Docker-style hex everywhere, and CNI_ARGS like K8S_POD_* are set
// by every Kubernetes runtime. GC must DEL only what netshim made, so it
// asks the ledger, which only netshim writes and which survives restarts.
//
// The ledger also keeps what an ADD that failed halfway never got into
// libcni's cache (libcni caches only a complete ADD): the config and
// arguments of the attempt, so that teardown and GC can still DEL it and
// free an address the first plugins took.

// ledgerVersion is the format of a ledger file.
const ledgerVersion = 1

// ledgerEntry is one attachment netshim started: what its ADD was given.
type ledgerEntry struct {
	Network string `json:"network"`
	IfName  string `json:"ifName"`
	// Config is the network configuration list of the ADD, as bytes.
	Config         json.RawMessage `json:"config"`
	CniArgs        [][2]string     `json:"cniArgs,omitempty"`
	CapabilityArgs map[string]any  `json:"capabilityArgs,omitempty"`
}

// ledgerFile is the content of one sandbox's file.
type ledgerFile struct {
	Version     int           `json:"version"`
	ContainerID string        `json:"containerID"`
	Attachments []ledgerEntry `json:"attachments"`
}

// ledger reads and writes the files. A nil *ledger is a disabled one:
// every method is then a no-op that reports nothing recorded.
type ledger struct {
	dir string
	// mu makes each read-modify-write of a file atomic with respect to
	// the others (teardown and GC may touch the same sandbox).
	mu sync.Mutex
}

func newLedger(dir string) *ledger {
	if dir == "" {
		return nil
	}
	return &ledger{dir: dir}
}

// ledgerIDPattern is what a container ID must look like to name a file:
// Docker's IDs are hex; anything with a separator or a leading dot could
// escape the directory or hide a file.
var ledgerIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

const ledgerSuffix = ".json"

func (l *ledger) path(id string) (string, error) {
	if !ledgerIDPattern.MatchString(id) {
		return "", fmt.Errorf("container ID %q cannot be recorded: it must match %s", id, ledgerIDPattern)
	}
	return filepath.Join(l.dir, id+ledgerSuffix), nil
}

// record adds entries to id's file (replacing those with the same network
// and interface) and syncs it to disk before returning.
func (l *ledger) record(id string, entries ...ledgerEntry) error {
	if l == nil {
		return nil
	}
	for _, e := range entries {
		if !json.Valid(e.Config) {
			return fmt.Errorf("recording attachment of %s to network %q: its config is not JSON", id, e.Network)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	have, err := l.readLocked(id)
	if err != nil {
		return err
	}
	for _, e := range entries {
		have = slicesDeleteFunc(have, func(h ledgerEntry) bool { return h.Network == e.Network && h.IfName == e.IfName })
		have = append(have, e)
	}
	return l.writeLocked(id, have)
}

// get returns id's recorded attachments; none is not an error.
func (l *ledger) get(id string) ([]ledgerEntry, error) {
	if l == nil {
		return nil, nil
	}
	if !ledgerIDPattern.MatchString(id) {
		return nil, nil // record refuses such IDs: nothing can be there
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.readLocked(id)
}

// remove forgets one attachment of id, and id's file once it is empty.
// Forgetting what is not there is not an error.
func (l *ledger) remove(id, network, ifName string) error {
	if l == nil || !ledgerIDPattern.MatchString(id) {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	have, err := l.readLocked(id)
	if err != nil {
		return err
	}
	kept := slicesDeleteFunc(have, func(h ledgerEntry) bool { return h.Network == network && h.IfName == ifName })
	if len(kept) == len(have) {
		return nil
	}
	return l.writeLocked(id, kept)
}

// all returns every recorded attachment by container ID. Files that
// cannot be read are left out and reported: GC then treats their
// attachments as not provably netshim's, which only delays their release.
func (l *ledger) all() (map[string][]ledgerEntry, error) {
	out := map[string][]ledgerEntry{}
	if l == nil {
		return out, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	names, err := os.ReadDir(l.dir)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("reading netshim's attachment ledger %s: %w", l.dir, err)
	}
	var errs []error
	for _, n := range names {
		id, ok := strings.CutSuffix(n.Name(), ledgerSuffix)
		if !ok || n.IsDir() || !ledgerIDPattern.MatchString(id) {
			continue // temp files of an interrupted write, strays
		}
		entries, err := l.readLocked(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(entries) > 0 {
			out[id] = entries
		}
	}
	return out, errors.Join(errs...)
}

func (l *ledger) readLocked(id string) ([]ledgerEntry, error) {
	p, err := l.path(id)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading attachment ledger: %w", err)
	}
	var f ledgerFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("attachment ledger file %s is corrupt: %w", p, err)
	}
	if f.Version != ledgerVersion || f.ContainerID != id {
		return nil, fmt.Errorf("attachment ledger file %s has version %d for container %q, want version %d for %q", p, f.Version, f.ContainerID, ledgerVersion, id)
	}
	return f.Attachments, nil
}

// writeLocked replaces id's file atomically (temp file, fsync, rename,
// fsync of the directory), or removes it when entries is empty: a crash
// leaves the old or the new content, never a torn file.
func (l *ledger) writeLocked(id string, entries []ledgerEntry) error {
	p, err := l.path(id)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing attachment ledger file: %w", err)
		}
		return syncDir(l.dir)
	}
	sort.SliceStable(entries, func(i, j int) bool {
		if entries[i].Network != entries[j].Network {
			return entries[i].Network < entries[j].Network
		}
		return entries[i].IfName < entries[j].IfName
	})
	raw, err := json.Marshal(ledgerFile{Version: ledgerVersion, ContainerID: id, Attachments: entries})
	if err != nil {
		return fmt.Errorf("encoding attachment ledger entry of %s: %w", id, err)
	}
	// 0700/0600: the entries hold pod names and port mappings.
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return fmt.Errorf("creating attachment ledger directory: %w", err)
	}
	tmp, err := os.CreateTemp(l.dir, "."+id+".tmp-")
	if err != nil {
		return fmt.Errorf("writing attachment ledger: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(raw); err != nil {
		return fmt.Errorf("writing attachment ledger: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing attachment ledger: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing attachment ledger: %w", err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("writing attachment ledger: %w", err)
	}
	done = true
	return syncDir(l.dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("syncing attachment ledger directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing attachment ledger directory: %w", err)
	}
	return nil
}

// slicesDeleteFunc is slices.DeleteFunc on a copy: the caller's slice is
// not modified.
func slicesDeleteFunc(s []ledgerEntry, del func(ledgerEntry) bool) []ledgerEntry {
	out := make([]ledgerEntry, 0, len(s))
	for _, e := range s {
		if !del(e) {
			out = append(out, e)
		}
	}
	return out
}
