package layerusage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/netshim/netshim/pkg/procutil"
)

// ErrNoOverlayRoot says a process's root is not an overlay filesystem
// with an upper directory (another snapshotter, e.g. btrfs or native).
var ErrNoOverlayRoot = errors.New("the root filesystem is not an overlay with an upperdir")

// RootUpperDir returns the upper (writable) directory of the overlay
// mounted at the root of a process, from its /proc/<pid>/mountinfo. A
// container's root, seen from inside its mount namespace, is the mount at
// "/" (the last one there if several are stacked); the engine mounted it
// with the host's paths, which the kernel shows in the super options:
//
//	1021 893 0:72 / / rw,relatime master:500 - overlay overlay rw,lowerdir=/var/lib/containerd/.../snapshots/20/fs,upperdir=/var/lib/containerd/.../snapshots/23/fs,workdir=...
//
// This is how the writable layer of a container is found when Docker does
// not report it (the containerd image store, where inspect has no
// GraphDriver data). Special characters in paths are shown octal-escaped
// ("\040" for a space); a relative upperdir (possible only if the mounting
// engine changed directory first) cannot be resolved and is refused.
func RootUpperDir(mountinfo []byte) (string, error) {
	var fstype, opts string
	found := false
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20) // overlay options with many lowers are long
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		f := strings.Fields(sc.Text())
		if len(f) < 7 || procutil.UnescapeMountinfo(f[4]) != "/" {
			continue
		}
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(f) {
			continue
		}
		fstype, opts, found = f[sep+1], f[sep+3], true
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading mountinfo: %w", err)
	}
	if !found {
		return "", errors.New("no mount at / in mountinfo")
	}
	if fstype != "overlay" {
		return "", fmt.Errorf("root is %s: %w", fstype, ErrNoOverlayRoot)
	}
	// Commas inside values are escaped, so splitting on them is safe.
	for opt := range strings.SplitSeq(opts, ",") {
		v, ok := strings.CutPrefix(opt, "upperdir=")
		if !ok {
			continue
		}
		dir := procutil.UnescapeMountinfo(v)
		if !filepath.IsAbs(dir) {
			return "", fmt.Errorf("upperdir %q is not absolute", dir)
		}
		return filepath.Clean(dir), nil
	}
	return "", ErrNoOverlayRoot
}
