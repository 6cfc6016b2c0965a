package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/netshim/netshim/pkg/procutil"
)

// KubeletSysctls are the sysctls kubelet tunes at start-up (its
// "protect kernel defaults" set), which a test must put back.
var KubeletSysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
}

// KubeletCgroupNames are the top-level cgroups kubelet creates in every
// hierarchy: kubepods with the cgroupfs driver, kubepods.slice with systemd.
var KubeletCgroupNames = []string{"kubepods", "kubepods.slice"}

// The kinds of entries in a state file, one entry a line: KIND ARG...
// Paths hold no white space (Record* refuse them), so fields split on it.
const (
	stateTmp    = "tmp"    // tmp DIR: unmount everything under DIR, remove it
	stateMount  = "mount"  // mount DIR: unmount everything under DIR
	statePid    = "pid"    // pid NAME PID [MARKER]: stop it if its command line still names MARKER
	stateSysctl = "sysctl" // sysctl NAME VALUE: write VALUE back
	stateCgroup = "cgroup" // cgroup DIR: remove DIR and the cgroups under it
	stateDir    = "dir"    // dir DIR: remove DIR if empty (it did not exist before)
	stateGlob   = "glob"   // glob PATTERN: remove what matches (recursively)
	stateLink   = "link"   // link NAME: delete the network link NAME
	stateCNI    = "cni"    // cni NETWORK SUBNET: delete the portmap and firewall rules of NETWORK's pods
	stateNetns  = "netns"  // netns NAME: kill what runs in /run/netns/NAME, delete it
)

// stateEntry is one line of a state file.
type stateEntry struct {
	kind string
	args []string
}

func (e stateEntry) String() string { return strings.Join(append([]string{e.kind}, e.args...), " ") }

// stateArity is how many arguments each kind takes: min, max.
var stateArity = map[string][2]int{
	stateTmp: {1, 1}, stateMount: {1, 1}, statePid: {2, 3}, stateSysctl: {2, 2},
	stateCgroup: {1, 1}, stateDir: {1, 1}, stateGlob: {1, 1}, stateLink: {1, 1}, stateCNI: {2, 2},
	stateNetns: {1, 1},
}

