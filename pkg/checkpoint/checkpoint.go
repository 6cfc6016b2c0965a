// Package checkpoint persists, per pod sandbox, what network teardown needs
// after the sandbox container or the daemon itself is gone.
//
// Each sandbox has one file, <sandboxID>.json, holding
//
//	{"checksum":"sha256:<hex>","data":<PodSandbox JSON>}
//
// The checksum covers the exact bytes of the "data" value so that a torn or
// hand-edited file is detected instead of silently tearing down the wrong
// ports or IPs.
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CurrentVersion is the PodSandbox format written by Put.
const CurrentVersion = 1

const (
	fileSuffix     = ".json"
	tempPrefix     = ".tmp-"
	corruptInfix   = ".corrupt-"
	checksumPrefix = "sha256:"
)

// ErrNotFound is returned (wrapped) by Get when no checkpoint exists.
var ErrNotFound = errors.New("checkpoint not found")

// PortMapping is one hostPort mapping (protocol lower case: "tcp","udp","sctp").
type PortMapping struct {
	Protocol      string `json:"protocol"`
	ContainerPort int32  `json:"containerPort"`
	HostPort      int32  `json:"hostPort"`
	HostIP        string `json:"hostIP,omitempty"`
}

// PodSandbox is the checkpoint of one sandbox.
type PodSandbox struct {
	Version       int             `json:"version"` // set to CurrentVersion by Put if 0
	SandboxID     string          `json:"sandboxID"`
	Name          string          `json:"name"`
	Namespace     string          `json:"namespace"`
	UID           string          `json:"uid"`
	Attempt       uint32          `json:"attempt"`
	HostNetwork   bool            `json:"hostNetwork"`
	PortMappings  []PortMapping   `json:"portMappings,omitempty"`
	IPs           []string        `json:"ips,omitempty"`           // pod IPs after network setup
	NetworkResult json.RawMessage `json:"networkResult,omitempty"` // raw CNI result, for verbose status
	CreatedAt     int64           `json:"createdAt"`               // unix nanoseconds
	// Setup records how far RunPodSandbox got with the pod network:
	// SetupPending is written before the infra container starts, SetupReady
	// only after the network ADD succeeded (with IPs and NetworkResult). A
	// daemon killed in between finds "pending" at start-up and knows the
	// sandbox never became ready and what its ADD may have allocated must
	// be released. Empty in checkpoints written before the field existed
	// (see NetworkReady).
	Setup string `json:"setup,omitempty"`
	// TeardownStarted is written before the first TearDownPod (CNI DEL)
	// of a stop: from then on the sandbox is not ready, also for a netshim
	// killed during or after the DEL and before the infra container
	// stopped, which would otherwise find a running infra container and a
	// ready setup, and report READY an IP the DEL gave back to the pool.
	TeardownStarted bool `json:"teardownStarted,omitempty"`
	// NetworkTornDown is written once TearDownPod succeeded, so that
	// Remove after Stop, also after a restart, does not run CNI DEL a
	// second time. Until it is set, every Stop/Remove retries the
	// teardown.
	NetworkTornDown bool `json:"networkTornDown,omitempty"`
	// NetNS is the sandbox's pinned network namespace (a bind mount under
	// netshim's --netns-dir, --sandbox-netns=pinned), written before the
	// infra container starts in it; empty for a sandbox in the infra
	// container's own netns. Teardown DELs with it, also after the
	// container is gone, and then removes it.
	NetNS string `json:"netns,omitempty"`
	// UserNS is the pod's own user namespace (hostUsers: false), pinned
	// beside NetNS, which it owns; every container of the pod joins it.
	// Removed with NetNS.
	UserNS string `json:"userns,omitempty"`
	// Pauseless is set for a sandbox that has no infra container
	// (--sandbox-netns=pauseless): netshim holds all of its namespaces,
	// and this checkpoint is the only record of the sandbox. nil for a
	// sandbox with an infra container.
	Pauseless *Pauseless `json:"pauseless,omitempty"`
	// Mode is the sandbox mode the sandbox was made in (docker, pinned,
	// pauseless) and ModeReason the code of why it got that one
	// (--sandbox-netns=auto picks per pod). Empty in checkpoints written
	// before the fields existed, and in those rebuilt from an infra
	// container's labels.
	Mode       string `json:"mode,omitempty"`
	ModeReason string `json:"modeReason,omitempty"`
}

