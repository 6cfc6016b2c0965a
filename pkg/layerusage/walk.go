package layerusage

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// maxOpenDirs bounds the directories a walk holds open at once, so that a
// deep tree cannot exhaust the process's file descriptors. The root and
// the levels below it, up to maxOpenDirs-1 in all, stay open while what
// is under them is read; deeper down, a directory's names are read whole
// and it is closed while its subdirectories are read, then opened again.
const maxOpenDirs = 32

// dirFlags open a directory and never a symlink to one.
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// direntBufs are getdents buffers, one per step under way: a refresh of
// ImageFsInfo walks a few hundred trees.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 8192); return &b }}

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
// The walk works relative to open directories (openat, and fstatat on the
// names getdents gives): the kernel resolves one name per entry instead of
// a whole path, and nothing is allocated per entry but its name. Nothing
// outside the root is ever touched: every directory is opened by its name
// in its open parent with O_NOFOLLOW, so a symlink (even one that replaced
// a directory between two steps) is counted as itself and never followed,
// and no rename of a directory above can lead the walk elsewhere. Entries
// on another device than the root's (mount points) are skipped with what
// is under them, and a root that is a symlink or whose identity changed
// fails the walk.
type Walk struct {
	root    string
	started bool
	// dev is the device the walk stays on: the root's, or the one
	// DiskUsage was given (devSet); ino is the root's.
	dev    uint64
	devSet bool
	ino    uint64
	// dirs is the path from the root (dirs[0]) down to the directory
	// being read (the last).
	dirs   []dirFrame
	seen   map[uint64]struct{} // inodes with more than one link
	bytes  uint64
	inodes uint64
	done   bool
	buf    []byte // getdents buffer, during a step
}

// dirFrame is a directory being read.
type dirFrame struct {
	name string // in its parent ("" for the root)
	fd   int    // -1 while closed (between steps, or while the subdirectories of a deep directory are read)
	// got is how many names the directory gave so far: counted, or in
	// names from next on. Between steps only got is kept: the directory
	// is read again from its start and that many names are skipped.
	got   int
	names []string
	next  int
	eof   bool // the directory gave all its names
}

// NewWalk starts a walk of root; nothing is read until Step.
func NewWalk(root string) *Walk { return &Walk{root: root, seen: map[uint64]struct{}{}} }

// DiskUsage measures the tree at root in one go, like `du -x` (see Walk),
// staying on device dev: a root on another device (a mount point) counts
// nothing. A root that is not a directory, or cannot be opened, counts as
// itself; a root that is gone counts nothing.
//
// ImageFsInfo walks every container's writable layer, and the image layers
// it has not measured yet, at each refresh: BenchmarkDiskUsage compares
// this walk with a filepath.WalkDir one (Lstat per entry by path).
func DiskUsage(root string, dev uint64) (bytes, inodes uint64) {
	w := oneShotWalks.Get().(*Walk)
	defer oneShotWalks.Put(w)
	*w = Walk{root: root, dev: dev, devSet: true, dirs: w.dirs[:0], seen: w.seen}
	clear(w.seen)
	// Without a budget and with a context never done, the step fails
	// only when the root cannot be opened as a directory.
	if _, err := w.Step(context.Background(), Budget{}); err != nil {
		var st unix.Stat_t
		if unix.Lstat(root, &st) != nil || !w.count(&st) {
			return 0, 0
		}
	}
	return w.Sums()
}

// oneShotWalks are DiskUsage's walks, kept with their path's array and
// hard-link map: an ImageFsInfo refresh walks a few hundred small trees,
// and these were most of what each walk allocated.
var oneShotWalks = sync.Pool{New: func() any { return NewWalk("") }}

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
	rootFd, err := unix.Open(w.root, dirFlags, 0)
	if err != nil {
		return false, fmt.Errorf("opening %s: %w", w.root, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(rootFd, &st); err != nil {
		unix.Close(rootFd)
		return false, fmt.Errorf("stat %s: %w", w.root, err)
	}
	switch {
	case !w.started && w.devSet && st.Dev != w.dev:
		// The root is on another device than the one DiskUsage
		// stays on (a mount point, a running container's overlay):
		// none of it counts.
		unix.Close(rootFd)
		w.finish()
		return true, nil
	case !w.started:
		w.started, w.dev, w.ino = true, st.Dev, st.Ino
		w.add(&st)
		w.dirs = append(w.dirs, dirFrame{fd: rootFd})
	case st.Dev != w.dev || st.Ino != w.ino:
		unix.Close(rootFd)
		return false, fmt.Errorf("%s: %w", w.root, ErrRootChanged)
	default:
		w.dirs[0].fd = rootFd
	}
	buf := direntBufs.Get().(*[]byte)
	w.buf = *buf
	defer func() {
		w.suspend()
		w.buf = nil
		direntBufs.Put(buf)
	}()
	// Resumed: the root is read again past what earlier steps counted;
	// the directories below it are reopened as the walk comes back to
	// them.
	if w.dirs[0].got > 0 {
		w.skip(&w.dirs[0])
	}
	n := 0
	for len(w.dirs) > 0 {
		top := len(w.dirs) - 1
		d := &w.dirs[top]
		if d.fd < 0 && !w.reopen() {
			continue
		}
		if d.next == len(d.names) {
			d.names, d.next = d.names[:0], 0
			if !w.read(d) {
				w.pop()
			}
			continue
		}
		if n > 0 && (b.MaxEntries > 0 && n >= b.MaxEntries || w.overTime(b, n)) {
			return false, nil
		}
		if n%timeCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return false, err
			}
		}
		n++
		name := d.names[d.next]
		d.next++
		w.entry(top, name)
	}
	w.finish()
	return true, nil
}

