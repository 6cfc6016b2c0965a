// Package idmount makes idmapped mounts (Linux 5.12+; overlayfs layers
// 5.19+): views of a directory in which files owned by node id N show as
// owned by the id that N has inside a user namespace, with no chown of
// anything on disk. netshim's OCI wrapper gives the container of a pod in
// its own user namespace (hostUsers: false) its image this way: an
// overlay rebuilt on idmapped views of the layers the engine mounted, so
// that the image's root-owned files are its root's, and what it writes
// lands on disk as the image's ids.
package idmount

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Clone returns a detached mount of src (a file descriptor from
// open_tree), idmapped through the user namespace userns (an open
// /proc/<pid>/ns/user or a pinned one). recursive clones the mounts under
// src too, each idmapped.
func Clone(src string, userns int, recursive bool) (int, error) {
	flags := unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC
	setFlags := 0
	if recursive {
		flags |= unix.AT_RECURSIVE
		setFlags = unix.AT_RECURSIVE
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, uint(flags))
	if err != nil {
		return -1, fmt.Errorf("cloning the mount of %s: %w", src, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", uint(unix.AT_EMPTY_PATH|setFlags), &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("idmapping the mount of %s: %w", src, err)
	}
	return fd, nil
}

// Attach puts a detached mount (Clone's) on the directory target.
func Attach(fd int, target string) error {
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attaching an idmapped mount on %s: %w", target, err)
	}
	return nil
}

// Overlay is an overlay filesystem's layers, from its mount options.
type Overlay struct {
	Lower         []string
	Upper, Work   string
	OtherOptions  []string // passed on as they are (redirect_dir=..., index=..., userxattr ...)
	MountPoint    string
	MountOptsFlag uintptr // the mount's own flags (MS_RDONLY ...)
}

// FindOverlay reads the overlay mounted on dir from mountinfo (the text of
// /proc/self/mountinfo). Relative layer paths (Docker's overlay2 driver
// mounts from its home with relative paths when the absolute ones would
// not fit in a page) are taken relative to base.
func FindOverlay(mountinfo, dir, base string) (Overlay, error) {
	var found *Overlay
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if len(f) < 6 || len(g) < 3 || unescape(f[4]) != dir {
			continue
		}
		if g[0] != "overlay" {
			found = nil // a later mount on dir hides an earlier overlay
			continue
		}
		o := Overlay{MountPoint: dir}
		for _, opt := range splitOptions(g[2]) {
			k, v, _ := strings.Cut(opt, "=")
			switch k {
			case "lowerdir":
				for _, l := range splitLower(v) {
					if l == "" {
						// "a::b": b is a data-only layer (6.5+), which
						// a lowerdir list cannot say again.
						return Overlay{}, fmt.Errorf("overlay on %s: data-only layers are not supported", dir)
					}
					o.Lower = append(o.Lower, abs(base, l))
				}
			case "upperdir":
				o.Upper = abs(base, unescapeOpt(v))
			case "workdir":
				o.Work = abs(base, unescapeOpt(v))
			case "rw", "ro", "uuid", "xino", "metacopy", "index", "nfs_export", "redirect_dir", "volatile":
				// The kernel's defaults or the mount's state, not
				// something to ask again: index and nfs_export on an
				// upper that another overlay uses would be refused.
			default:
				if strings.HasPrefix(k, "lowerdir+") || strings.HasPrefix(k, "datadir+") {
					return Overlay{}, fmt.Errorf("overlay on %s: layer option %s is not supported", dir, k)
				}
				o.OtherOptions = append(o.OtherOptions, opt)
			}
		}
		for _, opt := range strings.Split(f[5], ",") {
			if opt == "ro" {
				o.MountOptsFlag |= unix.MS_RDONLY
			}
		}
		found = &o
	}
	if err := sc.Err(); err != nil {
		return Overlay{}, err
	}
	if found == nil {
		return Overlay{}, fmt.Errorf("no overlay filesystem is mounted on %s", dir)
	}
	if len(found.Lower) == 0 {
		return Overlay{}, fmt.Errorf("overlay on %s: no lowerdir in its options", dir)
	}
	if (found.Upper == "") != (found.Work == "") {
		return Overlay{}, fmt.Errorf("overlay on %s: an upperdir without a workdir, or the other way", dir)
	}
	return *found, nil
}

