package podns

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSplitSysctl(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string // nil: refused
	}{
		{"net.ipv4.ip_forward", []string{"net", "ipv4", "ip_forward"}},
		{"net/ipv4/ip_forward", []string{"net", "ipv4", "ip_forward"}},
		{"net.ipv4.conf.eth0/100.forwarding", []string{"net", "ipv4", "conf", "eth0.100", "forwarding"}},
		{"net/ipv4/conf/eth0.100/forwarding", []string{"net", "ipv4", "conf", "eth0.100", "forwarding"}},
		{"kernel.shm_rmid_forced", []string{"kernel", "shm_rmid_forced"}},
		{"", nil},
		{"net..x", nil},
		{"net.x.", nil},
		{"/net/x", nil},
		{"net/../x", nil},
		{"net/./x", nil},
		// A slash stands for a dot in the dotted form: "/" and "//" would
		// be "." and ".." components, out of /proc/sys.
		{"net.ipv4./.x", nil},
		{"net.ipv4.//.x", nil},
		{"net.ipv4.ip forward", nil},
		{"net.ipv4.ip_forward\x00", nil},
		{"net." + strings.Repeat("x", 300), nil},
	} {
		got, ok := SplitSysctl(tc.name)
		if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("SplitSysctl(%q) = %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
}

func TestSysctlKind(t *testing.T) {
	for name, want := range map[string]Kind{
		"net.ipv4.ip_forward":              Net,
		"net.core.somaxconn":               Net,
		"net/ipv4/conf/eth0.100/rp_filter": Net,
		"kernel.shm_rmid_forced":           IPC,
		"kernel.shmmax":                    IPC,
		"kernel.msgmax":                    IPC,
		"kernel.sem":                       IPC,
		"fs.mqueue.msg_max":                IPC,
		"kernel.hostname":                  UTS,
		"kernel.domainname":                UTS,
		"net":                              "",
		"kernel.pid_max":                   "",
		"kernel.semaphores":                "",
		"vm.swappiness":                    "",
		"fs.mqueue":                        "",
	} {
		parts, ok := SplitSysctl(name)
		if !ok {
			t.Fatalf("SplitSysctl(%q) refused it", name)
		}
		if got := SysctlKind(parts); got != want {
			t.Errorf("SysctlKind(%s) = %q, want %q", name, got, want)
		}
	}
}

// The order of the writes: the more general setting first.
func TestCompareSysctls(t *testing.T) {
	names := []string{
		"net.ipv4.conf.lo.rp_filter",
		"net.ipv4.conf.default.rp_filter",
		"net.ipv4.ip_forward",
		"net/ipv4/conf/all/rp_filter",
		"net.ipv4.conf.abc.rp_filter",
		"net.ipv4.conf",
		"net.ipv4.conf.all.rp_filter",
		"net.core.somaxconn",
	}
	want := []string{
		"net.core.somaxconn",
		"net.ipv4.conf",
		"net.ipv4.conf.all.rp_filter",
		"net/ipv4/conf/all/rp_filter",
		"net.ipv4.conf.default.rp_filter",
		"net.ipv4.conf.abc.rp_filter",
		"net.ipv4.conf.lo.rp_filter",
		"net.ipv4.ip_forward",
	}
	list := make([]sysctl, 0, len(names))
	for _, n := range names {
		parts, _ := SplitSysctl(n)
		list = append(list, sysctl{name: n, parts: parts})
	}
	slices.SortFunc(list, compareSysctls)
	var got []string
	for _, s := range list {
		got = append(got, s.name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("order\n%q\nwant\n%q", got, want)
	}
}

// pinForSysctls pins a net and an IPC namespace in a private directory,
// removed with the test whatever happens to it.
func pinForSysctls(t *testing.T) Paths {
	t.Helper()
	requireRoot(t)
	p := NewPinner(filepath.Join(t.TempDir(), "netns"))
	paths, err := p.Pin("pod-sysctl", Net, IPC)
	t.Cleanup(func() {
		files, _ := p.List()
		for _, f := range files {
			_ = p.Remove(f)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// readInNS reads /proc/sys files inside the pinned namespace of the kind,
// on a locked thread that goes back to its namespace, or ends with its
// goroutine if it cannot. (A goroutine may run on the main thread, which
// Go never ends: left in the pod's namespace, it would stay there.)
func readInNS(t *testing.T, kind Kind, path string, names ...string) map[string]string {
	t.Helper()
	type answer struct {
		values map[string]string
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		runtime.LockOSThread()
		flag, _ := kind.cloneFlag()
		orig, err := unix.Open("/proc/thread-self/ns/"+string(kind), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- answer{err: err}
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- answer{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, flag); err != nil {
			runtime.UnlockOSThread()
			done <- answer{err: err}
			return
		}
		var a answer
		a.values = map[string]string{}
		for _, n := range names {
			b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(n, ".", "/"))
			if err != nil {
				a.err = err
				break
			}
			a.values[n] = strings.TrimSpace(string(b))
		}
		if err := unix.Setns(orig, flag); err != nil {
			a.err = errors.Join(a.err, err) // stays locked: ends with the goroutine
		} else {
			runtime.UnlockOSThread()
		}
		done <- a
	}()
	a := <-done
	if a.err != nil {
		t.Fatalf("reading sysctls in %s: %v", path, a.err)
	}
	return a.values
}

// readHost reads /proc/sys files in this process's namespaces.
func readHost(t *testing.T, names ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(n, ".", "/"))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = strings.TrimSpace(string(b))
	}
	return out
}

// pick is the first of values that none of not is.
func pick(values []string, not ...string) string {
	for _, v := range values {
		if !slices.Contains(not, v) {
			return v
		}
	}
	panic("no value left")
}

// threadsIn lists this process's threads in the pinned namespace of the
// kind at path: threads left in a pod's namespace.
func threadsIn(t *testing.T, kind Kind, path string) []string {
	t.Helper()
	pod := inode(t, path)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range tasks {
		var st unix.Stat_t
		if err := unix.Stat("/proc/self/task/"+task.Name()+"/ns/"+string(kind), &st); err != nil {
			continue // the thread ended
		}
		if st.Ino == pod {
			out = append(out, task.Name())
		}
	}
	return out
}

// WriteSysctls writes into the pinned namespaces, in both name forms, and
// never into the node's.
func TestWriteSysctls(t *testing.T) {
	paths := pinForSysctls(t)
	netNames := []string{"net.ipv4.ip_forward", "net.ipv4.conf.default.rp_filter"}
	ipcNames := []string{"kernel.shm_rmid_forced", "kernel.msgmax"}
	if _, err := os.Stat("/proc/sys/net/ipv6"); err == nil {
		netNames = append(netNames, "net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.lo.disable_ipv6")
	}
	host := readHost(t, append(netNames, ipcNames...)...)
	before := readInNS(t, Net, paths[Net], netNames...)

	// Values that neither the node nor a new netns has.
	want := map[string]string{
		"net.ipv4.ip_forward":             pick([]string{"0", "1"}, before["net.ipv4.ip_forward"]),
		"net.ipv4.conf.default.rp_filter": pick([]string{"0", "1", "2"}, host["net.ipv4.conf.default.rp_filter"], before["net.ipv4.conf.default.rp_filter"]),
		"kernel.shm_rmid_forced":          pick([]string{"0", "1"}, host["kernel.shm_rmid_forced"]),
		"kernel.msgmax":                   pick([]string{"12345", "23456"}, host["kernel.msgmax"]),
	}
	sysctls := map[string]string{
		"net.ipv4.ip_forward":             want["net.ipv4.ip_forward"],
		"net/ipv4/conf/default/rp_filter": want["net.ipv4.conf.default.rp_filter"], // the slashed form
		"kernel.shm_rmid_forced":          want["kernel.shm_rmid_forced"],
		"kernel.msgmax":                   want["kernel.msgmax"],
	}
	if len(netNames) > 2 {
		// all.disable_ipv6 sets every interface's: lo's, written after
		// it, wins.
		sysctls["net.ipv6.conf.lo.disable_ipv6"] = "0"
		sysctls["net.ipv6.conf.all.disable_ipv6"] = "1"
		want["net.ipv6.conf.lo.disable_ipv6"] = "0"
		want["net.ipv6.conf.all.disable_ipv6"] = "1"
	}
	if err := WriteSysctls(paths, sysctls); err != nil {
		t.Fatal(err)
	}
	got := readInNS(t, Net, paths[Net], netNames...)
	for k, v := range readInNS(t, IPC, paths[IPC], ipcNames...) {
		got[k] = v
	}
	if !equalMaps(got, want) {
		t.Errorf("in the pinned namespaces: %v, want %v", got, want)
	}
	if after := readHost(t, append(netNames, ipcNames...)...); !equalMaps(after, host) {
		t.Errorf("the node's sysctls changed: %v, were %v", after, host)
	}
	if left := append(threadsIn(t, Net, paths[Net]), threadsIn(t, IPC, paths[IPC])...); len(left) > 0 {
		t.Errorf("threads %v left in the pod's namespaces", left)
	}

	// A kind paths does not name is left alone: the caller writes it
	// elsewhere (a pinned sandbox's pause container).
	if err := WriteSysctls(Paths{Net: paths[Net]}, map[string]string{"kernel.msgmax": "34567", "net.ipv4.ip_forward": "1"}); err != nil {
		t.Fatal(err)
	}
	if got := readInNS(t, IPC, paths[IPC], "kernel.msgmax"); got["kernel.msgmax"] != want["kernel.msgmax"] {
		t.Errorf("kernel.msgmax = %s: written without its namespace's path", got["kernel.msgmax"])
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// What the kernel refuses comes back as a SysctlError naming the sysctl,
// with the kernel's error in its chain; what is not a pod's sysctl is
// refused before anything is written.
func TestWriteSysctlsRefused(t *testing.T) {
	paths := pinForSysctls(t)
	for _, tc := range []struct {
		name    string
		sysctls map[string]string
		errIs   error  // nil: not a SysctlError
		bad     string // the sysctl the error names
	}{
		{"an interface the ADD makes later", map[string]string{"net.ipv4.conf.eth0.rp_filter": "1"}, fs.ErrNotExist, "net.ipv4.conf.eth0.rp_filter"},
		{"no such setting", map[string]string{"net.ipv4.no_such_setting": "1"}, fs.ErrNotExist, "net.ipv4.no_such_setting"},
		{"a value the kernel refuses", map[string]string{"net.ipv4.ip_forward": "yes"}, unix.EINVAL, "net.ipv4.ip_forward"},
		{"not namespaced", map[string]string{"vm.swappiness": "1", "net.ipv4.conf.lo.forwarding": "1"}, nil, "vm.swappiness"},
		{"malformed", map[string]string{"net..x": "1", "net.ipv4.conf.lo.forwarding": "1"}, nil, "net..x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := readInNS(t, Net, paths[Net], "net.ipv4.conf.lo.forwarding")
			err := WriteSysctls(paths, tc.sysctls)
			if err == nil {
				t.Fatal("WriteSysctls succeeded")
			}
			if !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("error %q does not name %s", err, tc.bad)
			}
			var se *SysctlError
			if got := errors.As(err, &se); got != (tc.errIs != nil) {
				t.Fatalf("error %q (%T): SysctlError %v, want %v", err, err, got, tc.errIs != nil)
			}
			if tc.errIs != nil {
				if se.Name != tc.bad || se.Kind != Net || !errors.Is(err, tc.errIs) {
					t.Errorf("SysctlError %+v: want %s in net, an error that is %v", se, tc.bad, tc.errIs)
				}
				return
			}
			if after := readInNS(t, Net, paths[Net], "net.ipv4.conf.lo.forwarding"); !equalMaps(after, before) {
				t.Errorf("a refused map was partly written: %v, was %v", after, before)
			}
		})
	}
	if err := WriteSysctls(Paths{Net: filepath.Join(t.TempDir(), "gone")}, map[string]string{"net.ipv4.ip_forward": "1"}); err == nil || errors.As(err, new(*SysctlError)) {
		t.Errorf("WriteSysctls into a missing file = %v, want an error that is no SysctlError", err)
	}
	if left := threadsIn(t, Net, paths[Net]); len(left) > 0 {
		t.Errorf("threads %v left in the pod's netns", left)
	}
}
