package podns

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// KeyFile is the file, in a directory of pinned namespaces, holding the
// key netshim signs its markers with (Paths.Env). The OCI wrapper applies
// a marker only if it names files of one directory and carries the MAC of
// that directory's key: an image's ENV, or anyone without the key, cannot
// make a container join a namespace, and a namespace file in a directory
// netshim never used (the node's /var/run/docker/netns/default, say) can
// never be named. A dot file: List and the start-up sweep pass it over.
const KeyFile = ".netshim-oci.key"

// keySize is the key's length: HMAC-SHA256's block is 64 bytes, any key
// of 32 random bytes is as strong as the hash.
const keySize = 32

// Key is a directory's signing key.
type Key struct{ b []byte }

// mac is the hex HMAC-SHA256 of a marker's namespace list.
func (k *Key) mac(spec string) string {
	h := hmac.New(sha256.New, k.b)
	h.Write([]byte(spec))
	return hex.EncodeToString(h.Sum(nil))
}

// LoadOrCreateKey returns the key of dir, making dir and a new random key
// if it has none. Two callers racing get the same key: the new one is
// linked into place, never written over an existing one.
func LoadOrCreateKey(dir string) (*Key, error) {
	if k, err := ReadKey(dir); !errors.Is(err, os.ErrNotExist) {
		return k, err
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("creating the pinned namespace directory: %w", err)
	}
	b := make([]byte, keySize)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		return nil, fmt.Errorf("making the OCI wrapper's key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, KeyFile+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("making the OCI wrapper's key: %w", err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600: it is root's alone from the start.
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("writing the OCI wrapper's key: %w", err)
	}
	if err := os.Link(tmp.Name(), filepath.Join(dir, KeyFile)); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("installing the OCI wrapper's key: %w", err)
	}
	return ReadKey(dir)
}

// ReadKey reads the key of dir. It must be a regular file of keySize
// bytes that only its owner, this process's user, can read or write: a
// key others could read or replace would let them sign markers.
// os.ErrNotExist when dir has none.
func ReadKey(dir string) (*Key, error) {
	path := filepath.Join(dir, KeyFile)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("the OCI wrapper's key %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("the OCI wrapper's key %s: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("the OCI wrapper's key %s: not a regular file", path)
	case int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("the OCI wrapper's key %s: owned by uid %d, not %d", path, st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return nil, fmt.Errorf("the OCI wrapper's key %s: mode %#o lets others read or write it (want 0600)", path, st.Mode&0o777)
	case st.Size != keySize:
		return nil, fmt.Errorf("the OCI wrapper's key %s: %d bytes, want %d", path, st.Size, keySize)
	}
	b := make([]byte, keySize)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("the OCI wrapper's key %s: %w", path, err)
	}
	return &Key{b: b}, nil
}