func abs(base, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(base, p)
}

// splitOptions splits a mount's super options at commas not escaped with a
// backslash (overlayfs shows a comma in a path as "\,").
func splitOptions(s string) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s):
			cur.WriteByte(s[i])
			cur.WriteByte(s[i+1])
			i++
		case s[i] == ',':
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	return append(out, cur.String())
}

// splitLower splits lowerdir's value at colons not escaped, and unescapes.
// The kernel shows the value as it was given, overlayfs's backslash
// escapes included ("a\:b" for a colon in a path), with mountinfo's octal
// escapes on top ("a\134:b"): the octal ones are undone first, or the
// escaped colon would split the path.
func splitLower(v string) []string {
	v = unescape(v)
	var out []string
	var cur strings.Builder
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] == '\\' && i+1 < len(v):
			cur.WriteByte(v[i])
			cur.WriteByte(v[i+1])
			i++
		case v[i] == ':':
			out = append(out, unescapeBackslash(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(v[i])
		}
	}
	return append(out, unescapeBackslash(cur.String()))
}

// unescapeOpt undoes mountinfo's octal escapes in an option's value, then
// overlayfs's backslash ones.
func unescapeOpt(s string) string { return unescapeBackslash(unescape(s)) }

// unescapeBackslash undoes overlayfs's backslash escapes ("\," for a
// comma, "\:" for a colon).
func unescapeBackslash(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unescape undoes mountinfo's octal escapes (\040 for a space, ...).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1:i+4]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < '0' || s[i] > '7' {
			return false
		}
	}
	return true
}

// workName is the work directory MountIDMapped makes beside the upper
// layer. The engine's overlay keeps its own: two mounts must not share a
// workdir.
const workName = "netshim-idmap-work"

// MountIDMapped mounts on target a new overlay of o's layers, the image's
// (lower) layers each seen through an idmapped mount of userns: their
// files owned by the ids that the layer's owners have inside the
// namespace, with nothing on disk changed. The upper layer, the
// container's own, is used as it is: what the container writes is owned
// on disk by the node ids its user namespace maps to (an upper seen
// through an idmapped mount would need the mounter's own id mapped, which
// root's is not). scratch is an empty directory (it is made, and removed)
// for the layers' idmapped mounts, which are detached once the overlay
// holds them. The caller unmounts target (Unmount) when done; ShiftUpper
// gives the upper layer's existing files their mapped owners first.
//
// Both overlays share the upper layer, as a container's rootfs and the
// engine's view of it would: the kernel allows it when the overlay index
// feature is off (its default) and warns; the engine reads its view only
// for `docker cp`, `diff` and `commit`.
func MountIDMapped(o Overlay, target, scratch string, userns int) (err error) {
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return err
	}
	var attached []string
	defer func() {
		for i := len(attached) - 1; i >= 0; i-- {
			if uerr := unix.Unmount(attached[i], unix.MNT_DETACH); uerr != nil && err == nil {
				err = fmt.Errorf("detaching the layer view %s: %w", attached[i], uerr)
			}
			_ = os.Remove(attached[i])
		}
		_ = os.Remove(scratch)
	}()
	// Short relative names: the options of a mount must fit in a page,
	// and the overlay is mounted from scratch.
	var lower []string
	for i, l := range o.Lower {
		fd, err := Clone(l, userns, false)
		if err != nil {
			return err
		}
		name := strconv.Itoa(i)
		dst := filepath.Join(scratch, name)
		if err := os.Mkdir(dst, 0o700); err != nil {
			unix.Close(fd)
			return err
		}
		err = Attach(fd, dst)
		unix.Close(fd)
		if err != nil {
			_ = os.Remove(dst)
			return err
		}
		attached = append(attached, dst)
		lower = append(lower, name)
	}
	opts := []string{"lowerdir=" + strings.Join(lower, ":")}
	if o.Upper != "" {
		work := WorkDir(o)
		if err := os.RemoveAll(work); err != nil {
			return fmt.Errorf("emptying the work directory %s: %w", work, err)
		}
		if err := os.Mkdir(work, 0o700); err != nil {
			return err
		}
		// index=off said, not left to the kernel's default (a module
		// parameter, on in some distributions' kernels): with the index
		// an upper layer in use by another overlay is refused.
		opts = append(opts, "upperdir="+escapeOpt(o.Upper), "workdir="+escapeOpt(work), "index=off")
	}
	opts = append(opts, o.OtherOptions...)
	// mount(2) resolves the relative layer paths against the working
	// directory: this thread's, so the whole process's (the wrapper is
	// one short command).
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	if err := os.Chdir(scratch); err != nil {
		return err
	}
	merr := unix.Mount("overlay", target, "overlay", o.MountOptsFlag, strings.Join(opts, ","))
	if err := os.Chdir(wd); err != nil && merr == nil {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		return err
	}
	if merr != nil {
		return fmt.Errorf("mounting the idmapped overlay on %s: %w", target, merr)
	}
	return nil
}

