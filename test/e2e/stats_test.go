//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// A pod with a kubelet-style cgroup parent (cgroupfs driver: ".../pod<uid>")
// running a busy loop: PodSandboxStats (what `crictl statsp` shows) reports
// the pod cgroup's CPU time as Docker's cgroup files have it, a CPU rate,
// a memory working set, the pod's tasks, eth0's received bytes after the
// host pinged the pod, and the busy container's stats; ListPodSandboxStats
// filters by ID; ListPodSandboxMetrics has the pod's CPU and network.
func TestPodSandboxStats(t *testing.T) {
	requireWorkloadImage(t)
	e := newEnv(t, envOptions{})
	e.start()
	uid := e.podConfig("stats").Metadata.Uid
	top := fmt.Sprintf("/nse2e-stats-%d", e.slot)
	parent := top + "/pod" + uid
	podID, podCfg := e.runPodWith("stats", harness.WithPodCgroupParent(parent))
	// Docker makes the parent cgroups and leaves them: remove them once
	// the pod is gone (e.cleanup, registered first, runs after this).
	t.Cleanup(func() {
		_, _, _ = e.crictl("stopp", podID)
		_, _, _ = e.crictl("rmp", podID)
		for _, c := range []string{"cpu", "cpuacct", "memory", "pids", "blkio", "devices", "freezer", "cpuset", "perf_event", "net_cls", "net_prio", "hugetlb", "systemd", "unified", "rdma", "misc"} {
			_ = os.Remove(filepath.Join("/sys/fs/cgroup", c, parent))
			_ = os.Remove(filepath.Join("/sys/fs/cgroup", c, top))
		}
	})
	busy := e.startContainer(podID, podCfg, "busy", harness.WithCommand("sh", "-c", "while :; do :; done"))
	ping(t, e.podIPs(podID)[0])

	get := func() (*runtimeapi.PodSandboxStats, time.Duration) {
		ctx, cancel := e.rpcCtx()
		defer cancel()
		start := time.Now()
		resp, err := e.client.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podID})
		took := time.Since(start)
		if err != nil {
			t.Fatalf("PodSandboxStats: %v", err)
		}
		return resp.Stats, took
	}
	// The rate needs two readings at least a second apart.
	var st *runtimeapi.PodSandboxStats
	var took time.Duration
	if !poll(15*time.Second, func() bool {
		st, took = get()
		return st.GetLinux().GetCpu().GetUsageNanoCores() != nil
	}) {
		t.Fatalf("no CPU rate after 15 s: %v", st.GetLinux().GetCpu())
	}
	l := st.Linux
	t.Logf("PodSandboxStats took %s: cpu %d ns (%d nanocores), working set %d, tasks %d, eth0 rx %d",
		took, l.Cpu.GetUsageCoreNanoSeconds().GetValue(), l.Cpu.GetUsageNanoCores().GetValue(), l.Memory.GetWorkingSetBytes().GetValue(),
		l.Process.GetProcessCount().GetValue(), l.Network.GetDefaultInterface().GetRxBytes().GetValue())

	// The pod cgroup's own counter, read after the RPC: at least what it
	// reported, and more than the busy container alone.
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", parent, "cpuacct.usage"))
	if err != nil {
		t.Fatalf("reading the pod cgroup (cgroup v1 expected on this machine): %v", err)
	}
	podCPU, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	var busyStats *runtimeapi.ContainerStats
	for _, c := range l.Containers {
		if c.Attributes.Id == busy {
			busyStats = c
		}
	}
	if busyStats == nil || busyStats.Cpu.GetUsageCoreNanoSeconds().GetValue() == 0 {
		t.Fatalf("containers = %v, want the busy container's stats", l.Containers)
	}
	if got := l.Cpu.GetUsageCoreNanoSeconds().GetValue(); got > podCPU || got < busyStats.Cpu.GetUsageCoreNanoSeconds().GetValue() {
		t.Errorf("pod cpu %d, want between the busy container's %d and the pod cgroup's %d read after", got, busyStats.Cpu.GetUsageCoreNanoSeconds().GetValue(), podCPU)
	}
	checkCPURate(t, l, busy, func() *runtimeapi.LinuxPodSandboxStats { st, _ := get(); return st.GetLinux() })
	// The pause process, unless the sandbox is pause-less, and the shell.
	tasks := uint64(2)
	if e.readCheckpoint(podID).Data.Pauseless != nil {
		tasks = 1
	}
	if l.Memory.GetWorkingSetBytes().GetValue() == 0 || l.Process.GetProcessCount().GetValue() < tasks {
		t.Errorf("memory %v process %v, want a working set and %d tasks (the pause process, if any, and the shell)", l.Memory, l.Process, tasks)
	}
	if n := l.Network.GetDefaultInterface(); n.GetName() != "eth0" || n.GetRxBytes().GetValue() == 0 {
		t.Errorf("network = %v, want eth0 with the ping's bytes", l.Network)
	}

	ctx, cancel := e.rpcCtx()
	defer cancel()
	list, err := e.client.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: podID[:12]}})
	if err != nil || len(list.Stats) != 1 || list.Stats[0].Attributes.Id != podID {
		t.Errorf("ListPodSandboxStats by ID prefix = %v, %v", list, err)
	}
	metrics, err := e.client.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		t.Fatalf("ListPodSandboxMetrics: %v", err)
	}
	var names []string
	for _, pm := range metrics.PodMetrics {
		if pm.PodSandboxId != podID {
			continue
		}
		for _, m := range pm.Metrics {
			names = append(names, m.Name+"{"+strings.Join(m.LabelValues, ",")+"}")
		}
	}
	joined := strings.Join(names, "\n")
	checkStatsWithCrictl(t, e, podID, busy)
	for _, want := range []string{
		"container_cpu_usage_seconds_total{," + parent + ",,," + e.namespace + ",stats,total}",
		"container_network_receive_bytes_total{POD,",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("pod metrics lack %s:\n%s", want, joined)
		}
	}
}

