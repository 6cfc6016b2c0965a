package crilog

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A log path comes from a pod spec (kubelet's log directory joined with the
// container's log path) and the directories on it may be writable by
// others (a pod with a hostPath mount of /var/log/pods, say). Opening it
// with plain open(2) would follow a symlink planted anywhere on the way and
// let netshim, as root, create or append to any file on the node. So every
// component is resolved by the kernel with symlinks refused: the directory
// with openat2(RESOLVE_NO_SYMLINKS) from "/", the file with openat2
// (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) relative to the directory's fd, or,
// on kernels without openat2 (before 5.6), one O_NOFOLLOW openat per
// component, which refuses the same things.

// openat2Missing is set when the kernel has no openat2: every open then
// takes the component-by-component walk. Tests set it to exercise the walk
// on kernels that have openat2.
var openat2Missing atomic.Bool

const (
	resolveDir  = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
	resolveFile = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
)

// openat2 is unix.Openat2 that reports ENOSYS (and remembers it) on kernels
// that lack the call.
func openat2(dirfd int, path string, flags int, mode uint32, resolve uint64) (int, error) {
	if openat2Missing.Load() {
		return -1, unix.ENOSYS
	}
	how := unix.OpenHow{Flags: uint64(flags), Resolve: resolve}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode) // openat2 refuses a mode without O_CREAT
	}
	for {
		fd, err := unix.Openat2(dirfd, path, &how)
		switch err {
		case unix.EINTR:
			continue
		case unix.ENOSYS:
			openat2Missing.Store(true)
		}
		return fd, err
	}
}

// openDir opens the absolute, clean directory dir as an O_PATH fd without
// following a symlink in any component. With create, missing directories
// are made (mode 0755) one at a time, each relative to its parent's fd, so
// that a symlink swapped in meanwhile is refused rather than followed.
func openDir(dir string, create bool) (int, error) {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return -1, fmt.Errorf("%w: log directory %q is not an absolute clean path", ErrUnsafeLogFile, dir)
	}
	fd, err := openat2(unix.AT_FDCWD, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0, resolveDir)
	if err == nil {
		return fd, nil
	}
	if err != unix.ENOSYS && !(err == unix.ENOENT && create) {
		return -1, pathError("open directory", dir, err)
	}
	return walkDir(dir, create)
}

// walkDir opens dir one component at a time from "/", making missing ones
// if create.
func walkDir(dir string, create bool) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, pathError("open directory", "/", err)
	}
	sofar := "/"
	for _, name := range strings.Split(strings.TrimPrefix(dir, "/"), "/") {
		if name == "" {
			continue // dir is "/"
		}
		sofar = filepath.Join(sofar, name)
		next, err := openDirAt(fd, name)
		if err == unix.ENOENT && create {
			if err = unix.Mkdirat(fd, name, 0o755); err == nil || err == unix.EEXIST {
				next, err = openDirAt(fd, name)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, pathError("open directory", sofar, err)
		}
		fd = next
	}
	return fd, nil
}

// openDirAt opens the directory name (one component) in dirfd without
// following a symlink.
func openDirAt(dirfd int, name string) (int, error) {
	if name == "." || name == ".." || strings.Contains(name, "/") {
		return -1, unix.EINVAL
	}
	fd, err := openat2(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0, resolveFile)
	if err != unix.ENOSYS {
		return fd, err
	}
	// O_PATH|O_NOFOLLOW opens a symlink itself instead of failing, so
	// the fd is checked to be a directory.
	fd, err = unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return -1, unix.ELOOP
	}
	return fd, nil
}

// openFile opens the regular file at the absolute, clean path without
// following a symlink in any component. Anything but a regular file (a
// FIFO, a device, a directory, a socket) is refused before it is opened, so
// that opening has no side effect, and checked again after. A missing file
// (with openAppendExisting or openRead) is an error satisfying
// errors.Is(err, fs.ErrNotExist).
func openFile(path string, mode openMode) (*os.File, error) {
	dir, name := filepath.Split(path)
	if name == "" || name == "." || name == ".." || !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return nil, fmt.Errorf("%w: log path %q is not an absolute clean file path", ErrUnsafeLogFile, path)
	}
	dirfd, err := openDir(filepath.Clean(dir), mode == openAppend)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)

	var st unix.Stat_t
	switch err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		if err := checkRegular(path, st.Mode); err != nil {
			return nil, err
		}
	case err == unix.ENOENT && mode == openAppend:
	default:
		return nil, pathError("open", path, err)
	}

	flags := unix.O_RDONLY
	if mode != openRead {
		// O_RDWR rather than O_WRONLY so that the file's end can be read
		// to check it; every write still goes to the end.
		flags = unix.O_RDWR | unix.O_APPEND
	}
	if mode == openAppend {
		flags |= unix.O_CREAT
	}
	// O_NONBLOCK and O_NOCTTY: should a FIFO or a terminal be swapped in
	// after the check, the open neither hangs nor takes a terminal.
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK
	fd, err := openat2(dirfd, name, flags, 0o640, resolveFile)
	if err == unix.ENOSYS {
		fd, err = unix.Openat(dirfd, name, flags, 0o640)
	}
	if err != nil {
		return nil, pathError("open", path, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, pathError("stat", path, err)
	}
	if err := checkRegular(path, st.Mode); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, pathError("open", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

func checkRegular(path string, mode uint32) error {
	if mode&unix.S_IFMT == unix.S_IFREG {
		return nil
	}
	kind := "not a regular file"
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		kind = "a symlink"
	case unix.S_IFDIR:
		kind = "a directory"
	case unix.S_IFIFO:
		kind = "a FIFO"
	case unix.S_IFCHR, unix.S_IFBLK:
		kind = "a device"
	case unix.S_IFSOCK:
		kind = "a socket"
	}
	return fmt.Errorf("%w: %s is %s, not a regular file", ErrUnsafeLogFile, path, kind)
}

// pathError turns the errno of a confined open into an error that says
// what is wrong with the path.
func pathError(op, path string, err error) error {
	switch err {
	case unix.ELOOP:
		return fmt.Errorf("%w: %s %s: a component of the path is a symlink, which netshim does not follow", ErrUnsafeLogFile, op, path)
	case unix.EXDEV:
		return fmt.Errorf("%w: %s %s: the path leaves its directory", ErrUnsafeLogFile, op, path)
	case unix.ENOTDIR:
		return fmt.Errorf("%w: %s %s: a component of the path is not a directory", ErrUnsafeLogFile, op, path)
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}
