// Package podns holds a pod's Linux namespaces as files netshim owns
// ("pinned" namespaces), and the marker through which netshim tells its OCI
// runtime wrapper (cmd/netshim-oci) to run a container in them.
//
// A pinned namespace is a bind mount of /proc/<pid>/task/<tid>/ns/<kind>
// onto a file under netshim's --netns-dir. It lives as long as the mount,
// not as long as any process: CNI can set up a pod's network in it before
// the pod's first container starts, and tear it down after the last one is
// gone, always in the real namespace.
package podns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Kind is a namespace kind, named as in /proc/<pid>/ns/.
type Kind string

// The kinds netshim pins.
const (
	Net Kind = "net"
	IPC Kind = "ipc"
	UTS Kind = "uts"
)

// cloneFlag is the unshare(2) flag that makes a new namespace of the kind.
func (k Kind) cloneFlag() (int, error) {
	switch k {
	case Net:
		return unix.CLONE_NEWNET, nil
	case IPC:
		return unix.CLONE_NEWIPC, nil
	case UTS:
		return unix.CLONE_NEWUTS, nil
	case User:
		return unix.CLONE_NEWUSER, nil
	}
	return 0, fmt.Errorf("namespace kind %q cannot be pinned (want net, ipc, uts or user)", string(k))
}

// ociType is the kind's name in an OCI runtime config's linux.namespaces.
func (k Kind) ociType() string {
	if k == Net {
		return "network"
	}
	return string(k)
}

// Pinner makes and removes pinned namespaces in one directory.
type Pinner struct {
	dir string
}

// NewPinner returns a Pinner for dir, which it creates on first use.
func NewPinner(dir string) *Pinner { return &Pinner{dir: filepath.Clean(dir)} }

// Dir is the directory the pinned namespaces live in.
func (p *Pinner) Dir() string { return p.dir }

// Path is where Pin puts the namespace of a kind under a name.
func (p *Pinner) Path(name string, kind Kind) string {
	return filepath.Join(p.dir, name+"."+string(kind))
}

// Owns says whether path is a file this Pinner makes: directly in its
// directory. Paths from checkpoints are checked with it before anything
// is unmounted or removed.
func (p *Pinner) Owns(path string) bool {
	return filepath.IsAbs(path) && filepath.Clean(path) == path && filepath.Dir(path) == p.dir
}

// Pin makes a new namespace of each kind and pins it under name: the files
// Path(name, kind). On failure nothing is left behind.
func (p *Pinner) Pin(name string, kinds ...Kind) (Paths, error) {
	if name == "" || strings.ContainsAny(name, "/,=") || name == "." || name == ".." {
		return nil, fmt.Errorf("pinned namespace name %q: want a plain file name", name)
	}
	flags := 0
	for _, k := range kinds {
		if k == User {
			return nil, errors.New("a user namespace is pinned with PinUser, which gives it its id maps")
		}
		f, err := k.cloneFlag()
		if err != nil {
			return nil, err
		}
		flags |= f
	}
	paths, err := p.mountPoints(name, kinds)
	if err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() { errc <- pinOnThisThread(flags, paths) }()
	if err := <-errc; err != nil {
		p.removeAll(paths)
		return nil, fmt.Errorf("pinning namespaces %s: %w", name, err)
	}
	return paths, nil
}

// mountPoints makes the empty files the namespaces of kinds are pinned on,
// Path(name, kind), in a directory it makes if needed. Each is made with
// O_EXCL, so an existing file (another pod's namespace) is never reused.
// On failure nothing is left.
func (p *Pinner) mountPoints(name string, kinds []Kind) (Paths, error) {
	if err := os.MkdirAll(p.dir, 0o711); err != nil {
		return nil, fmt.Errorf("creating the pinned namespace directory: %w", err)
	}
	paths := Paths{}
	for _, k := range kinds {
		path := p.Path(name, k)
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			p.removeAll(paths)
			return nil, fmt.Errorf("creating the mount point of a pinned namespace: %w", err)
		}
		f.Close()
		paths[k] = path
	}
	return paths, nil
}

// removeAll unpins paths, as far as it can: the undo of a failed pin.
func (p *Pinner) removeAll(paths Paths) {
	for _, path := range paths {
		_ = p.Remove(path)
	}
}

