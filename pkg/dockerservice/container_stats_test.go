package dockerservice

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/netshim/netshim/internal/testutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestContainerStatsFromCgroups(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		name := "cgroup v1"
		if v2 {
			name = "cgroup v2"
		}
		t.Run(name, func(t *testing.T) {
			e := newPodEnv(t)
			root := t.TempDir()
			procRoot, cgroupRoot := filepath.Join(root, "proc"), filepath.Join(root, "cgroup")
			clock := time.Unix(1000, 0)
			useStatsRoots(e.ds, procRoot, cgroupRoot, func() time.Time { return clock })

			running := e.create(t, ctrConfig("running"))
			e.start(t, running)
			created := e.create(t, ctrConfig("created"))
			rec, _ := e.ds.store().Get(running)
			cg := "/kubepods/pod1/" + running
			pid := strconv.Itoa(rec.Pid)
			if v2 {
				testutil.WriteFiles(t, map[string]string{
					filepath.Join(procRoot, pid, "cgroup"):          "0::" + cg + "\n",
					filepath.Join(cgroupRoot, cg, "cpu.stat"):       "usage_usec 5000\nuser_usec 4000\n",
					filepath.Join(cgroupRoot, cg, "memory.current"): "1000000\n",
					filepath.Join(cgroupRoot, cg, "memory.stat"):    "anon 600000\ninactive_file 300000\npgfault 7\npgmajfault 1\n",
					filepath.Join(cgroupRoot, cg, "io.pressure"):    "some avg10=1.50 avg60=0.00 avg300=0.00 total=30\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=20\n",
				})
			} else {
				testutil.WriteFiles(t, map[string]string{
					filepath.Join(procRoot, pid, "cgroup"):                           "4:memory:" + cg + "\n2:cpuacct:" + cg + "\n1:cpu:" + cg + "\n0::/\n",
					filepath.Join(cgroupRoot, "cpuacct", cg, "cpuacct.usage"):        "5000000\n",
					filepath.Join(cgroupRoot, "memory", cg, "memory.usage_in_bytes"): "1000000\n",
					filepath.Join(cgroupRoot, "memory", cg, "memory.stat"):           "rss 1\ntotal_rss 600000\ntotal_inactive_file 300000\ntotal_pgfault 7\ntotal_pgmajfault 1\n",
				})
			}

			resp, err := e.ds.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: running})
			if err != nil {
				t.Fatal(err)
			}
			s := resp.Stats
			if s.Attributes.Id != running || s.Attributes.Metadata.Name != "running" || s.Attributes.Labels["app"] != "web" {
				t.Errorf("attributes = %v", s.Attributes)
			}
			if s.Cpu.Timestamp == 0 || s.Cpu.GetUsageCoreNanoSeconds().GetValue() != 5000000 {
				t.Errorf("cpu = %v", s.Cpu)
			}
			if v2 {
				if psi := s.GetIo().GetPsi(); psi.GetSome().GetTotal() != 30_000 || psi.GetSome().GetAvg10() != 1.5 || psi.GetFull().GetTotal() != 20_000 {
					t.Errorf("io = %v, want the pressure in nanoseconds", s.Io)
				}
			} else if s.Io != nil {
				t.Errorf("io = %v on cgroup v1, which has no pressure", s.Io)
			}
			m := s.Memory
			if m.Timestamp == 0 || m.GetUsageBytes().GetValue() != 1000000 || m.GetWorkingSetBytes().GetValue() != 700000 ||
				m.GetRssBytes().GetValue() != 600000 || m.GetPageFaults().GetValue() != 7 || m.GetMajorPageFaults().GetValue() != 1 {
				t.Errorf("memory = %v", m)
			}

			// Two seconds and 1.5 s of CPU later: 0.75 cores.
			clock = clock.Add(2 * time.Second)
			if v2 {
				testutil.WriteFiles(t, map[string]string{filepath.Join(cgroupRoot, cg, "cpu.stat"): "usage_usec 1505000\nuser_usec 4000\n"})
			} else {
				testutil.WriteFiles(t, map[string]string{filepath.Join(cgroupRoot, "cpuacct", cg, "cpuacct.usage"): "1505000000\n"})
			}
			e.quiesce(t)
			e.docker.ResetCalls()
			list, err := e.ds.ListContainerStats(context.Background(), &runtimeapi.ListContainerStatsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]*runtimeapi.ContainerStats{}
			for _, s := range list.Stats {
				ids[s.Attributes.Id] = s
			}
			if len(ids) != 2 || ids[running] == nil || ids[created] == nil {
				t.Fatalf("listed %v, want the running and the created container", ids)
			}
			if c := ids[created]; c.Cpu.GetTimestamp() == 0 || c.Cpu.UsageCoreNanoSeconds != nil {
				t.Errorf("created container's cpu = %v, want a timestamp and no usage", c.Cpu)
			}
			if got := ids[running].Cpu.GetUsageNanoCores(); got.GetValue() != 750_000_000 {
				t.Errorf("second reading's rate = %v, want 750000000 nanocores", got)
			}
			if len(e.docker.Calls()) != 0 {
				t.Errorf("ListContainerStats called Docker: %v", e.docker.Calls())
			}
			for _, f := range []*runtimeapi.ContainerStatsFilter{
				{Id: running[:8]}, {PodSandboxId: e.sandboxID, LabelSelector: map[string]string{"io.kubernetes.container.name": "running"}},
			} {
				list, err := e.ds.ListContainerStats(context.Background(), &runtimeapi.ListContainerStatsRequest{Filter: f})
				if err != nil || len(list.Stats) != 1 || list.Stats[0].Attributes.Id != running {
					t.Errorf("filter %v: %v, %v", f, list, err)
				}
			}
		})
	}
}

// A pid the index still holds for a container whose process exited may
// name another process by now: its cgroup is not the container's, and
// its usage must not be reported as the container's.
func TestContainerStatsIgnoresReusedPid(t *testing.T) {
	e := newPodEnv(t)
	root := t.TempDir()
	procRoot, cgroupRoot := filepath.Join(root, "proc"), filepath.Join(root, "cgroup")
	useStatsRoots(e.ds, procRoot, cgroupRoot, nil)
	id := e.create(t, ctrConfig("running"))
	e.start(t, id)
	rec, _ := e.ds.store().Get(id)
	testutil.WriteFiles(t, map[string]string{
		filepath.Join(procRoot, strconv.Itoa(rec.Pid), "cgroup"):        "0::/system.slice/cron.service\n",
		filepath.Join(cgroupRoot, "system.slice/cron.service/cpu.stat"): "usage_usec 5000\n",
	})
	resp, err := e.ds.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Stats.Cpu.UsageCoreNanoSeconds != nil || resp.Stats.Memory.UsageBytes != nil {
		t.Errorf("reported another process's usage: %v", resp.Stats)
	}
}