// Pauseless is what a sandbox without an infra container needs beyond
// the fields every sandbox has: the namespaces and files its containers
// join, what the pod asked of them, and the sandbox's CRI identity, which
// for other sandboxes lives in the infra container's labels.
type Pauseless struct {
	// IPC and UTS are the pinned namespaces (bind mounts in netshim's
	// --netns-dir, like NetNS); Shm is the pod's /dev/shm, a tmpfs
	// there too, bound into each container.
	IPC string `json:"ipc"`
	UTS string `json:"uts"`
	Shm string `json:"shm,omitempty"`
	// Labels are the Docker labels an infra container would have had:
	// they carry the sandbox's CRI metadata, labels, annotations and
	// namespace options in the format netshim decodes for every sandbox.
	Labels map[string]string `json:"labels"`
	// What every container of the pod is created with: Docker writes
	// hostname and resolv.conf per container. Sysctls are the pod's
	// namespaced sysctls, which netshim wrote into the pinned namespaces
	// before the CNI ADD (kept for the record: no container gets them).
	Hostname     string            `json:"hostname,omitempty"`
	DNS          *DNS              `json:"dns,omitempty"`
	Sysctls      map[string]string `json:"sysctls,omitempty"`
	CgroupParent string            `json:"cgroupParent,omitempty"`
	// Stopped is written by StopPodSandbox: a stopped pause-less sandbox
	// stays NOTREADY across restarts, with or without its namespaces.
	Stopped bool `json:"stopped,omitempty"`
}

// DNS is a pod's DNS configuration.
type DNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// Values of PodSandbox.Setup.
const (
	SetupPending = "pending"
	SetupReady   = "ready"
)

// NetworkReady says whether the sandbox's network setup completed: host
// network pods have none to do. A checkpoint written before Setup existed
// is taken as ready when it records IPs, which that version wrote only
// after a successful ADD.
func (cp *PodSandbox) NetworkReady() bool {
	switch cp.Setup {
	case SetupReady:
		return true
	case SetupPending:
		return false
	}
	return cp.HostNetwork || len(cp.IPs) > 0
}

// UnsupportedVersionError is returned by Get for a checkpoint written by a
// newer netshim (a rollback after an upgrade). The file is left in place for
// that version; this one must not act on a format it does not know.
type UnsupportedVersionError struct {
	Path    string
	Version int
}

func (e *UnsupportedVersionError) Error() string {
	return fmt.Sprintf("checkpoint %s has version %d, newer than this netshim supports (%d): left in place for the netshim that wrote it", e.Path, e.Version, CurrentVersion)
}

// CorruptError is returned by Get when a file fails to parse or its checksum
// does not match. The file has already been moved aside (renamed to
// "<file>.corrupt-<unix-nanos>") so the daemon does not trip over it again;
// Path is the original path, MovedTo the new one. If moving it aside failed,
// MovedTo is empty and Err also carries the rename error.
type CorruptError struct {
	Path    string
	MovedTo string
	Err     error
}