// pinOnThisThread unshares the thread's namespaces of the flags, bind-mounts
// each onto its path and goes back to the namespaces the thread had. A
// thread that cannot go back stays locked, and Go ends it with its
// goroutine; one that could is handed back to the scheduler. (Going back
// matters for the main thread, which Go never ends: /proc/<pid>/ns/ shows
// its namespaces.)
func pinOnThisThread(flags int, paths Paths) error {
	runtime.LockOSThread()
	self := fmt.Sprintf("/proc/%d/task/%d/ns/", os.Getpid(), unix.Gettid())
	orig := map[Kind]int{}
	defer func() {
		for _, fd := range orig {
			unix.Close(fd)
		}
	}()
	for k := range paths {
		fd, err := unix.Open(self+string(k), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			return fmt.Errorf("opening this thread's %s namespace: %w", k, err)
		}
		orig[k] = fd
	}
	if err := unix.Unshare(flags); err != nil {
		runtime.UnlockOSThread() // nothing changed
		return fmt.Errorf("unshare: %w", err)
	}
	var err error
	for k, path := range paths {
		if err = unix.Mount(self+string(k), path, "", unix.MS_BIND, ""); err != nil {
			err = fmt.Errorf("bind-mounting the new %s namespace on %s: %w", k, path, err)
			break
		}
	}
	for k, fd := range orig {
		flag, _ := k.cloneFlag()
		if serr := unix.Setns(fd, flag); serr != nil {
			// Stays locked: the thread ends with this goroutine.
			return errors.Join(err, fmt.Errorf("returning to the original %s namespace: %w", k, serr))
		}
	}
	runtime.UnlockOSThread()
	return err
}

// shmSuffix names a pod's /dev/shm directory.
const shmSuffix = ".shm"

// ShmPath is where MountShm puts the /dev/shm of a name.
func (p *Pinner) ShmPath(name string) string { return filepath.Join(p.dir, name+shmSuffix) }

// MountShm makes a pod's shared /dev/shm: a tmpfs of size bytes on the
// directory ShmPath(name), which each container of the pod binds. (Docker
// gives each container with a private IPC namespace a /dev/shm of its own;
// a pod's containers share theirs, as they do with a pause container's.)
// On failure nothing is left behind.
func (p *Pinner) MountShm(name string, size int64) (string, error) {
	if name == "" || strings.ContainsAny(name, "/,=") || name == "." || name == ".." {
		return "", fmt.Errorf("shm name %q: want a plain file name", name)
	}
	if err := os.MkdirAll(p.dir, 0o711); err != nil {
		return "", fmt.Errorf("creating the pinned namespace directory: %w", err)
	}
	path := p.ShmPath(name)
	if err := os.Mkdir(path, 0o700); err != nil {
		return "", fmt.Errorf("creating the mount point of a pod's /dev/shm: %w", err)
	}
	opts := fmt.Sprintf("mode=1777,size=%d", size)
	if err := unix.Mount("shm", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("mounting a pod's /dev/shm on %s: %w", path, err)
	}
	return path, nil
}

// Remove unpins a namespace (or unmounts a pod's /dev/shm): unmounts the file (the namespace goes away
// with its last user) and deletes it. A path already gone is not an error,
// so teardown can call it again.
func (p *Pinner) Remove(path string) error {
	if !p.Owns(path) {
		return fmt.Errorf("%s is not a pinned namespace of %s", path, p.dir)
	}
	// MNT_DETACH: a process that still has the file open (a CNI plugin
	// killed mid-call, say) must not keep it from being removed.
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting pinned namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing pinned namespace %s: %w", path, err)
	}
	return nil
}

// List returns the paths of every file in the directory but dot files,
// sorted: the pinned namespaces, the pods' /dev/shm directories, and
// mount points a crash left half made.
func (p *Pinner) List() ([]string, error) {
	entries, err := os.ReadDir(p.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // the key (KeyFile) and its temp files, never a pod's
		}
		if !e.IsDir() || strings.HasSuffix(e.Name(), shmSuffix) {
			out = append(out, filepath.Join(p.dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// Verify checks that path is a pinned namespace of the kind: a namespace
// file (nsfs) of that type, not one of a process under /proc. The OCI
// wrapper runs it on every path before it hands it to runc.
func Verify(path string, kind Kind) error {
	flag, err := kind.cloneFlag()
	if err != nil {
		return err
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("namespace path %q: want an absolute, clean path", path)
	}
	if path == "/proc" || strings.HasPrefix(path, "/proc/") {
		return fmt.Errorf("namespace path %s: a process's namespace, not a pinned one", path)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("namespace path %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return fmt.Errorf("namespace path %s: %w", path, err)
	}
	if st.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("namespace path %s: not a namespace file (filesystem type %#x)", path, st.Type)
	}
	t, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		return fmt.Errorf("namespace path %s: reading its type: %w", path, err)
	}
	if t != flag {
		return fmt.Errorf("namespace path %s: not a %s namespace", path, kind)
	}
	return nil
}
