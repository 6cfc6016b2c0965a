package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It
// is 100 on every Linux architecture Go runs on (the kernel fixes it for
// user space whatever its internal HZ), and Go has no sysconf to ask.
const clockTicks = 100

// group is one part of the runtime stack the figures break down.
type group string

const (
	groupNetshim    group = "netshim"
	groupDockerd    group = "dockerd"
	groupContainerd group = "containerd"
	groupShims      group = "shims"
	// groupKubelet is measured for context; it is not part of the stack.
	groupKubelet group = "kubelet"
)

// stackGroups are the groups whose sum is the runtime stack's figure.
var stackGroups = []group{groupNetshim, groupDockerd, groupContainerd, groupShims}

// stackGroupsOf are the groups a kind of runtime's stack has (the others
// are 0 in its figures, and not shown for it): the containerd peer has
// neither netshim nor dockerd.
func stackGroupsOf(k runtimeKind) []group {
	if k == kindContainerd {
		return []group{groupContainerd, groupShims}
	}
	return stackGroups
}

// procKey names a process across two samples: a pid may be reused, a pid
// with the same start time may not.
type procKey struct {
	pid   int
	start uint64
}

// procStat is what /proc/PID/stat says of a process that we use.
type procStat struct {
	comm  string
	ppid  int
	ticks uint64 // utime + stime of the process itself (children not included)
	start uint64 // starttime, in clock ticks since boot
}

// parseStat parses the contents of /proc/PID/stat. The command name may
// hold spaces and parentheses, so the fields are counted from the last ')'.
func parseStat(data []byte) (procStat, error) {
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("no command name in %q", data)
	}
	f := strings.Fields(string(data[end+1:]))
	// f[0] is field 3 (state): field N is f[N-3].
	const utime, stime, ppid, starttime = 14, 15, 4, 22
	if len(f) < starttime-2 {
		return procStat{}, fmt.Errorf("short stat line %q", data)
	}
	num := func(n int) (uint64, error) { return strconv.ParseUint(f[n-3], 10, 64) }
	u, err1 := num(utime)
	s, err2 := num(stime)
	p, err3 := num(ppid)
	st, err4 := num(starttime)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return procStat{}, fmt.Errorf("bad stat line %q: %w", data, err)
		}
	}
	return procStat{comm: string(data[open+1 : end]), ppid: int(p), ticks: u + s, start: st}, nil
}

// procFS reads processes under a proc root ("/proc"; a directory of fake
// entries in tests).
type procFS struct{ root string }

func (p procFS) stat(pid int) (procStat, error) {
	data, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(data)
}

