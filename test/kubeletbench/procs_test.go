package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	// Field 2 may hold spaces and parentheses; utime 14, stime 15, ppid 4,
	// starttime 22.
	tests := []struct {
		name, line string
		want       procStat
		wantErr    bool
	}{
		{"plain", "42 (netshim) S 1 42 42 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 12 0 9876 1000 200",
			procStat{comm: "netshim", ppid: 1, ticks: 175, start: 9876}, false},
		{"odd name", "7 (a) b (c)) R 3 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 55 0 0",
			procStat{comm: "a) b (c)", ppid: 3, ticks: 3, start: 55}, false},
		{"short", "7 (x) R 3 7", procStat{}, true},
		{"no name", "7 x R 3", procStat{}, true},
		{"bad number", "42 (n) S 1 42 42 0 -1 0 0 0 0 0 x 25 0 0 20 0 12 0 9876 1000 200", procStat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.line))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// fakeProc is a /proc with the processes given.
type fakeProcess struct {
	pid, ppid    int
	comm         string
	args         []string
	ticks, start uint64
	pssKB        uint64
}

func writeFakeProc(t *testing.T, root string, ps ...fakeProcess) {
	t.Helper()
	for _, p := range ps {
		dir := filepath.Join(root, strconv.Itoa(p.pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("%d (%s) S %d 1 1 0 -1 0 0 0 0 0 %d 0 0 0 20 0 1 0 %d 0 0\n", p.pid, p.comm, p.ppid, p.ticks, p.start)
		rollup := fmt.Sprintf("00400000-7fff [rollup]\nRss:  %d kB\nPss:  %d kB\nPss_Anon:  1 kB\n", p.pssKB*2, p.pssKB)
		for name, data := range map[string]string{
			"stat": stat, "cmdline": strings.Join(p.args, "\x00") + "\x00", "smaps_rollup": rollup,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestStackMembersAndFigures(t *testing.T) {
	root := t.TempDir()
	engine := "/tmp/nskbench.1/docker"
	shimArgs := []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-address", engine + "/exec/containerd/containerd.sock"}
	writeFakeProc(t, root,
		fakeProcess{pid: 10, ppid: 1, comm: "netshim", args: []string{"netshim"}, ticks: 100, start: 5, pssKB: 30000},
		fakeProcess{pid: 11, ppid: 1, comm: "kubelet", args: []string{"kubelet"}, ticks: 500, start: 6, pssKB: 80000},
		fakeProcess{pid: 20, ppid: 1, comm: "dockerd", args: []string{"dockerd"}, ticks: 300, start: 2, pssKB: 50000},
		fakeProcess{pid: 21, ppid: 20, comm: "containerd", args: []string{"containerd"}, ticks: 200, start: 3, pssKB: 40000},
		fakeProcess{pid: 30, ppid: 1, comm: "containerd-shim", args: shimArgs, ticks: 10, start: 7, pssKB: 5000},
		fakeProcess{pid: 31, ppid: 1, comm: "containerd-shim", args: shimArgs, ticks: 20, start: 8, pssKB: 6000},
		// Not ours: another engine's shim, the host's containerd, a pod's process.
		fakeProcess{pid: 40, ppid: 1, comm: "containerd-shim", args: []string{"/usr/bin/containerd-shim-runc-v2", "-address", "/run/containerd/containerd.sock"}, ticks: 999, start: 1, pssKB: 9999},
		fakeProcess{pid: 41, ppid: 1, comm: "containerd", args: []string{"containerd"}, ticks: 999, start: 1, pssKB: 9999},
		fakeProcess{pid: 42, ppid: 30, comm: "sleep", args: []string{"sleep", "1000000"}, ticks: 999, start: 9, pssKB: 9999},
	)
	p := procFS{root: root}
	st := netshimStack(10, 11, 20, engine)
	c0, err := st.sampleCPU(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(c0.ticks) != 6 {
		t.Fatalf("sampled %d processes, want 6 (netshim, kubelet, dockerd, containerd, 2 shims): %v", len(c0.groups), c0.groups)
	}

	// Later: every process used more; shim 31 was replaced by a new one
	// with the same pid (another start time), and shim 32 appeared.
	writeFakeProc(t, root,
		fakeProcess{pid: 10, ppid: 1, comm: "netshim", args: []string{"netshim"}, ticks: 150, start: 5, pssKB: 30000},
		fakeProcess{pid: 11, ppid: 1, comm: "kubelet", args: []string{"kubelet"}, ticks: 900, start: 6, pssKB: 80000},
		fakeProcess{pid: 20, ppid: 1, comm: "dockerd", args: []string{"dockerd"}, ticks: 400, start: 2, pssKB: 50000},
		fakeProcess{pid: 21, ppid: 20, comm: "containerd", args: []string{"containerd"}, ticks: 260, start: 3, pssKB: 40000},
		fakeProcess{pid: 30, ppid: 1, comm: "containerd-shim", args: shimArgs, ticks: 12, start: 7, pssKB: 5000},
		fakeProcess{pid: 31, ppid: 1, comm: "containerd-shim", args: shimArgs, ticks: 3, start: 80, pssKB: 6000},
		fakeProcess{pid: 32, ppid: 1, comm: "containerd-shim", args: shimArgs, ticks: 4, start: 81, pssKB: 7000},
	)
	c1, err := st.sampleCPU(p)
	if err != nil {
		t.Fatal(err)
	}
	cpu, gone := cpuBetween(c0, c1)
	if gone != 1 {
		t.Errorf("gone = %d, want 1 (the shim whose pid was reused)", gone)
	}
	want := map[group]float64{groupNetshim: 0.5, groupKubelet: 4, groupDockerd: 1, groupContainerd: 0.6, groupShims: 0.02 + 0.03 + 0.04}
	for g, v := range want {
		if got := cpu.value[g]; fmt.Sprintf("%.3f", got) != fmt.Sprintf("%.3f", v) {
			t.Errorf("CPU of %s = %.3f, want %.3f", g, got, v)
		}
	}
	if cpu.procs[groupShims] != 3 {
		t.Errorf("shims = %d, want 3", cpu.procs[groupShims])
	}
	if got, wantTotal := cpu.stackTotal(), 0.5+1+0.6+0.09; fmt.Sprintf("%.3f", got) != fmt.Sprintf("%.3f", wantTotal) {
		t.Errorf("stack total = %.3f, want %.3f (kubelet is not in it)", got, wantTotal)
	}

	pss, err := st.samplePSS(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pss.value[groupShims], float64(18000*1024); got != want {
		t.Errorf("shims' PSS = %.0f, want %.0f", got, want)
	}
	if got, want := pss.stackTotal(), float64((30000+50000+40000+18000)*1024); got != want {
		t.Errorf("stack PSS = %.0f, want %.0f", got, want)
	}
}

func TestStackMissingDaemon(t *testing.T) {
	root := t.TempDir()
	writeFakeProc(t, root, fakeProcess{pid: 20, ppid: 1, comm: "dockerd", args: []string{"dockerd"}})
	_, err := netshimStack(10, 0, 20, "/x").sampleCPU(procFS{root: root})
	if err == nil || !strings.Contains(err.Error(), "netshim (pid 10) is not running") {
		t.Errorf("err = %v, want netshim not running", err)
	}
}

func TestPSSMalformed(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "5")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{"Rss: 1 kB\n", "Pss: 12 MB\n"} {
		if err := os.WriteFile(filepath.Join(dir, "smaps_rollup"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := (procFS{root: root}).pssKB(5); err == nil {
			t.Errorf("smaps_rollup %q: no error", data)
		}
	}
}

// The containerd peer's stack is its containerd and the shims naming its
// address: not the private dockerd, its containerd or its shims, which run
// beside it.
func TestContainerdStack(t *testing.T) {
	root := t.TempDir()
	addr := "/tmp/nskbench.1/containerd-r1/containerd/containerd.sock"
	engine := "/tmp/nskbench.1/docker"
	shim := func(a string) []string {
		return []string{"/x/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", a}
	}
	writeFakeProc(t, root,
		fakeProcess{pid: 11, ppid: 1, comm: "kubelet", args: []string{"kubelet"}, ticks: 500, start: 6, pssKB: 80000},
		fakeProcess{pid: 50, ppid: 1, comm: "containerd", args: []string{"/x/bin/containerd", "--config", "/tmp/nskbench.1/containerd-r1/containerd/config.toml"}, ticks: 300, start: 9, pssKB: 40000},
		fakeProcess{pid: 51, ppid: 1, comm: "containerd-shim", args: shim(addr), ticks: 10, start: 10, pssKB: 3000},
		fakeProcess{pid: 52, ppid: 1, comm: "containerd-shim", args: shim(addr), ticks: 20, start: 11, pssKB: 3000},
		fakeProcess{pid: 53, ppid: 51, comm: "pause", args: []string{"/pause"}, ticks: 1, start: 12, pssKB: 100},
		// The world's private dockerd, its containerd and a shim: not this stack's.
		fakeProcess{pid: 20, ppid: 1, comm: "dockerd", args: []string{"dockerd"}, ticks: 300, start: 2, pssKB: 50000},
		fakeProcess{pid: 21, ppid: 20, comm: "containerd", args: []string{"containerd"}, ticks: 200, start: 3, pssKB: 40000},
		fakeProcess{pid: 30, ppid: 1, comm: "containerd-shim", args: shim(engine + "/exec/containerd/containerd.sock"), ticks: 10, start: 7, pssKB: 5000},
		// A shim of another run's containerd.
		fakeProcess{pid: 60, ppid: 1, comm: "containerd-shim", args: shim("/tmp/nskbench.1/containerd-r2/containerd/containerd.sock"), ticks: 10, start: 7, pssKB: 5000},
	)
	p := procFS{root: root}
	st := containerdStack(50, 11, addr)
	groups, _, err := st.members(p)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]group{}
	for k, g := range groups {
		got[k.pid] = g
	}
	want := map[int]group{11: groupKubelet, 50: groupContainerd, 51: groupShims, 52: groupShims}
	if !maps.Equal(got, want) {
		t.Errorf("members = %v, want %v", got, want)
	}
	pss, err := st.samplePSS(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pss.stackTotal(), float64((40000+6000)*1024); got != want {
		t.Errorf("stack PSS = %.0f, want %.0f (containerd and its 2 shims)", got, want)
	}
	if got := shimPids(p, addr); !slices.Equal(sortedInts(got), []int{51, 52}) {
		t.Errorf("shimPids = %v, want [51 52]", got)
	}
	// Without its containerd the stack is not measured; no netshim or
	// dockerd is asked for.
	_, err = containerdStack(99, 11, addr).sampleCPU(p)
	if err == nil || !strings.Contains(err.Error(), "containerd (pid 99) is not running") {
		t.Errorf("err = %v, want containerd not running", err)
	}
}

func sortedInts(s []int) []int {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// The real /proc: this process is found and has a PSS.
func TestProcFSSelf(t *testing.T) {
	p := procFS{root: "/proc"}
	st, err := p.stat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != os.Getppid() || st.start == 0 {
		t.Errorf("stat of self = %+v, want ppid %d and a start time", st, os.Getppid())
	}
	if kb, err := p.pssKB(os.Getpid()); err != nil || kb == 0 {
		t.Errorf("PSS of self = %d kB, %v", kb, err)
	}
}
