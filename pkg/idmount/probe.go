package idmount

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/netshim/netshim/pkg/podns"
)

// Minimum kernel for idmapped overlayfs layers, which a container's image
// needs (MountIDMapped); bind mounts of most filesystems came earlier.
const minKernelMajor, minKernelMinor = 5, 19

// Probe says whether this node can give a container an idmapped image and
// mounts under dir (the engine's data root): the kernel is 5.19 or later,
// user namespaces can be made, and the filesystem of dir takes an
// idmapped mount. nil if it can; the error says what is missing.
func Probe(dir string) error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	release := unix.ByteSliceToString(u.Release[:])
	if !kernelAtLeast(release, minKernelMajor, minKernelMinor) {
		return fmt.Errorf("kernel %s cannot idmap overlayfs layers (Linux %d.%d or later can)", release, minKernelMajor, minKernelMinor)
	}
	// A namespace with any range will do: only the idmapping is tried.
	m := []podns.IDMap{{ContainerID: 0, HostID: 1 << 30, Size: 65536}}
	return podns.InNewNamespaces(syscall.CLONE_NEWUSER, m, m, func(pid int) error {
		ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
		if err != nil {
			return err
		}
		defer ns.Close()
		fd, err := Clone(dir, int(ns.Fd()), false)
		if err != nil {
			return fmt.Errorf("the filesystem of %s does not take idmapped mounts: %w", dir, err)
		}
		unix.Close(fd)
		return nil
	})
}

// kernelAtLeast compares a kernel release ("6.18.44-fc-v1272") with a
// version.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