// parseState reads a state file's entries. A malformed line is an error
// naming it: a state file is written by this package only, so a bad line
// means something else wrote it, and guessing could remove the wrong thing.
func parseState(r io.Reader) ([]stateEntry, error) {
	var out []stateEntry
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		ar, ok := stateArity[f[0]]
		if !ok {
			return nil, fmt.Errorf("line %d: unknown kind %q", n, f[0])
		}
		if len(f)-1 < ar[0] || len(f)-1 > ar[1] {
			return nil, fmt.Errorf("line %d: %q takes %d to %d arguments: %q", n, f[0], ar[0], ar[1], sc.Text())
		}
		e := stateEntry{kind: f[0], args: f[1:]}
		switch e.kind {
		case statePid:
			if pid, err := strconv.Atoi(e.args[1]); err != nil || pid <= 1 {
				return nil, fmt.Errorf("line %d: bad pid %q", n, e.args[1])
			}
		case stateTmp, stateMount, stateCgroup, stateDir, stateGlob:
			if !filepath.IsAbs(e.args[0]) || filepath.Clean(e.args[0]) == "/" {
				return nil, fmt.Errorf("line %d: %s wants an absolute path other than /: %q", n, e.kind, e.args[0])
			}
		case stateNetns:
			// A name, never a path: Restore removes netnsRoot/NAME.
			if strings.Contains(e.args[0], "/") || e.args[0] == "." || e.args[0] == ".." {
				return nil, fmt.Errorf("line %d: netns wants a name, not a path: %q", n, e.args[0])
			}
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// HostGuard records, in memory and in a state file, the host state a test
// world changes outside its temp dirs, and restores it: sysctls written
// back, cgroups and directories that did not exist removed, mounts under
// a dir unmounted, processes stopped. Restore undoes everything recorded;
// a run killed before its Restore is undone by the next NewHostGuard on
// the same state file.
type HostGuard struct {
	path string // "" keeps the record in memory only

	// Roots, replaced by unit tests.
	sysctlRoot, cgroupRoot, mountinfo, procRoot, netnsRoot string
	// logf reports what recovery and Restore did.
	logf func(format string, args ...any)

	mu      sync.Mutex
	entries []stateEntry
}

// HostGuardOption configures a HostGuard.
type HostGuardOption func(*HostGuard)

// WithGuardLog reports what the guard recovers and restores (default:
// stderr).
func WithGuardLog(logf func(format string, args ...any)) HostGuardOption {
	return func(g *HostGuard) { g.logf = logf }
}

// NewHostGuard makes a guard recording into statePath ("" for none). If
// statePath exists, an earlier run died before its Restore: that run's
// state is restored first, and an error is returned if that failed.
func NewHostGuard(statePath string, opts ...HostGuardOption) (*HostGuard, error) {
	g := &HostGuard{
		path:       statePath,
		sysctlRoot: "/proc/sys",
		cgroupRoot: "/sys/fs/cgroup",
		mountinfo:  "/proc/self/mountinfo",
		procRoot:   "/proc",
		netnsRoot:  "/run/netns",
		logf:       func(f string, a ...any) { fmt.Fprintf(os.Stderr, "harness: "+f+"\n", a...) },
	}
	for _, o := range opts {
		o(g)
	}
	if statePath == "" {
		return g, nil
	}
	if err := g.recover(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(statePath), 0o755); err != nil {
		return nil, err
	}
	return g, nil
}

// GuardHost is NewHostGuard for a test, with Restore registered as a
// cleanup. Call it before starting the processes whose state it guards:
// cleanups run last-in first-out, so the processes are gone (and their
// cgroups empty) when it restores.
func GuardHost(t testing.TB, statePath string, opts ...HostGuardOption) *HostGuard {
	t.Helper()
	g, err := NewHostGuard(statePath, append([]HostGuardOption{WithGuardLog(t.Logf)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Restore(); err != nil {
			t.Errorf("restoring the host: %v", err)
		}
	})
	return g
}

// StatePath is where the guard records (empty: nowhere).
func (g *HostGuard) StatePath() string { return g.path }

// recover restores the state an earlier run left in g.path.
func (g *HostGuard) recover() error {
	f, err := os.Open(g.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	entries, err := parseState(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("state file %s: %w (remove it after cleaning up by hand)", g.path, err)
	}
	g.logf("cleaning up after an earlier run that did not finish (%s)", g.path)
	g.entries = entries
	return g.Restore()
}

// record appends entries to the memory and to the state file, which is
// synced so that a kill right after still finds it.
func (g *HostGuard) record(es ...stateEntry) error {
	for _, e := range es {
		for _, a := range e.args {
			if a == "" || strings.ContainsAny(a, " \t\n\r") {
				return fmt.Errorf("host guard: %q: arguments must be non-empty and hold no white space", e.String())
			}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.path != "" {
		f, err := os.OpenFile(g.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		for _, e := range es {
			if _, err := fmt.Fprintln(f, e.String()); err != nil {
				f.Close()
				return fmt.Errorf("writing %s: %w", g.path, err)
			}
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	g.entries = append(g.entries, es...)
	return nil
}

// RecordTempDir has Restore unmount everything under dir and remove it.
func (g *HostGuard) RecordTempDir(dir string) error {
	return g.record(stateEntry{stateTmp, []string{filepath.Clean(dir)}})
}

// RecordMounts has Restore unmount everything mounted at or under dir.
func (g *HostGuard) RecordMounts(dir string) error {
	return g.record(stateEntry{stateMount, []string{filepath.Clean(dir)}})
}

// RecordProcess has Restore stop pid (SIGTERM, then SIGKILL) if it still
// runs and its command line names marker (so that a reused pid is left
// alone); an empty marker stands for the recorded temp dirs.
func (g *HostGuard) RecordProcess(name string, pid int, marker string) error {
	args := []string{name, strconv.Itoa(pid)}
	if marker != "" {
		args = append(args, marker)
	}
	return g.record(stateEntry{statePid, args})
}

// SaveSysctls records the current values of the sysctls (dotted names)
// for Restore to write back. A sysctl saved already keeps its first value:
// a kubelet started again must not have its own settings saved.
func (g *HostGuard) SaveSysctls(names ...string) error {
	g.mu.Lock()
	saved := map[string]bool{}
	for _, e := range g.entries {
		if e.kind == stateSysctl {
			saved[e.args[0]] = true
		}
	}
	g.mu.Unlock()
	var es []stateEntry
	for _, n := range names {
		if saved[n] {
			continue
		}
		saved[n] = true
		v, err := g.readSysctl(n)
		if err != nil {
			return err
		}
		es = append(es, stateEntry{stateSysctl, []string{n, v}})
	}
	return g.record(es...)
}

// WatchCgroups records, for every cgroup hierarchy, the cgroups of these
// names that do not exist yet, for Restore to remove.
func (g *HostGuard) WatchCgroups(names ...string) error {
	roots, _ := filepath.Glob(filepath.Join(g.cgroupRoot, "*"))
	roots = append(roots, g.cgroupRoot)
	var es []stateEntry
	for _, r := range roots {
		if fi, err := os.Stat(r); err != nil || !fi.IsDir() {
			continue
		}
		for _, n := range names {
			p := filepath.Join(r, n)
			if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
				es = append(es, stateEntry{stateCgroup, []string{p}})
			}
		}
	}
	return g.record(es...)
}

// WatchDirs records the directories among dirs, and their parents, that
// do not exist yet, for Restore to remove if they are empty then.
func (g *HostGuard) WatchDirs(dirs ...string) error {
	var es []stateEntry
	seen := map[string]bool{}
	for _, d := range dirs {
		for d = filepath.Clean(d); d != "/" && d != "."; d = filepath.Dir(d) {
			if seen[d] {
				break
			}
			if _, err := os.Lstat(d); err == nil {
				break
			}
			seen[d] = true
			es = append(es, stateEntry{stateDir, []string{d}})
		}
	}
	return g.record(es...)
}

// RemoveAtRestore has Restore remove whatever matches the glob pattern.
func (g *HostGuard) RemoveAtRestore(pattern string) error {
	if _, err := filepath.Match(pattern, ""); err != nil {
		return fmt.Errorf("pattern %q: %w", pattern, err)
	}
	return g.record(stateEntry{stateGlob, []string{pattern}})
}

// WatchLink records the network link name, if it does not exist yet, for
// Restore to delete (a bridge a CNI plugin creates).
func (g *HostGuard) WatchLink(name string) error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", name)); err == nil {
		return nil
	}
	return g.record(stateEntry{stateLink, []string{name}})
}

// WatchNetns records the named network namespace (/run/netns/NAME), if it
// does not exist yet, for Restore to kill every process still in it (a
// node's daemons and containers) and delete it.
func (g *HostGuard) WatchNetns(name string) error {
	if name == "" || strings.ContainsAny(name, "/ \t\n") {
		return fmt.Errorf("host guard: netns name %q", name)
	}
	if _, err := os.Stat(filepath.Join(g.netnsRoot, name)); err == nil {
		return nil
	}
	return g.record(stateEntry{stateNetns, []string{name}})
}

// WatchCNIRules has Restore delete the iptables rules the CNI portmap and
// firewall plugins made for pods of the network (its name) in subnet and
// that no CNI DEL removed: a run killed before its pods were torn down
// leaves them, and a leftover DNAT for a host port breaks the next run's.
func (g *HostGuard) WatchCNIRules(network, subnet string) error {
	if _, _, err := net.ParseCIDR(subnet); err != nil {
		return fmt.Errorf("host guard: CNI subnet: %w", err)
	}
	return g.record(stateEntry{stateCNI, []string{network, subnet}})
}

func (g *HostGuard) sysctlPath(name string) string {
	return filepath.Join(g.sysctlRoot, strings.ReplaceAll(name, ".", "/"))
}

func (g *HostGuard) readSysctl(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, "/ ") || strings.Contains(name, "..") {
		return "", fmt.Errorf("bad sysctl name %q", name)
	}
	data, err := os.ReadFile(g.sysctlPath(name))
	if err != nil {
		return "", fmt.Errorf("reading sysctl %s: %w", name, err)
	}
	// Multi-value sysctls hold tabs; those kubelet tunes are single values.
	v := strings.Join(strings.Fields(string(data)), "\t")
	if v == "" || strings.Contains(v, "\t") {
		return "", fmt.Errorf("sysctl %s: %q is not a single value", name, data)
	}
	return v, nil
}

// Restore undoes everything recorded, in this order: processes stopped
// (newest first), globs removed, sysctls written back, cgroups removed,
// mounts unmounted, temp dirs removed, new directories removed (deepest
// first), links deleted. It goes on after a failure and reports all of
// them; the state file is removed when all went well, and kept otherwise
// so that the next run tries again. Restore may be called again.
func (g *HostGuard) Restore() error {
	g.mu.Lock()
	entries := slices.Clone(g.entries)
	g.mu.Unlock()
	by := map[string][]stateEntry{}
	for _, e := range entries {
		by[e.kind] = append(by[e.kind], e)
	}
	var errs []error
	var tmps []string
	for _, e := range by[stateTmp] {
		tmps = append(tmps, e.args[0])
	}
	pids := by[statePid]
	for i := len(pids) - 1; i >= 0; i-- {
		if err := g.stopRecorded(pids[i].args, tmps); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range tmps {
		// A killed private dockerd leaves its shims and containers running.
		if n := killStrays(g.procRoot, t); n > 0 {
			g.logf("killed %d container process(es) and shim(s) left under %s", n, t)
		}
	}
	// Before the unmounts: a node's processes hold its mounts.
	for _, e := range by[stateNetns] {
		if err := g.removeNetns(e.args[0]); err != nil {
			errs = append(errs, err)
		}
	}
	for _, e := range by[stateGlob] {
		matches, _ := filepath.Glob(e.args[0])
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, e := range by[stateSysctl] {
		name, want := e.args[0], e.args[1]
		if now, err := g.readSysctl(name); err == nil && now == want {
			continue
		}
		if err := os.WriteFile(g.sysctlPath(name), []byte(want), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", name, want, err))
		}
	}
	for _, e := range by[stateCgroup] {
		if err := removeCgroup(e.args[0]); err != nil {
			errs = append(errs, err)
		}
	}
	var mounts []string
	for _, e := range by[stateMount] {
		mounts = append(mounts, e.args[0])
	}
	for _, d := range append(mounts, tmps...) {
		if err := unmountUnder(g.mountinfo, d); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range tmps {
		if err := os.RemoveAll(t); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", t, err))
		}
	}
	var dirs []string
	for _, e := range by[stateDir] {
		dirs = append(dirs, e.args[0])
	}
	// Deepest first, so that a parent is empty when its turn comes.
	sort.SliceStable(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s did not exist before the run and is still there: %w", d, err))
		}
	}
	for _, e := range by[stateLink] {
		if _, err := os.Stat(filepath.Join("/sys/class/net", e.args[0])); err != nil {
			continue
		}
		if out, err := RunCmd("ip", "link", "del", e.args[0]); err != nil {
			// A veth whose peer was in a namespace deleted above goes
			// with it, after the kernel's cleanup: it may still be there
			// at the Stat and gone at the delete (seen under load).
			if _, serr := os.Stat(filepath.Join("/sys/class/net", e.args[0])); errors.Is(serr, os.ErrNotExist) {
				continue
			}
			errs = append(errs, fmt.Errorf("deleting link %s: %w: %s", e.args[0], err, strings.TrimSpace(out)))
		}
	}
	for _, e := range by[stateCNI] {
		if err := removeCNIRules(e.args[0], e.args[1]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// Entries recorded while Restore ran stay for the next call.
	g.entries = g.entries[len(entries):]
	if g.path != "" && len(g.entries) == 0 {
		if err := os.Remove(g.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// stopRecorded stops a recorded process if it still is the one recorded.
func (g *HostGuard) stopRecorded(args, tmps []string) error {
	name := args[0]
	pid, _ := strconv.Atoi(args[1])
	markers := tmps
	if len(args) > 2 {
		markers = args[2:]
	}
	if !procRunning(g.procRoot, pid) {
		return nil
	}
	cmd, err := os.ReadFile(filepath.Join(g.procRoot, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil
	}
	if !slices.ContainsFunc(markers, func(m string) bool { return strings.Contains(string(cmd), m) }) {
		return nil // the pid was reused by another process
	}
	g.logf("stopping %s (pid %d) left running", name, pid)
	if err := stopPid(g.procRoot, pid, 45*time.Second); err != nil {
		return fmt.Errorf("%s (pid %d): %w", name, pid, err)
	}
	return nil
}

// procRunning says whether pid exists and is not a zombie.
func procRunning(procRoot string, pid int) bool {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return false
	}
	return data[i+2] != 'Z'
}

// stopPid stops a process that is not our child: SIGTERM, then SIGKILL
// after timeout, which is then reported.
func stopPid(procRoot string, pid int, timeout time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return nil // gone
	}
	if Eventually(timeout, func() bool { return !procRunning(procRoot, pid) }) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	Eventually(10*time.Second, func() bool { return !procRunning(procRoot, pid) })
	return fmt.Errorf("ignored SIGTERM for %s; killed", timeout)
}

// removeCgroup removes a cgroup and those under it, deepest first. A
// cgroup still holding processes cannot go: that is reported.
func removeCgroup(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("cgroup %s is still there (processes left in it?)", dir)
	}
	return nil
}

// mountsUnder lists the mount points at or below dir in a mountinfo file,
// deepest (and, at equal depth, latest) first.
func mountsUnder(mountinfo, dir string) ([]string, error) {
	data, err := os.ReadFile(mountinfo)
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := procutil.UnescapeMountinfo(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	slices.Reverse(out) // later mounts sit on top of earlier ones
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out, nil
}

// UnmountUnder unmounts everything at or below dir in this process's
// mount namespace, as Restore does for a temp dir: a test's directory
// after its leak audit, with the pins a failed run left and the mount
// netshim makes of its --netns-dir.
func UnmountUnder(dir string) error { return unmountUnder("/proc/self/mountinfo", dir) }

// unmountUnder unmounts everything at or below dir, deepest first, lazily
// when a plain unmount fails (a busy mount must not keep the dir).
func unmountUnder(mountinfo, dir string) error {
	for round := 0; round < 200; round++ {
		mps, err := mountsUnder(mountinfo, dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		if err := syscall.Unmount(mps[0], 0); err != nil {
			if err := syscall.Unmount(mps[0], syscall.MNT_DETACH); err != nil {
				return fmt.Errorf("unmounting %s: %w", mps[0], err)
			}
		}
	}
	return fmt.Errorf("mounts are still left under %s after 200 unmounts", dir)
}

// removeNetns kills (SIGKILL: a node is being thrown away, as a power cut
// would) every process whose network namespace is netnsRoot/name, waits for
// them, then unmounts and removes the file, as `ip netns delete` does.
func (g *HostGuard) removeNetns(name string) error {
	path := filepath.Join(g.netnsRoot, name)
	want, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	pids := pidsInNetns(g.procRoot, want)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(pids) > 0 {
		g.logf("killed %d process(es) left in netns %s", len(pids), name)
	}
	if !Eventually(StopTimeout, func() bool { return len(pidsInNetns(g.procRoot, want)) == 0 }) {
		return fmt.Errorf("netns %s: processes %v outlived SIGKILL", name, pidsInNetns(g.procRoot, want))
	}
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("unmounting netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing netns %s: %w", path, err)
	}
	return nil
}

// pidsInNetns lists the running processes whose ns/net is the file ns.
func pidsInNetns(procRoot string, ns os.FileInfo) []int {
	ents, _ := os.ReadDir(procRoot)
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fi, err := os.Stat(filepath.Join(procRoot, e.Name(), "ns", "net"))
		if err != nil || !os.SameFile(fi, ns) || !procRunning(procRoot, pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}
