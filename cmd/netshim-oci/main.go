// Command netshim-oci is the OCI runtime netshim registers in the Docker
// engine as "netshim-oci" (daemon.json "runtimes"; dockerd --add-runtime).
// It gets runc's command line from the engine's containerd shim and execs
// the real runc with the same arguments, so that runc is the process the
// shim talks to. Before that:
//
//   - for `create` and `run`, if the bundle's config.json carries netshim's
//     marker in its environment (podns.EnvKey, which netshim sets on the
//     containers it runs in pinned namespaces, or with
//     SupplementalGroupsPolicy Strict), it accepts the marker only if
//     every path it names is in one directory, netshim signed it with
//     that directory's key (podns.KeyFile, which only root can read), and,
//     when the wrapper was given --netshim-netns-dir, that directory is one
//     of those; each path must be a namespace file of the right kind (not
//     a process's under /proc). It then applies it to the config
//     (podns.ApplyToConfig: the paths in linux.namespaces, idmapped bind
//     mounts, Strict supplementary groups) and removes the marker from the
//     environment. Anything else carrying the marker (an image's ENV, a
//     container created by hand) is refused, with the reason: the
//     container does not start.
//   - for a container in a pinned user namespace (a pod with hostUsers:
//     false), it also gives the container an idmapped image, which Docker
//     cannot: it finds the overlay the engine mounted on the rootfs,
//     gives the files of its upper layer the namespace's ids
//     (idmount.ShiftUpper), mounts a new overlay of the same layers, the
//     image's seen through idmapped mounts of the namespace
//     (idmount.MountIDMapped), on <dir>/.rootfs/<id>/netshim-rootfs (dir
//     is that of the pinned user namespace, which the container's root
//     can reach; the bundle's it cannot), and makes that the config's
//     root.path. runc then runs as its child rather than in
//     its place: once runc has made the container (whose mount namespace
//     keeps its own copy of the mount), the wrapper detaches the mount and
//     exits with runc's status. The empty directory stays until `delete`
//     (runc exec starts its process there), which removes it before it
//     execs runc, and detaches the mount first if a wrapper killed
//     mid-create left it.
//   - for `exec`, it removes the marker from the process file, which Docker
//     builds from the container's environment, and applies its Strict
//     supplementary groups there too (podns.ApplyToProcess).
//
// Docker cannot run a container in a network namespace given by path; this
// is how netshim's pods get the namespace netshim made (and CNI set up)
// before their first container started.
//
// Its own flags come first, before runc's (daemon.json "runtimeArgs"):
//
//	--netshim-runc=PATH       the real runc; else the one set at build time
//	                          (go build -ldflags "-X main.runc=PATH"), else
//	                          runc on PATH
//	--netshim-netns-dir=DIR   accept namespaces only in DIR (netshim's
//	                          --netns-dir; may be repeated); without it, in
//	                          any directory holding a key of netshim's
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/netshim/netshim/pkg/idmount"
	"github.com/netshim/netshim/pkg/podns"
	"github.com/netshim/netshim/pkg/runcwrap"
)

// runc is the real runc, if set at build time (see the package comment).
var runc string

// The wrapper's own flags; they come before runc's.
const (
	runcFlag     = "--netshim-runc="
	netnsDirFlag = "--netshim-netns-dir="
)

// In the directory of a container in a user namespace (rootfsBase): the
// idmapped rootfs, and the directory of its layers' idmapped views while
// it is mounted.
const (
	rootfsDir  = "netshim-rootfs"
	scratchDir = ".netshim-idmap"
)

func main() {
	path, dirs, args, err := ownFlags(os.Args[1:])
	cmd := runcwrap.Parse(args)
	if err != nil {
		fail(cmd, err)
	}
	if path == "" {
		path = runc
	}
	real, err := runcwrap.RealRunc(path)
	if err != nil {
		fail(cmd, err)
	}
	v := podns.Verifier{Dirs: dirs, ReadKey: podns.ReadKey, Check: podns.Verify}
	rootfs, err := edit(cmd, v)
	if err != nil {
		fail(cmd, err)
	}
	if rootfs != "" {
		os.Exit(runThenDetach(cmd, real, args, rootfs))
	}
	fail(cmd, runcwrap.Exec(real, args))
}

