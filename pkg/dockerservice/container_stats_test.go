package dockerservice

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func writeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestContainerStatsFromCgroups(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		name := "cgroup v1"
		if v2 {
			name = "cgroup v2"
		}
		t.Run(name, func(t *testing.T) {
			e := newPodEnv(t)
			root := t.TempDir()
			sr := e.ds.containers.stats
			sr.procRoot, sr.cgroupRoot = filepath.Join(root, "proc"), filepath.Join(root, "cgroup")

			running := e.create(t, ctrConfig("running"))
			e.start(t, running)
			created := e.create(t, ctrConfig("created"))
			rec, _ := e.ds.store.Get(running)
			cg := "/kubepods/pod1/" + running
			pid := strconv.Itoa(rec.Pid)
			if v2 {
				writeFiles(t, map[string]string{
					filepath.Join(sr.procRoot, pid, "cgroup"):          "0::" + cg + "\n",
					filepath.Join(sr.cgroupRoot, cg, "cpu.stat"):       "usage_usec 5000\nuser_usec 4000\n",
					filepath.Join(sr.cgroupRoot, cg, "memory.current"): "1000000\n",
					filepath.Join(sr.cgroupRoot, cg, "memory.stat"):    "anon 600000\ninactive_file 300000\npgfault 7\npgmajfault 1\n",
				})
			} else {
				writeFiles(t, map[string]string{
					filepath.Join(sr.procRoot, pid, "cgroup"):                           "4:memory:" + cg + "\n2:cpuacct:" + cg + "\n1:cpu:" + cg + "\n0::/\n",
					filepath.Join(sr.cgroupRoot, "cpuacct", cg, "cpuacct.usage"):        "5000000\n",
					filepath.Join(sr.cgroupRoot, "memory", cg, "memory.usage_in_bytes"): "1000000\n",
					filepath.Join(sr.cgroupRoot, "memory", cg, "memory.stat"):           "rss 1\ntotal_rss 600000\ntotal_inactive_file 300000\ntotal_pgfault 7\ntotal_pgmajfault 1\n",
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
			m := s.Memory
			if m.Timestamp == 0 || m.GetUsageBytes().GetValue() != 1000000 || m.GetWorkingSetBytes().GetValue() != 700000 ||
				m.GetRssBytes().GetValue() != 600000 || m.GetPageFaults().GetValue() != 7 || m.GetMajorPageFaults().GetValue() != 1 {
				t.Errorf("memory = %v", m)
			}

			e.docker.quiesce()
			e.docker.resetCalls()
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
			if ids[running].Cpu.UsageNanoCores == nil {
				t.Errorf("second reading has no rate: %v", ids[running].Cpu)
			}
			if len(e.docker.callLog()) != 0 {
				t.Errorf("ListContainerStats called Docker: %v", e.docker.callLog())
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