// checkCPURate: the pod's CPU rate is what its cumulative usage says over
// the window it was computed on, and the busy container's usage grows.
// However small a share of the cores the busy loop gets on a loaded
// machine, these hold; a fixed floor on the rate would not. first is a
// reading that computed a rate, and so started the next window (see
// minRateWindow in pkg/dockerservice): the first reading a second or more
// after it computes the next rate from it.
func checkCPURate(t *testing.T, first *runtimeapi.LinuxPodSandboxStats, busy string, get func() *runtimeapi.LinuxPodSandboxStats) {
	t.Helper()
	var next *runtimeapi.LinuxPodSandboxStats
	if !poll(15*time.Second, func() bool {
		next = get()
		dt := time.Duration(next.GetCpu().GetTimestamp() - first.Cpu.Timestamp)
		// The window is on the monotonic clock, the timestamps on the
		// wall clock, which NTP may slew by up to 0.05%: a reading just
		// past the second by the wall clock that repeats the rate is
		// still inside the window.
		repeat := dt < time.Second+time.Millisecond && next.GetCpu().GetUsageNanoCores().GetValue() == first.Cpu.GetUsageNanoCores().GetValue()
		return dt >= time.Second && !repeat
	}) {
		t.Fatalf("no reading a second after %d: %v", first.Cpu.Timestamp, next.GetCpu())
	}
	used := next.Cpu.GetUsageCoreNanoSeconds().GetValue() - first.Cpu.GetUsageCoreNanoSeconds().GetValue()
	window := time.Duration(next.Cpu.Timestamp - first.Cpu.Timestamp)
	want := float64(used) / window.Seconds()
	// Within what the clocks may differ by, and rounding.
	got := float64(next.Cpu.GetUsageNanoCores().GetValue())
	if next.Cpu.GetUsageCoreNanoSeconds().GetValue() <= first.Cpu.GetUsageCoreNanoSeconds().GetValue() || got < 0.99*want-1 || got > 1.01*want+1 {
		t.Errorf("pod CPU rate %.0f nanocores, want %.0f: %d ns of CPU over %s", got, want, used, window)
	}
	if limit := float64(runtime.NumCPU()) * 1e9; got > 1.01*limit {
		t.Errorf("pod CPU rate %.0f nanocores on %d cores", got, runtime.NumCPU())
	}
	busyUsage := func(l *runtimeapi.LinuxPodSandboxStats) uint64 {
		for _, c := range l.Containers {
			if c.Attributes.Id == busy {
				return c.Cpu.GetUsageCoreNanoSeconds().GetValue()
			}
		}
		return 0
	}
	if before, after := busyUsage(first), busyUsage(next); after <= before {
		t.Errorf("the busy container's CPU usage went from %d to %d ns over %s", before, after, window)
	}
	t.Logf("pod CPU rate %.0f nanocores: %d ns of CPU over %s", got, used, window)
}

// checkStatsWithCrictl: `crictl statsp` and `crictl stats`, as an operator
// runs them, show the pod's and the container's usage.
func checkStatsWithCrictl(t *testing.T, e *env, podID, ctrID string) {
	t.Helper()
	pod := e.mustCrictl("statsp", "-o", "json", "--id", podID)
	for _, want := range []string{podID, `"usageCoreNanoSeconds"`, `"workingSetBytes"`, `"rxBytes"`, `"eth0"`, ctrID} {
		if !strings.Contains(pod, want) {
			t.Errorf("crictl statsp -o json --id %s lacks %s:\n%s", podID, want, pod)
		}
	}
	ctr := e.mustCrictl("stats", "-o", "json", "--id", ctrID)
	for _, want := range []string{ctrID, `"usageCoreNanoSeconds"`, `"workingSetBytes"`} {
		if !strings.Contains(ctr, want) {
			t.Errorf("crictl stats -o json --id %s lacks %s:\n%s", ctrID, want, ctr)
		}
	}
	if table := e.mustCrictl("statsp", "--id", podID); !strings.Contains(table, podID[:12]) {
		t.Errorf("crictl statsp --id %s: no row for the pod:\n%s", podID, table)
	}
}
