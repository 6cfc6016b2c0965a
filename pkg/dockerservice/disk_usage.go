package dockerservice

import (
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// diskUsage measures a tree like `du -x`: allocated bytes and inodes, each
// hard-linked inode once, symlinks not followed, and nothing on another
// device (a running container's overlay mount at <layer>/merged would
// count the whole image again). Entries that vanish during the walk are
// skipped.
//
// ImageFsInfo walks every container's writable layer at each refresh, so
// the walk works relative to open directories (openat, fstatat on the
// names getdents gives): the kernel resolves one name per entry instead
// of the whole path down from /, and nothing is allocated per entry but
// its name (a fifth less time and a tenth of the garbage of
// filepath.WalkDir with Lstat per entry, BenchmarkDiskUsage). Below
// maxOpenDirs open directories it goes on by path, so that a deep tree
// cannot exhaust the process's file descriptors.
func diskUsage(root string, dev uint64) fsUsage {
	buf := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(buf)
	w := &duWalker{root: root, dev: dev, seen: map[uint64]bool{}, buf: *buf}
	var st unix.Stat_t
	if unix.Lstat(root, &st) != nil || !w.count(&st) || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return w.u
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return w.u
	}
	w.dir(fd)
	return w.u
}

// maxOpenDirs bounds the directories a walk holds open at once.
const maxOpenDirs = 32

// direntBufs are getdents buffers: a refresh walks a few hundred trees.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 8192); return &b }}

type duWalker struct {
	root string
	// path is the names from root down to the directory being read.
	path []string
	dev  uint64
	seen map[uint64]bool // hard-linked inodes counted
	buf  []byte          // getdents buffer, reused: names are copied out of it
	u    fsUsage
}

// count adds an entry, unless it is on another device or a hard link
// already counted; it says whether the entry is on the walk's device.
func (w *duWalker) count(st *unix.Stat_t) bool {
	if st.Dev != w.dev {
		return false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
		if w.seen[st.Ino] {
			return true
		}
		w.seen[st.Ino] = true
	}
	w.u.inodes++
	w.u.bytes += uint64(st.Blocks) * 512
	return true
}

// dir counts what the open directory fd (at w.path below the root) holds,
// and closes fd.
func (w *duWalker) dir(fd int) {
	defer unix.Close(fd)
	var names []string
	for {
		n, err := unix.ReadDirent(fd, w.buf)
		if err != nil || n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(w.buf[:n], -1, names)
	}
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || !w.count(&st) || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		w.path = append(w.path, name)
		if len(w.path) >= maxOpenDirs {
			w.byPath(filepath.Join(append([]string{w.root}, w.path...)...))
		} else if subfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			w.dir(subfd)
		}
		w.path = w.path[:len(w.path)-1]
	}
}

// byPath counts what the directory at path holds (counted itself
// already), walking by path with no directory held open.
func (w *duWalker) byPath(root string) {
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d == nil || path == root {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		ust := unix.Stat_t{Dev: st.Dev, Ino: st.Ino, Nlink: st.Nlink, Mode: st.Mode, Blocks: st.Blocks}
		if !w.count(&ust) && d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
}