func (w *Walk) overTime(b Budget, n int) bool {
	return !b.Deadline.IsZero() && b.Now != nil && n%timeCheckEvery == 0 && !b.Now().Before(b.Deadline)
}

// entry counts the entry name of the directory dirs[i] and, if it is a
// directory, opens it to be read next.
func (w *Walk) entry(i int, name string) {
	d := &w.dirs[i]
	var st unix.Stat_t
	if unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return // vanished
	}
	if !w.count(&st) || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return
	}
	// Opened by its name in the open parent, O_NOFOLLOW: a symlink put
	// in its place since the stat fails the open. Its device is not
	// checked again (an fstat per directory): only a filesystem mounted
	// on it in the instant since the stat would be read.
	deep := i >= maxOpenDirs-1
	if deep {
		// Not kept open below: the rest of its names now, so that
		// reopening it needs no skipping.
		for w.read(d) {
		}
	}
	fd, err := unix.Openat(d.fd, name, dirFlags, 0)
	if deep {
		unix.Close(d.fd)
		d.fd = -1
	}
	if err != nil {
		return // vanished or unreadable: counted, nothing below it
	}
	// A frame popped earlier lends its names' array.
	if len(w.dirs) < cap(w.dirs) {
		w.dirs = w.dirs[:len(w.dirs)+1]
		f := &w.dirs[len(w.dirs)-1]
		*f = dirFrame{name: name, fd: fd, names: f.names[:0]}
	} else {
		w.dirs = append(w.dirs, dirFrame{name: name, fd: fd})
	}
}

// count adds an entry, unless it is on another device or a hard link
// already counted; it says whether the entry is on the walk's device.
func (w *Walk) count(st *unix.Stat_t) bool {
	if st.Dev != w.dev {
		return false // a mount point: another filesystem
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
		if _, ok := w.seen[st.Ino]; ok {
			return true
		}
		w.seen[st.Ino] = struct{}{}
	}
	w.add(st)
	return true
}

func (w *Walk) add(st *unix.Stat_t) {
	w.inodes++
	w.bytes += uint64(st.Blocks) * 512
}

// read appends the names of one getdents to d's. It reports false at the
// directory's end, or when it cannot be read any more (removed while
// read): what was read counts.
func (w *Walk) read(d *dirFrame) bool {
	if d.eof {
		return false
	}
	n, err := unix.ReadDirent(d.fd, w.buf)
	for err == unix.EINTR { // a bare Errno, never wrapped
		n, err = unix.ReadDirent(d.fd, w.buf)
	}
	if err != nil || n <= 0 {
		d.eof = true
		return false
	}
	var c int
	_, c, d.names = unix.ParseDirent(w.buf[:n], -1, d.names)
	d.got += c
	return true
}

// skip reads again, in a directory just reopened from its start, the names
// it gave before (counted already), keeping those after them.
func (w *Walk) skip(d *dirFrame) {
	left := d.got
	d.got = 0
	for left > 0 && w.read(d) {
		k := min(left, len(d.names))
		left -= k
		d.next = k
		if d.next == len(d.names) {
			d.names, d.next = d.names[:0], 0
		}
	}
}

// reopen opens again the last directory of the path, closed at the end of
// a step or while its subdirectories were read: name by name from the
// nearest directory open above it (the root at worst), never following a
// symlink, and only if it is still on the walk's device; then it skips
// what was read of it. If it cannot, the directory is dropped (removed, or
// replaced: nothing more to count below it) and reopen reports false.
func (w *Walk) reopen() bool {
	top := len(w.dirs) - 1
	open := top - 1
	for w.dirs[open].fd < 0 {
		open--
	}
	fd := w.dirs[open].fd
	for i := open + 1; i <= top; i++ {
		next, err := unix.Openat(fd, w.dirs[i].name, dirFlags, 0)
		if i > open+1 {
			unix.Close(fd)
		}
		if err != nil {
			w.pop()
			return false
		}
		fd = next
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != w.dev {
		unix.Close(fd)
		w.pop()
		return false
	}
	d := &w.dirs[top]
	d.fd = fd
	if !d.eof {
		w.skip(d)
	}
	return true
}

// pop closes the last directory of the path, read to its end.
func (w *Walk) pop() {
	d := &w.dirs[len(w.dirs)-1]
	if d.fd >= 0 {
		unix.Close(d.fd)
	}
	d.fd = -1
	w.dirs = w.dirs[:len(w.dirs)-1]
}

// suspend closes what a step opened, keeping of each directory on the path
// only how many names it gave that were counted: the names read but not
// counted yet would be stale by the next step.
func (w *Walk) suspend() {
	for i := range w.dirs {
		d := &w.dirs[i]
		if d.fd >= 0 {
			unix.Close(d.fd)
		}
		d.fd = -1
		d.got -= len(d.names) - d.next
		d.names, d.next, d.eof = nil, 0, false
	}
	clear(w.dirs[len(w.dirs):cap(w.dirs)])
}

// finish ends the walk. The path's array and the hard-link map stay for
// DiskUsage's next walk (the Measurer drops a finished Walk).
func (w *Walk) finish() {
	w.done = true
	w.dirs = w.dirs[:0]
}
