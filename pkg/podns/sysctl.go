package podns

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// A pod's namespaced sysctls are written by netshim into its pinned
// namespaces before the CNI ADD (docs/design/sandbox-modes.md, "Sysctls and
// the network"): what the ADD configures is then final, and a
// net.ipv4.conf.default.* value reaches the interfaces the ADD makes.

// maxSysctlName bounds a sysctl name: the kernel's longest are far shorter.
const maxSysctlName = 256

// SplitSysctl splits a sysctl name in either of the forms Kubernetes
// accepts: dotted ("net.ipv4.ip_forward") or, when the first separator is
// a slash, slashed ("net/ipv4/conf/eth0.100/forwarding"). In the dotted
// form a slash stands for a dot inside a component ("net.ipv4.conf.eth0/100
// .forwarding" names interface eth0.100). The parts are the components of
// its file under /proc/sys; none is empty, "." or "..", so the file is
// always under /proc/sys.
func SplitSysctl(name string) ([]string, bool) {
	if name == "" || len(name) > maxSysctlName {
		return nil, false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') && c != '_' && c != '-' && c != '.' && c != '/' {
			return nil, false
		}
	}
	sep := "."
	if i := strings.IndexAny(name, "./"); i >= 0 && name[i] == '/' {
		sep = "/"
	}
	parts := strings.Split(name, sep)
	for i, p := range parts {
		if sep == "." {
			p = strings.ReplaceAll(p, "/", ".")
			parts[i] = p
		}
		if p == "" || p == "." || p == ".." {
			return nil, false
		}
	}
	return parts, true
}

// SysctlKind is the namespace that makes a sysctl (its SplitSysctl parts)
// per pod, or "" for one that would change the whole node. The table
// follows the kernel: everything under net is per network namespace, the
// SysV IPC and POSIX message queue limits per IPC namespace, the host and
// domain names per UTS namespace.
func SysctlKind(parts []string) Kind {
	switch {
	case len(parts) >= 2 && parts[0] == "net":
		return Net
	case len(parts) == 2 && parts[0] == "kernel" && (parts[1] == "sem" || strings.HasPrefix(parts[1], "shm") || strings.HasPrefix(parts[1], "msg")):
		return IPC
	case len(parts) >= 3 && parts[0] == "fs" && parts[1] == "mqueue":
		return IPC
	case len(parts) == 2 && parts[0] == "kernel" && (parts[1] == "hostname" || parts[1] == "domainname"):
		return UTS
	}
	return ""
}

// SysctlError is a sysctl the kernel refused in a pinned namespace: its
// file does not exist there (ENOENT: no such setting, or one of an
// interface not made yet), its value is refused (EINVAL, ERANGE), or it is
// read-only there (EACCES, EPERM).
type SysctlError struct {
	Name  string // as the pod named it
	Value string
	Kind  Kind
	Err   error // the open's or the write's
}

func (e *SysctlError) Error() string {
	return fmt.Sprintf("sysctl %s in the pod's %s namespace: %v", e.Name, e.Kind, e.Err)
}

func (e *SysctlError) Unwrap() error { return e.Err }

// sysctl is one sysctl to write.
type sysctl struct {
	name, value string
	parts       []string
}

