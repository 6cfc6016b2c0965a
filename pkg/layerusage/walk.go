package layerusage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Budget bounds one step of a walk. Zero fields mean no bound.
type Budget struct {
	// Deadline ends the step once Now reaches it (checked every few
	// entries, so a step overruns it by at most that many stats).
	Deadline time.Time
	Now      func() time.Time
	// MaxEntries ends the step after this many directory entries.
	MaxEntries int
}

// timeCheckEvery is how many entries pass between two looks at the clock.
const timeCheckEvery = 64

// Walk measures one directory tree like `du -x`: the bytes of the blocks
// allocated (st_blocks*512, what the filesystem really holds, sparse files
// and holes included) and the number of inodes, a hard-linked inode once.
// kubelet compares these figures with the node's free disk space, so
// allocated size, not apparent size, is what matters (cAdvisor measures
// containers' writable layers the same way).
//
// A Walk proceeds in steps, each under a Budget, and resumes where the last
// one stopped: a layer of millions of files is measured a slice at a time
// instead of in one long walk. The tree may change between steps; the
// result is then approximate, as any du of a live tree is.
//
// Nothing outside the root is ever touched: every directory is opened
// name by name from the root with O_NOFOLLOW (a symlink, even one that
// replaced a directory between two steps, is counted as itself and never
// followed), entries on another device than the root's (mount points) are
// skipped with what is under them, and a root that is a symlink or whose
// identity changed fails the walk.
type Walk struct {
	root    string
	started bool
	dev     uint64
	ino     uint64
	// stack holds directories still to read, relative to root ("" is
	// root itself); cur is the one being read, of which skip entries
	// are done.
	stack  []string
	cur    string
	inCur  bool
	skip   int
	seen   map[uint64]struct{} // inodes with more than one link
	bytes  uint64
	inodes uint64
	done   bool
}

// NewWalk starts a walk of root; nothing is read until Step.
func NewWalk(root string) *Walk { return &Walk{root: root, seen: map[uint64]struct{}{}} }

// Root is the walked directory.
func (w *Walk) Root() string { return w.root }

// Sums are the bytes and inodes counted so far; final once Done.
func (w *Walk) Sums() (bytes, inodes uint64) { return w.bytes, w.inodes }

// Done says whether the whole tree has been walked.
func (w *Walk) Done() bool { return w.done }

// ErrRootChanged says the walked directory was replaced between steps.
var ErrRootChanged = errors.New("the walked directory was replaced")

// Step walks on until the tree is done, the budget is spent or ctx ends.
// It reports whether the walk is done. An error means the root cannot be
// walked (gone, not a directory, replaced); entries that vanish or cannot
// be read below it are skipped.
func (w *Walk) Step(ctx context.Context, b Budget) (bool, error) {
	if w.done {
		return true, nil
	}
	rootFd, err := unix.Open(w.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("opening %s: %w", w.root, err)
	}
	defer unix.Close(rootFd)
	var st unix.Stat_t
	if err := unix.Fstat(rootFd, &st); err != nil {
		return false, fmt.Errorf("stat %s: %w", w.root, err)
	}
	if !w.started {
		w.started, w.dev, w.ino = true, st.Dev, st.Ino
		w.add(&st)
		w.stack = []string{""}
	} else if st.Dev != w.dev || st.Ino != w.ino {
		return false, fmt.Errorf("%s: %w", w.root, ErrRootChanged)
	}
	n := 0
	for {
		if !w.inCur {
			if len(w.stack) == 0 {
				w.done = true
				w.seen = nil
				return true, nil
			}
			w.cur = w.stack[len(w.stack)-1]
			w.stack = w.stack[:len(w.stack)-1]
			w.inCur, w.skip = true, 0
		}
		more, err := w.readCur(ctx, rootFd, b, &n)
		if err != nil {
			return false, err
		}
		if more {
			return false, nil
		}
		w.inCur = false
	}
}

// readCur reads the current directory from where the last step left it,
// counting its entries and queueing its subdirectories. It reports whether
// the budget ran out before the directory's end.
func (w *Walk) readCur(ctx context.Context, rootFd int, b Budget, n *int) (more bool, err error) {
	fd, err := w.openDir(rootFd, w.cur)
	if err != nil {
		// Removed, or no longer a directory on this device: nothing to
		// count below it.
		return false, nil
	}
	f := os.NewFile(uintptr(fd), filepath.Join(w.root, w.cur))
	defer f.Close()
	skipped := 0
	for {
		names, rerr := f.Readdirnames(256)
		for _, name := range names {
			// Entries already counted by an earlier step.
			if skipped < w.skip {
				skipped++
				continue
			}
			if *n > 0 && (b.MaxEntries > 0 && *n >= b.MaxEntries || w.overTime(b, *n)) {
				return true, nil
			}
			if *n%timeCheckEvery == 0 {
				if err := ctx.Err(); err != nil {
					return false, err
				}
			}
			*n++
			w.skip++
			skipped++
			w.entry(fd, name)
		}
		if errors.Is(rerr, io.EOF) || (rerr == nil && len(names) == 0) {
			return false, nil
		}
		if rerr != nil {
			// A directory removed while read: what was read counts.
			return false, nil
		}
	}
}

func (w *Walk) overTime(b Budget, n int) bool {
	return !b.Deadline.IsZero() && b.Now != nil && n%timeCheckEvery == 0 && !b.Now().Before(b.Deadline)
}

// entry counts one directory entry and queues it if it is a directory.
func (w *Walk) entry(dirFd int, name string) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirFd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return // vanished
	}
	if st.Dev != w.dev {
		return // a mount point: another filesystem
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
		if _, ok := w.seen[st.Ino]; ok {
			return
		}
		w.seen[st.Ino] = struct{}{}
	}
	w.add(&st)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if w.cur == "" {
			w.stack = append(w.stack, name)
		} else {
			w.stack = append(w.stack, w.cur+"/"+name)
		}
	}
}

func (w *Walk) add(st *unix.Stat_t) {
	w.inodes++
	w.bytes += uint64(st.Blocks) * 512
}

// openDir opens rel (relative to the root) one name at a time, refusing
// symlinks at every level, and checks it is on the root's device.
func (w *Walk) openDir(rootFd int, rel string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(rootFd, ".", flags, 0)
	if err != nil {
		return -1, err
	}
	if rel != "" {
		for name := range strings.SplitSeq(rel, "/") {
			next, err := unix.Openat(fd, name, flags, 0)
			unix.Close(fd)
			if err != nil {
				return -1, err
			}
			fd = next
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != w.dev {
		unix.Close(fd)
		if err == nil {
			err = errors.New("on another device")
		}
		return -1, err
	}
	return fd, nil
}