// escapeOpt escapes what overlayfs reads as separators in a layer path.
func escapeOpt(p string) string {
	r := strings.NewReplacer(`\`, `\\`, ",", `\,`, ":", `\:`)
	return r.Replace(p)
}

// ShiftUpper gives each file of an upper layer that is owned by an id
// outside the node's side of the maps the node id its owner maps to, so
// that the container sees it as its own: the entries the engine made
// (the layer's root, a working directory) as root. A container's upper
// layer is its own and small when it is created; the image's layers are
// never changed. Ids already on the node's side are left: a second start
// of the container finds its files shifted. (Kubelet's ranges start at
// 65536 or above, so an image id is never on the node's side.)
func ShiftUpper(upper string, uids, gids []Map) error {
	return filepath.WalkDir(upper, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		uid, gid := st.Uid, st.Gid
		nu, ushift := shift(uids, uid)
		ng, gshift := shift(gids, gid)
		if !ushift && !gshift {
			return nil
		}
		if err := os.Lchown(path, int(nu), int(ng)); err != nil {
			return fmt.Errorf("giving %s its mapped owner: %w", path, err)
		}
		if info.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 && info.Mode()&os.ModeSymlink == 0 {
			// chown clears them; put them back.
			if err := os.Chmod(path, info.Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Map is one range of an id map: Size ids from ContainerID inside map to
// HostID on the node.
type Map struct{ ContainerID, HostID, Size uint32 }

// shift is the node id of a container id, if the id is not on the node's
// side of the maps already and is mapped.
func shift(ms []Map, id uint32) (uint32, bool) {
	for _, m := range ms {
		if id >= m.HostID && uint64(id) < uint64(m.HostID)+uint64(m.Size) {
			return id, false
		}
	}
	for _, m := range ms {
		if id >= m.ContainerID && uint64(id) < uint64(m.ContainerID)+uint64(m.Size) {
			return m.HostID + (id - m.ContainerID), true
		}
	}
	return id, false
}

// Unmount detaches what MountIDMapped mounted on target (nothing mounted
// is no error): a container that runc set up keeps its own copy of the
// mount, in its mount namespace. The work directory stays: that copy
// uses it, and it goes with the layer's directory.
func Unmount(target string) error {
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("detaching the idmapped rootfs %s: %w", target, err)
	}
	return nil
}

// WorkDir is the work directory MountIDMapped makes for o.
func WorkDir(o Overlay) string {
	if o.Upper == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(o.Upper), workName)
}
