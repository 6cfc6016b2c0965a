package crilog

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ReplaceLink turns the symlink at path into an empty CRI log file, if
// and only if the symlink points at target. cri-dockerd (like dockershim)
// gives kubelet a container's log as a symlink to Docker's json-file log;
// a runtime taking its containers over writes the CRI format there
// instead, from the start of Docker's log, so the file must be a file of
// its own. Anything else at path (a file, another link) is left alone and
// reported; a missing path is not an error (nothing to replace).
//
// The directory is opened as openFile does, refusing a symlink on the
// way, and the link is read, removed and the file made relative to it, so
// that nothing outside the directory kubelet gave can be touched.
func ReplaceLink(path, target string) (replaced bool, err error) {
	dir, name := filepath.Split(path)
	if name == "" || name == "." || name == ".." || !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return false, fmt.Errorf("%w: log path %q is not an absolute clean file path", ErrUnsafeLogFile, path)
	}
	dirfd, err := openDir(filepath.Clean(dir), false)
	if err != nil {
		return false, err
	}
	defer unix.Close(dirfd)
	var st unix.Stat_t
	switch err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
		return false, nil
	case err != nil:
		return false, pathError("stat", path, err)
	case st.Mode&unix.S_IFMT != unix.S_IFLNK:
		return false, nil
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return false, pathError("readlink", path, err)
	}
	if got := string(buf[:n]); got != target {
		return false, fmt.Errorf("%w: %s is a symlink to %s, not to the container's Docker log %s", ErrUnsafeLogFile, path, got, target)
	}
	if err := unix.Unlinkat(dirfd, name, 0); err != nil {
		return false, pathError("remove", path, err)
	}
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := openat2(dirfd, name, flags, 0o640, resolveFile)
	if err == unix.ENOSYS {
		fd, err = unix.Openat(dirfd, name, flags, 0o640)
	}
	if err != nil {
		return true, pathError("create", path, err)
	}
	return true, unix.Close(fd)
}
