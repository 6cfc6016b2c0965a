package podns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/netshim/netshim/pkg/procutil"
)

// EnsureUnbindable makes dir, created if missing, a mount of its own
// that is unbindable (MS_UNBINDABLE), before any pin is made in it.
//
// Docker binds a container's volumes recursively, and a recursive bind
// copies every mount under its source: a container with a hostPath of /
// or /run (a node agent's, often) gets a copy of every pinned namespace
// and pod /dev/shm in the directory, which holds those namespaces until
// netshim deletes the file (the kernel then detaches the mounts other
// namespaces have on it). A recursive bind leaves out unbindable mounts
// and what is under them, so such a bind sees the directory without them.
// (A private mount would still be copied; it only stops mount events from
// propagating.) runc binds in the container's new mount namespace, a copy
// of the node's: that helps only where the kernel keeps the copy
// unbindable, and 6.18 does not (tested: unshare -m, then a recursive
// bind of the parent copies the pins). An unbindable mount is private
// too: pins made in it no longer propagate to other mount namespaces,
// which never was how dockerd and runc see them (they must run in
// netshim's).
//
// A directory that already is a mount point (netshim restarted, or an
// operator mounted something there) only gets the flag. One that is not
// is bind-mounted onto itself first. That bind would hide the mounts
// already in the directory: the pins of an earlier netshim, upgraded with
// its pods running. They are bound again into the new mount, at the same
// names, through a file descriptor of the directory opened before it was
// covered, and their first mounts are then detached; the namespaces are
// the same (same inode), and Pinner.Remove removes them as any other.
// Between the self-bind and their new binds (microseconds, at start-up,
// before netshim serves) they cannot be opened by path.
//
// netshim never unmounts the directory's own mount: the pins in it must
// outlive netshim's restarts.
func EnsureUnbindable(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("creating the pinned namespace directory: %w", err)
	}
	// Mountinfo shows paths without symlinks (/var/run is /run).
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("resolving the pinned namespace directory: %w", err)
	}
	// O_PATH: the directory as it is now, under what is mounted on it
	// next; /proc/self/fd/N/NAME reaches the mounts in it still.
	fd, err := unix.Open(resolved, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the pinned namespace directory: %w", err)
	}
	defer unix.Close(fd)
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &stx); err != nil {
		return fmt.Errorf("reading the mount of the pinned namespace directory: %w", err)
	}
	mounts, err := procutil.ReadMountinfo("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading this process's mounts: %w", err)
	}
	// A mount point if the mount the directory is on is mounted at its
	// path. Not if mountinfo merely lists a mount at that path: one a
	// later mount on a parent hides (a node's own /run over the host's,
	// which had a netshim's netns dir) is not what the path reaches, and
	// making it unbindable through the path fails with EINVAL.
	for _, m := range mounts {
		if uint64(m.ID) == stx.Mnt_id && m.MountPoint == resolved {
			return makeUnbindable(resolved)
		}
	}
	// What the self-bind hides: the mounts on the directory's mount
	// whose mount points are directly in the directory, where Pin and
	// MountShm put theirs.
	var hidden []string
	for _, m := range mounts {
		rel, ok := strings.CutPrefix(m.MountPoint, resolved+"/")
		if ok && !strings.Contains(rel, "/") && uint64(m.Parent) == stx.Mnt_id {
			hidden = append(hidden, rel)
		}
	}
	if err := unix.Mount(resolved, resolved, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting the pinned namespace directory %s onto itself: %w", resolved, err)
	}
	// Unbindable before the binds below: a self-bind on a shared mount
	// joins its peer group, and the binds would propagate to its peers.
	if err := makeUnbindable(resolved); err != nil {
		return errors.Join(err, unmountSelfBind(resolved, nil))
	}
	old := fmt.Sprintf("/proc/self/fd/%d/", fd)
	var rebound []string
	for _, rel := range hidden {
		// MS_REC: whatever is mounted under the pin (nothing netshim
		// makes) comes with it.
		if err := unix.Mount(old+rel, filepath.Join(resolved, rel), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			err = fmt.Errorf("binding %s again into the pinned namespace directory's own mount: %w", filepath.Join(resolved, rel), err)
			return errors.Join(err, unmountSelfBind(resolved, rebound))
		}
		rebound = append(rebound, rel)
	}
	var errs []error
	for _, rel := range hidden {
		if err := unix.Unmount(old+rel, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("detaching the first mount of %s, under the pinned namespace directory's own mount: %w", filepath.Join(resolved, rel), err))
		}
	}
	return errors.Join(errs...)
}

// makeUnbindable sets MS_UNBINDABLE on the mount at dir.
func makeUnbindable(dir string) error {
	if err := unix.Mount("", dir, "", unix.MS_UNBINDABLE, ""); err != nil {
		return fmt.Errorf("making the pinned namespace directory %s an unbindable mount: %w", dir, err)
	}
	return nil
}

// unmountSelfBind undoes a failed EnsureUnbindable: the binds it made in
// the directory's new mount, then that mount, so that the mounts it hid
// are there again.
func unmountSelfBind(dir string, rebound []string) error {
	var errs []error
	for _, rel := range rebound {
		if err := unix.Unmount(filepath.Join(dir, rel), unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("undoing: %w", err))
		}
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		errs = append(errs, fmt.Errorf("undoing the bind of %s onto itself: %w", dir, err))
	}
	return errors.Join(errs...)
}