// ownFlags takes the wrapper's flags off the front of its arguments.
func ownFlags(args []string) (runcPath string, dirs []string, rest []string, err error) {
	for len(args) > 0 {
		switch a := args[0]; {
		case strings.HasPrefix(a, runcFlag):
			runcPath = strings.TrimPrefix(a, runcFlag)
		case strings.HasPrefix(a, netnsDirFlag):
			d := strings.TrimPrefix(a, netnsDirFlag)
			if !filepath.IsAbs(d) {
				return "", nil, nil, fmt.Errorf("%s%s: want an absolute directory", netnsDirFlag, d)
			}
			dirs = append(dirs, filepath.Clean(d))
		default:
			return runcPath, dirs, args, nil
		}
		args = args[1:]
	}
	return runcPath, dirs, args, nil
}

// edit makes the changes a command needs before runc runs it. For a
// container in a user namespace it returns the idmapped rootfs it
// mounted, which must be detached once runc is done.
func edit(cmd runcwrap.Command, v podns.Verifier) (rootfs string, err error) {
	switch {
	case cmd.Creates():
		bundle, err := cmd.BundleDir()
		if err == nil {
			bundle, err = filepath.Abs(bundle)
		}
		if err != nil {
			return "", err
		}
		err = runcwrap.EditFile(filepath.Join(bundle, "config.json"), func(b []byte) ([]byte, bool, error) {
			out, m, changed, err := podns.ApplyToConfig(b, v.Accept)
			if err != nil || m.Paths[podns.User] == "" {
				return out, changed, err
			}
			target, out, err := mountRootfs(bundle, out, m)
			if err != nil {
				return nil, false, err
			}
			rootfs = target
			return out, true, nil
		})
		if err != nil && rootfs != "" {
			if derr := detach(filepath.Dir(rootfs), false); derr != nil {
				err = errors.Join(err, derr)
			}
			rootfs = ""
		}
		if err != nil && cmd.ID != "" {
			err = fmt.Errorf("container %s: %w", cmd.ID, err)
		}
		return rootfs, err
	case cmd.Name == "exec" && cmd.Process != "":
		// The exec applies no path of the marker: only its signature
		// and what it asks of the process matter, and a namespace file
		// need not be checked again (nor fail the exec).
		v.Check = func(string, podns.Kind) error { return nil }
		err := runcwrap.EditFile(cmd.Process, func(b []byte) ([]byte, bool, error) {
			return podns.ApplyToProcess(b, v.Accept)
		})
		if err != nil && cmd.ID != "" {
			err = fmt.Errorf("container %s: %w", cmd.ID, err)
		}
		return "", err
	case cmd.Name == "delete":
		detachStale()
	}
	return "", nil
}