// WriteSysctls writes sysctls into the pinned namespaces paths names,
// each into the namespace SysctlKind says; a sysctl of a kind paths does
// not name is left out (the caller has it applied elsewhere). A name that
// is malformed or not namespaced is an error, and nothing is written.
//
// The writes are made in a fixed order, so that the outcome never depends
// on a map's: per namespace in the order net, ipc, uts, and within one by
// name, compared component by component with "all" before "default"
// before any other (an interface's), and otherwise in byte order. The more
// general setting is written first and the specific one after it, as a
// pod that sets both means: net.ipv4.conf.all.rp_filter, then
// .default.rp_filter, then .lo.rp_filter.
//
// Each namespace is entered on a locked OS thread, which opens and writes
// /proc/sys/<parts> there (the files under /proc/sys/net resolve to the
// network namespace of the task that opens them) and goes back to the
// thread's own namespace; a thread that cannot go back stays locked and
// ends with its goroutine. The first failure stops the writes; what was
// written stays, in namespaces the caller is about to remove.
func WriteSysctls(paths Paths, sysctls map[string]string) error {
	byKind := map[Kind][]sysctl{}
	for name, value := range sysctls {
		parts, ok := SplitSysctl(name)
		if !ok {
			return fmt.Errorf("sysctl %q is not a valid sysctl name", name)
		}
		kind := SysctlKind(parts)
		if kind == "" {
			return fmt.Errorf("sysctl %s is not namespaced: it would change the whole node", name)
		}
		if paths[kind] == "" {
			continue
		}
		byKind[kind] = append(byKind[kind], sysctl{name: name, value: value, parts: parts})
	}
	for _, kind := range []Kind{Net, IPC, UTS} {
		list := byKind[kind]
		if len(list) == 0 {
			continue
		}
		slices.SortFunc(list, compareSysctls)
		errc := make(chan error, 1)
		go func() { errc <- writeSysctlsOnThisThread(kind, paths[kind], list) }()
		if err := <-errc; err != nil {
			return err
		}
	}
	return nil
}

// compareSysctls is WriteSysctls' order: component by component, "all"
// first, "default" second, any other in byte order; a name that is a
// prefix of another first; the names as given break ties ("a.b" and "a/b"
// are one file).
func compareSysctls(a, b sysctl) int {
	rank := func(s string) int {
		switch s {
		case "all":
			return 0
		case "default":
			return 1
		}
		return 2
	}
	for i := 0; i < len(a.parts) && i < len(b.parts); i++ {
		x, y := a.parts[i], b.parts[i]
		if x == y {
			continue
		}
		if c := rank(x) - rank(y); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	}
	if c := len(a.parts) - len(b.parts); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// writeSysctlsOnThisThread enters the pinned namespace of the kind at path,
// writes the sysctls there and goes back (see pinOnThisThread).
func writeSysctlsOnThisThread(kind Kind, path string, list []sysctl) error {
	flag, err := kind.cloneFlag()
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	self := fmt.Sprintf("/proc/%d/task/%d/ns/%s", os.Getpid(), unix.Gettid(), kind)
	orig, err := unix.Open(self, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening this thread's %s namespace: %w", kind, err)
	}
	defer unix.Close(orig)
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening the pod's pinned %s namespace %s: %w", kind, path, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, flag); err != nil {
		runtime.UnlockOSThread() // nothing changed
		return fmt.Errorf("entering the pod's pinned %s namespace %s: %w", kind, path, err)
	}
	var werr error
	for _, s := range list {
		if werr = writeSysctl(s); werr != nil {
			werr = &SysctlError{Name: s.name, Value: s.value, Kind: kind, Err: werr}
			break
		}
	}
	if err := unix.Setns(orig, flag); err != nil {
		// Stays locked: the thread ends with this goroutine.
		return errors.Join(werr, fmt.Errorf("returning to the original %s namespace: %w", kind, err))
	}
	runtime.UnlockOSThread()
	return werr
}

// writeSysctl writes one sysctl's value, as given, into its /proc/sys file
// in the calling thread's namespaces.
func writeSysctl(s sysctl) error {
	file := "/proc/sys/" + strings.Join(s.parts, "/")
	fd, err := unix.Open(file, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: file, Err: err}
	}
	defer unix.Close(fd)
	n, err := unix.Write(fd, []byte(s.value))
	if err != nil {
		return &os.PathError{Op: "write", Path: file, Err: err}
	}
	if n != len(s.value) {
		return &os.PathError{Op: "write", Path: file, Err: fmt.Errorf("short write: %d of %d bytes", n, len(s.value))}
	}
	return nil
}