// cmdline is the process's arguments; nil for a kernel thread or a
// process that is gone.
func (p procFS) cmdline(pid int) []string {
	data, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), "cmdline"))
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// pssKB is the Pss line of /proc/PID/smaps_rollup, in kB.
func (p procFS) pssKB(pid int) (uint64, error) {
	f, err := os.Open(filepath.Join(p.root, strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Pss:")
		if !ok {
			continue
		}
		fs := strings.Fields(rest)
		if len(fs) != 2 || fs[1] != "kB" {
			return 0, fmt.Errorf("pid %d: bad Pss line %q", pid, sc.Text())
		}
		return strconv.ParseUint(fs[0], 10, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("pid %d: no Pss line in smaps_rollup", pid)
}

func (p procFS) pids() ([]int, error) {
	entries, err := os.ReadDir(p.root)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// stack says which processes make up the runtime stack of one run. Each
// runtime under test says what its groups are (netshimStack,
// containerdStack); the rules are the same for both:
//   - daemons: processes the bench (or the engine it started) runs, by pid,
//     each of which must be running when sampled;
//   - children: a daemon's child of a given name (dockerd's containerd);
//   - shims: containerd shims, which are reparented away from the
//     containerd that started them, so they are known by their command line
//     naming shimMarker (as the harness finds strays);
//   - kubelet, measured for context but not part of the stack.
type stack struct {
	kubelet    int
	daemons    []daemon
	children   []childRule
	shimMarker string
}

// daemon is one process of the stack known by its pid.
type daemon struct {
	group group
	pid   int
}

// childRule puts a child of parent whose command name is comm in group.
type childRule struct {
	parent int
	comm   string
	group  group
}

// netshimStack is netshim's stack: netshim, the private dockerd, the
// containerd dockerd runs as its child, and the shims serving the engine's
// containers (their command line names the engine's directory).
func netshimStack(netshim, kubelet, dockerd int, engineDir string) stack {
	return stack{
		kubelet:    kubelet,
		daemons:    []daemon{{groupNetshim, netshim}, {groupDockerd, dockerd}},
		children:   []childRule{{parent: dockerd, comm: "containerd", group: groupContainerd}},
		shimMarker: engineDir,
	}
}

// containerdStack is the containerd peer's stack: the containerd the bench
// started and its shims (their command line names its address). Neither
// netshim nor dockerd is part of it.
func containerdStack(containerd, kubelet int, address string) stack {
	return stack{
		kubelet:    kubelet,
		daemons:    []daemon{{groupContainerd, containerd}},
		shimMarker: address,
	}
}

// groupOf says which group of the stack a process is in; false when it is
// not part of it (nor kubelet).
func (s stack) groupOf(p procFS, pid int, st procStat) (group, bool) {
	if pid == s.kubelet {
		return groupKubelet, true
	}
	for _, d := range s.daemons {
		if pid == d.pid {
			return d.group, true
		}
	}
	for _, c := range s.children {
		if st.ppid == c.parent && st.comm == c.comm {
			return c.group, true
		}
	}
	if s.shimMarker != "" && isShimOf(p.cmdline(pid), s.shimMarker) {
		return groupShims, true
	}
	return "", false
}

// isShimOf says whether a command line is a containerd shim's naming
// marker.
func isShimOf(args []string, marker string) bool {
	return len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") &&
		strings.Contains(strings.Join(args, " "), marker)
}

// members maps each process of the stack to its group, with its stat.
func (s stack) members(p procFS) (map[procKey]group, map[procKey]procStat, error) {
	pids, err := p.pids()
	if err != nil {
		return nil, nil, err
	}
	groups := map[procKey]group{}
	stats := map[procKey]procStat{}
	for _, pid := range pids {
		st, err := p.stat(pid)
		if err != nil {
			continue // gone meanwhile
		}
		g, ok := s.groupOf(p, pid, st)
		if !ok {
			continue
		}
		k := procKey{pid, st.start}
		groups[k], stats[k] = g, st
	}
	for _, d := range s.daemons {
		if !hasGroup(groups, d.group) {
			return nil, nil, fmt.Errorf("%s (pid %d) is not running", d.group, d.pid)
		}
	}
	return groups, stats, nil
}

// shimPids are the pids of the shims whose command line names marker.
func shimPids(p procFS, marker string) []int {
	pids, _ := p.pids()
	var out []int
	for _, pid := range pids {
		if isShimOf(p.cmdline(pid), marker) {
			out = append(out, pid)
		}
	}
	return out
}

func hasGroup(groups map[procKey]group, g group) bool {
	for _, x := range groups {
		if x == g {
			return true
		}
	}
	return false
}

// cpuSample is the CPU time each process of the stack had used when
// sampled.
type cpuSample struct {
	groups map[procKey]group
	ticks  map[procKey]uint64
}

func (s stack) sampleCPU(p procFS) (cpuSample, error) {
	groups, stats, err := s.members(p)
	if err != nil {
		return cpuSample{}, err
	}
	ticks := make(map[procKey]uint64, len(stats))
	for k, st := range stats {
		ticks[k] = st.ticks
	}
	return cpuSample{groups: groups, ticks: ticks}, nil
}

// groupFigures is one figure per group, and the number of processes
// behind each.
type groupFigures struct {
	value map[group]float64
	procs map[group]int
}

func newGroupFigures() groupFigures {
	return groupFigures{value: map[group]float64{}, procs: map[group]int{}}
}

// stackTotal is the sum over the stack's groups (kubelet excluded).
func (f groupFigures) stackTotal() float64 {
	var t float64
	for _, g := range stackGroups {
		t += f.value[g]
	}
	return t
}

// cpuBetween is the CPU-seconds each group used from a to b: for a process
// in both samples the difference, for one started in between all it used.
// A process that exited in between is missed (the hold has pods running
// and nothing changing, so none should).
func cpuBetween(a, b cpuSample) (groupFigures, int) {
	f := newGroupFigures()
	for k, end := range b.ticks {
		g := b.groups[k]
		used := end
		if start, ok := a.ticks[k]; ok {
			used = end - start
		}
		f.value[g] += float64(used) / clockTicks
		f.procs[g]++
	}
	gone := 0
	for k := range a.ticks {
		if _, ok := b.ticks[k]; !ok {
			gone++
		}
	}
	return f, gone
}

// samplePSS is the sum of each group's proportional set size, in bytes.
func (s stack) samplePSS(p procFS) (groupFigures, error) {
	groups, _, err := s.members(p)
	if err != nil {
		return groupFigures{}, err
	}
	f := newGroupFigures()
	for k, g := range groups {
		kb, err := p.pssKB(k.pid)
		if err != nil {
			if _, serr := p.stat(k.pid); serr != nil {
				continue // exited meanwhile
			}
			return groupFigures{}, err
		}
		f.value[g] += float64(kb) * 1024
		f.procs[g]++
	}
	return f, nil
}