// mountRootfs gives a container in a user namespace its idmapped image:
// the overlay the engine mounted on the config's root.path is mounted
// again on <rootfsBase>/netshim-rootfs with its image layers idmapped through
// the pinned namespace, and config comes back with root.path naming it.
func mountRootfs(bundle string, config []byte, m podns.Marker) (string, []byte, error) {
	var c struct {
		Root struct {
			Path string `json:"path"`
		} `json:"root"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return "", nil, fmt.Errorf("parsing the runtime config: %w", err)
	}
	if c.Root.Path == "" {
		return "", nil, errors.New("a container in a user namespace: the runtime config has no root.path")
	}
	rootfs := c.Root.Path
	if !filepath.IsAbs(rootfs) {
		rootfs = filepath.Join(bundle, rootfs)
	}
	// Mountinfo shows paths without symlinks.
	rootfs, err := filepath.EvalSymlinks(rootfs)
	if err != nil {
		return "", nil, fmt.Errorf("a container in a user namespace: its rootfs: %w", err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", nil, fmt.Errorf("reading this process's mounts: %w", err)
	}
	o, err := rootfsOverlay(string(mi), rootfs)
	if err != nil {
		return "", nil, fmt.Errorf("a container in a user namespace: its rootfs %s is not one netshim can idmap (an overlay of the engine's overlay2 or overlayfs snapshotter): %w", rootfs, err)
	}
	if o.Upper != "" {
		if err := idmount.ShiftUpper(o.Upper, idmountMaps(m.UIDs), idmountMaps(m.GIDs)); err != nil {
			return "", nil, fmt.Errorf("a container in a user namespace: %w", err)
		}
	}
	ns, err := os.Open(m.Paths[podns.User])
	if err != nil {
		return "", nil, fmt.Errorf("opening the pod's user namespace: %w", err)
	}
	defer ns.Close()
	// Not in the bundle: runc sets the rootfs up as the container's root,
	// an unprivileged user of the node, who must be able to reach it, and
	// the engines keep their bundles (and overlay2 its layers) in
	// directories only the node's root may enter. The pod's user
	// namespace is pinned in netshim's --netns-dir, which netshim checks
	// others can reach (usernsSupport).
	base := rootfsBase(m.Paths[podns.User], bundle)
	target := filepath.Join(base, rootfsDir)
	// One left by a wrapper killed mid-create of this container.
	if err := detach(base, false); err != nil {
		return "", nil, err
	}
	if err := makeSearchable(filepath.Dir(base), base); err != nil {
		return "", nil, fmt.Errorf("a container in a user namespace: %w", err)
	}
	if err := os.Mkdir(target, 0o755); err != nil {
		return "", nil, err
	}
	if err := idmount.MountIDMapped(o, target, filepath.Join(base, scratchDir), int(ns.Fd())); err != nil {
		_ = os.Remove(target)
		_ = os.Remove(base)
		return "", nil, fmt.Errorf("a container in a user namespace: %w", err)
	}
	out, err := setRootPath(config, target)
	if err != nil {
		return "", nil, errors.Join(err, detach(base, false))
	}
	return target, out, nil
}

// rootfsesDir holds, in the directory of a pod's pinned user namespace, a
// directory per container of such a pod: its idmapped rootfs and the
// views of its layers while they are mounted.
const rootfsesDir = ".rootfs"

// rootfsBase is the directory of a container's idmapped rootfs: <dir of
// the user namespace>/.rootfs/<bundle's name, the container's ID>.
func rootfsBase(usernsPath, bundle string) string {
	return filepath.Join(filepath.Dir(usernsPath), rootfsesDir, filepath.Base(bundle))
}

// makeSearchable makes the directories, each inside the one before, that
// others may enter but not list (0711).
func makeSearchable(dirs ...string) error {
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	return nil
}

// rootfsBaseOf is the directory rootfsBase made for a bundle whose config
// names an idmapped rootfs, or "".
func rootfsBaseOf(bundle string) string {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return ""
	}
	var c struct {
		Root struct {
			Path string `json:"path"`
		} `json:"root"`
	}
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	p := filepath.Clean(c.Root.Path)
	base := filepath.Dir(p)
	if filepath.Base(p) != rootfsDir || filepath.Base(filepath.Dir(base)) != rootfsesDir || filepath.Base(base) != filepath.Base(bundle) {
		return ""
	}
	return base
}

// rootfsOverlay reads the overlay on rootfs from mountinfo. Its relative
// layer paths are the engine's short form, used when the absolute ones
// would not fit in a page: Docker's overlay2 mounts relative to its home,
// the parent of the container's directory (<home>/<id>/merged, with the
// upper layer <id>/diff); containerd's overlayfs snapshotter makes only
// the image layers relative, to the snapshots directory, the parent of
// the (absolute) upper layer's directory (<snapshots>/<n>/fs).
func rootfsOverlay(mountinfo, rootfs string) (idmount.Overlay, error) {
	o, err := idmount.FindOverlay(mountinfo, rootfs, "")
	if err != nil {
		return o, err
	}
	base := filepath.Dir(filepath.Dir(rootfs))
	if filepath.IsAbs(o.Upper) {
		base = filepath.Dir(filepath.Dir(o.Upper))
	}
	return idmount.FindOverlay(mountinfo, rootfs, base)
}

func idmountMaps(ms []podns.IDMap) []idmount.Map {
	out := make([]idmount.Map, len(ms))
	for i, m := range ms {
		out[i] = idmount.Map(m)
	}
	return out
}

// setRootPath sets an OCI config's root.path; the rest keeps its bytes.
func setRootPath(config []byte, path string) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(config, &top); err != nil {
		return nil, fmt.Errorf("parsing the runtime config: %w", err)
	}
	var root map[string]json.RawMessage
	if err := json.Unmarshal(top["root"], &root); err != nil {
		return nil, fmt.Errorf("parsing the runtime config's root: %w", err)
	}
	var err error
	if root["path"], err = json.Marshal(path); err != nil {
		return nil, err
	}
	if top["root"], err = json.Marshal(root); err != nil {
		return nil, err
	}
	return json.Marshal(top)
}

// detach undoes what mountRootfs mounted in base: the idmapped rootfs
// (detached: the container's mount namespace keeps its copy) and, left by
// a wrapper killed in MountIDMapped, the layers' views. Nothing mounted is
// no error. The rootfs's directory is removed unless keepDir: runc exec
// starts its process in the container's root.path, which must exist.
func detach(base string, keepDir bool) error {
	var errs []error
	scratch := filepath.Join(base, scratchDir)
	if entries, err := os.ReadDir(scratch); err == nil {
		for _, e := range entries {
			p := filepath.Join(scratch, e.Name())
			if err := idmount.Unmount(p); err != nil {
				errs = append(errs, err)
				continue
			}
			_ = os.Remove(p)
		}
		_ = os.Remove(scratch)
	}
	target := filepath.Join(base, rootfsDir)
	if err := idmount.Unmount(target); err != nil {
		errs = append(errs, err)
	} else if !keepDir {
		for _, d := range []string{target, base} {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing the idmapped rootfs's mount point: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// detachStale removes, before `runc delete`, the idmapped rootfs's
// directory from the bundle, detaching the mount first if a wrapper
// killed mid-create left it: containerd removes the bundle recursively
// once the container is deleted, which would go through a mounted rootfs
// into the container's upper layer. runc delete takes no bundle:
// containerd's shim runs it in the bundle directory. A failure is
// reported and does not stop the delete.
func detachStale() {
	wd, err := os.Getwd()
	if err != nil {
		return
	}
	base := rootfsBaseOf(wd)
	if base == "" {
		return
	}
	if fi, err := os.Lstat(filepath.Join(base, rootfsDir)); err != nil || !fi.IsDir() {
		return
	}
	if err := detach(base, false); err != nil {
		fmt.Fprintf(os.Stderr, "netshim-oci: %v\n", err)
	}
}

// forwarded are the signals the wrapper passes on to the runc it waits
// for, as if the sender had signalled runc, which it would have without
// the wrapper.
var forwarded = []os.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH}

// runThenDetach runs the real runc with args as the wrapper's child, with
// its environment, standard streams and other inherited descriptors,
// then detaches the idmapped rootfs whatever runc's outcome, and returns
// runc's exit status as a shell would (128+N for signal N). runc is
// killed if the wrapper dies.
func runThenDetach(cmd runcwrap.Command, real string, args []string, rootfs string) int {
	base := filepath.Dir(rootfs)
	c := exec.Command(real, args...)
	if isOpen(0) {
		c.Stdin = os.Stdin
	}
	if isOpen(1) {
		c.Stdout = os.Stdout
	}
	if isOpen(2) {
		c.Stderr = os.Stderr
	}
	c.ExtraFiles = inheritedExtra()
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	// Pdeathsig fires when the thread that forked ends, not the process.
	runtime.LockOSThread()
	if err := c.Start(); err != nil {
		fail(cmd, errors.Join(fmt.Errorf("running %s: %w", real, err), detach(base, false)))
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = c.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	werr := c.Wait()
	close(done)
	signal.Stop(sigs)
	// A container runc made keeps the empty directory, its root.path in
	// runc's state, until `delete`.
	if err := detach(base, c.ProcessState.Success()); err != nil {
		// The container (if runc made it) has its copy; `delete` tries again.
		fmt.Fprintf(os.Stderr, "netshim-oci: %v\n", err)
	}
	ws, ok := c.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		if werr != nil {
			fail(cmd, werr)
		}
		return 0
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// isOpen says whether the wrapper has descriptor fd open: one it was not
// given is not passed on (the child gets /dev/null instead).
func isOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

// inheritedExtra are the descriptors above 2 the wrapper inherited (not
// close-on-exec), at the same numbers: what runc would have had had it
// been exec'd (runc create --preserve-fds passes them on).
func inheritedExtra() []*os.File {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var fds []int
	top := 2
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // the Go runtime's own, and ReadDir's
		}
		fds = append(fds, fd)
		top = max(top, fd)
	}
	if len(fds) == 0 {
		return nil
	}
	files := make([]*os.File, top-2)
	for _, fd := range fds {
		files[fd-3] = os.NewFile(uintptr(fd), "fd"+strconv.Itoa(fd))
	}
	return files
}

func fail(cmd runcwrap.Command, err error) {
	msg := "netshim-oci: " + err.Error()
	// containerd's shim reports the last error of runc's log file as the
	// runtime's error, which is what `docker start`, Docker's API and
	// netshim's log show; stderr is for a person running the wrapper.
	if lerr := runcwrap.LogError(cmd, msg); lerr != nil {
		fmt.Fprintf(os.Stderr, "netshim-oci: writing runc's log %s: %v\n", cmd.Log, lerr)
	}
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}