func (e *CorruptError) Error() string {
	if e.MovedTo == "" {
		return fmt.Sprintf("corrupt checkpoint %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("corrupt checkpoint %s (moved to %s): %v", e.Path, e.MovedTo, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// envelope is the on-disk wrapper. Data stays raw so the checksum is verified
// against the bytes on disk, not against a re-encoding of them.
type envelope struct {
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// Manager stores sandbox checkpoints in one directory. It is safe for
// concurrent use. Only one Manager per directory is expected.
type Manager struct {
	dir   string
	locks keyedMutex
}

// NewManager returns a Manager for dir, creating dir (0700) if missing.
func NewManager(dir string) (*Manager, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating checkpoint dir %s: %w", dir, err)
	}
	m := &Manager{dir: dir}
	m.removeStaleTempFiles()
	return m, nil
}

// Dir returns the directory holding the checkpoint files.
func (m *Manager) Dir() string { return m.dir }

// Put atomically writes cp, replacing any existing checkpoint for the same
// sandbox. A zero Version is stored as CurrentVersion; cp itself is not
// modified.
func (m *Manager) Put(cp *PodSandbox) error {
	if cp == nil {
		return errors.New("checkpoint: nil PodSandbox")
	}
	if err := validateID(cp.SandboxID); err != nil {
		return err
	}
	stored := *cp
	if stored.Version == 0 {
		stored.Version = CurrentVersion
	}
	data, err := json.Marshal(&stored)
	if err != nil {
		return fmt.Errorf("encoding checkpoint for sandbox %s: %w", cp.SandboxID, err)
	}
	content := encodeFile(data)

	unlock := m.locks.lock(cp.SandboxID)
	defer unlock()
	return m.writeAtomic(cp.SandboxID, content)
}

// Get reads the checkpoint of sandbox id. It returns an error wrapping
// ErrNotFound if there is none, or a *CorruptError if the file is damaged.
func (m *Manager) Get(id string) (*PodSandbox, error) {
	if err := validateID(id); err != nil {
		return nil, err
	}
	path := m.path(id)

	// Held across read and move-aside so a concurrent Put of a fresh
	// checkpoint is never the file that gets moved away.
	unlock := m.locks.lock(id)
	defer unlock()

	content, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint %s: %w", path, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading checkpoint %s: %w", path, err)
	}
	cp, err := decodeFile(content, id)
	if err != nil {
		return nil, m.moveAside(path, err)
	}
	// A newer daemon wrote this; keep the file for it rather than moving it
	// aside as corrupt.
	if cp.Version > CurrentVersion {
		return nil, &UnsupportedVersionError{Path: path, Version: cp.Version}
	}
	return cp, nil
}

// Remove deletes the checkpoint of sandbox id. A missing checkpoint is not an
// error, so teardown can be retried.
func (m *Manager) Remove(id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	path := m.path(id)

	unlock := m.locks.lock(id)
	defer unlock()

	if err := os.Remove(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("removing checkpoint %s: %w", path, err)
	}
	// Without this a crash could resurrect the checkpoint and trigger a
	// second teardown of an already released sandbox.
	return syncDir(m.dir)
}

// List returns the sorted sandbox IDs that have a checkpoint file. Temp files
// and moved-aside corrupt files are not checkpoints and are skipped.
func (m *Manager) List() ([]string, error) {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return nil, fmt.Errorf("listing checkpoint dir %s: %w", m.dir, err)
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		// Entries that are not regular files are listed too: Get then
		// reports them (a directory or device where a checkpoint should
		// be) rather than the sandbox vanishing without a word.
		id, ok := strings.CutSuffix(e.Name(), fileSuffix)
		if !ok || validateID(id) != nil {
			continue
		}
		ids = append(ids, id)
	}
	// File name order is not ID order ("a-b.json" < "a.json" but "a" < "a-b").
	sort.Strings(ids)
	return ids, nil
}

func (m *Manager) path(id string) string {
	return filepath.Join(m.dir, id+fileSuffix)
}

// writeAtomic makes the new content visible under the final name only once
// it is fully on disk, so readers and crashes see either the old or the new
// checkpoint, never a partial one.
func (m *Manager) writeAtomic(id string, content []byte) (err error) {
	path := m.path(id)
	// The leading dot keeps temp files out of List even if a crash leaves
	// them behind; CreateTemp creates them 0600.
	tmp, err := os.CreateTemp(m.dir, tempPrefix+id+"-*")
	if err != nil {
		return fmt.Errorf("creating temp file for checkpoint %s: %w", path, err)
	}
	tmpPath := tmp.Name()
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmpPath)
		}
	}()

	if _, err = tmp.Write(content); err != nil {
		return fmt.Errorf("writing temp file %s for checkpoint %s: %w", tmpPath, path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("syncing temp file %s for checkpoint %s: %w", tmpPath, path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("closing temp file %s for checkpoint %s: %w", tmpPath, path, err)
	}
	if err = os.Rename(tmpPath, path); err != nil {
		return fmt.Errorf("renaming %s to checkpoint %s: %w", tmpPath, path, err)
	}
	// The rename is only durable once the directory entry is.
	return syncDir(m.dir)
}

// moveAside renames a damaged file out of the way so that every later Get
// reports ErrNotFound instead of failing forever on the same bytes, while
// keeping the bytes for inspection.
func (m *Manager) moveAside(path string, reason error) error {
	movedTo := path + corruptInfix + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := os.Rename(path, movedTo); err != nil {
		return &CorruptError{Path: path, Err: errors.Join(reason, fmt.Errorf("moving aside: %w", err))}
	}
	_ = syncDir(m.dir) // best effort: the error being reported is the corruption
	return &CorruptError{Path: path, MovedTo: movedTo, Err: reason}
}

// removeStaleTempFiles deletes temp files left by a crash mid-Put; they are
// never read, this only keeps the directory from accumulating garbage.
func (m *Manager) removeStaleTempFiles() {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), tempPrefix) {
			_ = os.Remove(filepath.Join(m.dir, e.Name()))
		}
	}
}

// encodeFile builds the file by hand rather than marshalling envelope, because
// encoding/json re-compacts and re-escapes RawMessage values, which could make
// the written data differ from the bytes the checksum was computed over.
func encodeFile(data []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"checksum":"`)
	b.WriteString(checksum(data))
	b.WriteString(`","data":`)
	b.Write(data)
	b.WriteString("}\n")
	return b.Bytes()
}

// decodeFile verifies and parses a checkpoint file; any error means corrupt.
func decodeFile(content []byte, id string) (*PodSandbox, error) {
	var env envelope
	if err := json.Unmarshal(content, &env); err != nil {
		return nil, fmt.Errorf("parsing file: %w", err)
	}
	if len(env.Data) == 0 {
		return nil, errors.New("no data")
	}
	if got := checksum(env.Data); got != env.Checksum {
		return nil, fmt.Errorf("checksum mismatch: file says %q, data has %q", env.Checksum, got)
	}
	var cp PodSandbox
	if err := json.Unmarshal(env.Data, &cp); err != nil {
		return nil, fmt.Errorf("parsing data: %w", err)
	}
	// A checkpoint copied or renamed onto another sandbox's name would make
	// teardown act on the wrong sandbox.
	if cp.SandboxID != id {
		return nil, fmt.Errorf("data is for sandbox %q, not %q", cp.SandboxID, id)
	}
	return &cp, nil
}

func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return checksumPrefix + hex.EncodeToString(sum[:])
}

// validateID rejects IDs that could escape dir or collide with temp and
// hidden files, since the ID becomes a file name.
func validateID(id string) error {
	switch {
	case id == "":
		return errors.New("checkpoint: empty sandbox ID")
	case strings.ContainsAny(id, "/\x00"):
		return fmt.Errorf("checkpoint: invalid sandbox ID %q: contains '/' or NUL", id)
	case strings.Contains(id, ".."):
		return fmt.Errorf("checkpoint: invalid sandbox ID %q: contains \"..\"", id)
	case strings.HasPrefix(id, "."):
		return fmt.Errorf("checkpoint: invalid sandbox ID %q: leading '.'", id)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening checkpoint dir %s for sync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing checkpoint dir %s: %w", dir, err)
	}
	return nil
}

// keyedMutex serialises operations on the same sandbox ID while letting
// different IDs proceed in parallel. Entries are dropped when unused so the
// map does not grow with every sandbox ever seen.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*refMutex
}

type refMutex struct {
	sync.Mutex
	refs int
}

func (k *keyedMutex) lock(id string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[string]*refMutex)
	}
	l := k.locks[id]
	if l == nil {
		l = &refMutex{}
		k.locks[id] = l
	}
	l.refs++
	k.mu.Unlock()

	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, id)
		}
		k.mu.Unlock()
	}
}
