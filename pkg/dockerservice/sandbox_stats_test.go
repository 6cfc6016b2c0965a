package dockerservice

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/dockerservice/stats"
)

// fakeHost is a fake /proc and /sys/fs/cgroup for the stats reader, in
// the layout of a cgroup v1 host (hybrid, like the development machine)
// or a pure cgroup v2 one.
type fakeHost struct {
	tb           testing.TB
	proc, cgroup string
	v2           bool
}

func newFakeHost(tb testing.TB, ds *DockerService, v2 bool) *fakeHost {
	root := tb.TempDir()
	h := &fakeHost{tb: tb, proc: filepath.Join(root, "proc"), cgroup: filepath.Join(root, "cgroup"), v2: v2}
	useStatsRoots(ds, h.proc, h.cgroup, nil)
	return h
}

// useStatsRoots gives the service a stats reader of fake proc and cgroup
// roots, and of a fake clock unless now is nil.
func useStatsRoots(ds *DockerService, proc, cgroup string, now func() time.Time) {
	ds.containers.stats = stats.New(stats.Options{ProcRoot: proc, CgroupRoot: cgroup, Now: now, WritableLayer: ds.containers.layers.WritableLayer})
}

func (h *fakeHost) write(path, content string) {
	h.tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		h.tb.Fatal(err)
	}
}

// usage is what a fake cgroup reports.
type usage struct {
	cpuNanos, mem, inactiveFile, tasks uint64
}

// process places pid in cgroup dir.
func (h *fakeHost) process(pid int, dir string) {
	h.tb.Helper()
	content := "0::" + dir + "\n"
	if !h.v2 {
		content = fmt.Sprintf("9:name=systemd:%[1]s\n8:pids:%[1]s\n4:memory:%[1]s\n2:cpuacct:%[1]s\n1:cpu:%[1]s\n0::%[1]s\n", dir)
	}
	h.write(filepath.Join(h.proc, strconv.Itoa(pid), "cgroup"), content)
}

// cgroupFiles writes the files of cgroup dir.
func (h *fakeHost) cgroupFiles(dir string, u usage) {
	h.tb.Helper()
	if h.v2 {
		d := filepath.Join(h.cgroup, dir)
		h.write(filepath.Join(d, "cpu.stat"), fmt.Sprintf("usage_usec %d\nuser_usec 1\nsystem_usec 1\n", u.cpuNanos/1000))
		h.write(filepath.Join(d, "memory.current"), fmt.Sprintf("%d\n", u.mem))
		h.write(filepath.Join(d, "memory.stat"), fmt.Sprintf("anon %d\nfile %d\ninactive_file %d\npgfault 10\npgmajfault 2\n", u.mem/2, u.mem/2, u.inactiveFile))
		h.write(filepath.Join(d, "pids.current"), fmt.Sprintf("%d\n", u.tasks))
		h.write(filepath.Join(d, "cpu.pressure"), "some avg10=2.50 avg60=1.00 avg300=0.50 total=7000000\nfull avg10=1.00 avg60=0.50 avg300=0.25 total=3000000\n")
		h.write(filepath.Join(d, "memory.pressure"), "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
		h.write(filepath.Join(d, "io.pressure"), "some avg10=0.10 avg60=0.00 avg300=0.00 total=2500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n")
		return
	}
	h.write(filepath.Join(h.cgroup, "cpuacct", dir, "cpuacct.usage"), fmt.Sprintf("%d\n", u.cpuNanos))
	h.write(filepath.Join(h.cgroup, "memory", dir, "memory.usage_in_bytes"), fmt.Sprintf("%d\n", u.mem))
	h.write(filepath.Join(h.cgroup, "memory", dir, "memory.stat"), fmt.Sprintf("cache 1\nrss 1\ntotal_cache %d\ntotal_rss %d\ntotal_inactive_file %d\ntotal_pgfault 10\ntotal_pgmajfault 2\n", u.mem/2, u.mem/2, u.inactiveFile))
	h.write(filepath.Join(h.cgroup, "pids", dir, "pids.current"), fmt.Sprintf("%d\n", u.tasks))
	// The hybrid v2 tree has pressure files too; they are not the
	// container's figures and must not be reported.
	h.write(filepath.Join(h.cgroup, "unified", dir, "cpu.pressure"), "some avg10=9.00 avg60=9.00 avg300=9.00 total=9\n")
}

// container places a running container in dir/<its cgroup name>, with u.
func (h *fakeHost) container(ds *DockerService, id, podDir string, u usage) string {
	h.tb.Helper()
	rec, ok := ds.store().Get(id)
	if !ok || rec.Pid <= 0 {
		h.tb.Fatalf("container %s is not running", id)
	}
	dir := podDir + "/" + id
	if h.v2 {
		dir = podDir + "/docker-" + id + ".scope"
	}
	h.process(rec.Pid, dir)
	h.cgroupFiles(dir, u)
	return dir
}

// netdev gives pid's network namespace these interfaces (name: rx bytes,
// rx errors, tx bytes, tx errors).
func (h *fakeHost) netdev(pid int, ifaces map[string][4]uint64) {
	h.tb.Helper()
	content := "Inter-|   Receive                                                |  Transmit\n" +
		" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
	for _, name := range []string{"lo", "eth0", "net1"} {
		if v, ok := ifaces[name]; ok {
			content += fmt.Sprintf("%6s: %d 11 %d 3 0 0 0 0 %d 12 %d 4 0 0 0 0\n", name, v[0], v[1], v[2], v[3])
		}
	}
	h.write(filepath.Join(h.proc, strconv.Itoa(pid), "net", "dev"), content)
}

func (e *podEnv) pid(t *testing.T, id string) int {
	t.Helper()
	rec, ok := e.ds.store().Get(id)
	if !ok {
		t.Fatalf("%s not indexed", id)
	}
	return rec.Pid
}

// podDirs are the pod cgroups kubelet makes for the test pod (UID
// "uid-web") with each driver.
func podDir(v2 bool) string {
	if v2 {
		return "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid_web.slice"
	}
	return "/kubepods/burstable/poduid-web"
}

var (
	podUsage   = usage{cpuNanos: 9_000_000_000, mem: 50_000_000, inactiveFile: 20_000_000, tasks: 7}
	infraUsage = usage{cpuNanos: 1_000_000_000, mem: 1_000_000, inactiveFile: 0, tasks: 1}
	ctrUsage   = usage{cpuNanos: 3_000_000_000, mem: 30_000_000, inactiveFile: 10_000_000, tasks: 4}
)

func TestPodSandboxStatsFromPodCgroup(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "cgroup v1 cgroupfs", true: "cgroup v2 systemd"}[v2], func(t *testing.T) {
			e := newPodEnv(t)
			h := newFakeHost(t, e.ds, v2)
			clock := time.Unix(1000, 0)
			useStatsRoots(e.ds, h.proc, h.cgroup, func() time.Time { return clock })
			running := e.create(t, ctrConfig("running"))
			e.start(t, running)
			created := e.create(t, ctrConfig("created"))

			pod := podDir(v2)
			h.cgroupFiles(pod, podUsage)
			h.container(e.ds, e.sandboxID, pod, infraUsage)
			h.container(e.ds, running, pod, ctrUsage)
			h.netdev(e.pid(t, e.sandboxID), map[string][4]uint64{"lo": {999, 0, 999, 0}, "eth0": {5000, 1, 7000, 2}, "net1": {300, 0, 400, 0}})

			e.quiesce(t)
			e.docker.ResetCalls()
			resp, err := e.ds.PodSandboxStats(context.Background(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: e.sandboxID[:10]})
			if err != nil {
				t.Fatal(err)
			}
			st := resp.Stats
			if a := st.Attributes; a.Id != e.sandboxID || a.Metadata.GetName() != "web" || a.Metadata.GetUid() != "uid-web" ||
				a.Labels["app"] != "web" || a.Annotations["note"] != "x" {
				t.Errorf("attributes = %v", a)
			}
			l := st.Linux
			ts := clock.UnixNano()
			// The pod cgroup's figures, not the sum of its containers'.
			if l.Cpu.Timestamp != ts || l.Cpu.GetUsageCoreNanoSeconds().GetValue() != podUsage.cpuNanos || l.Cpu.UsageNanoCores != nil {
				t.Errorf("cpu = %v, want the pod cgroup's usage and no rate yet", l.Cpu)
			}
			if m := l.Memory; m.Timestamp != ts || m.GetUsageBytes().GetValue() != podUsage.mem || m.GetWorkingSetBytes().GetValue() != podUsage.mem-podUsage.inactiveFile ||
				m.GetRssBytes().GetValue() != podUsage.mem/2 || m.GetPageFaults().GetValue() != 10 || m.GetMajorPageFaults().GetValue() != 2 {
				t.Errorf("memory = %v", m)
			}
			if p := l.Process; p.GetTimestamp() != ts || p.GetProcessCount().GetValue() != podUsage.tasks {
				t.Errorf("process = %v, want %d", p, podUsage.tasks)
			}
			if v2 {
				if psi := l.Cpu.GetPsi(); psi.GetSome().GetTotal() != 7_000_000_000 || psi.GetSome().GetAvg10() != 2.5 || psi.GetFull().GetTotal() != 3_000_000_000 {
					t.Errorf("cpu psi = %v", psi)
				}
				if l.Memory.GetPsi().GetSome() == nil || l.Io.GetPsi().GetSome().GetTotal() != 2_500_000_000 || l.Io.GetTimestamp() != ts {
					t.Errorf("memory psi = %v, io = %v", l.Memory.GetPsi(), l.Io)
				}
			} else if l.Cpu.Psi != nil || l.Memory.Psi != nil || l.Io != nil {
				t.Errorf("pressure on cgroup v1: cpu %v memory %v io %v", l.Cpu.Psi, l.Memory.Psi, l.Io)
			}
			n := l.Network
			if n.GetTimestamp() != ts || n.GetDefaultInterface().GetName() != "eth0" || n.DefaultInterface.GetRxBytes().GetValue() != 5000 ||
				n.DefaultInterface.GetRxErrors().GetValue() != 1 || n.DefaultInterface.GetTxBytes().GetValue() != 7000 || n.DefaultInterface.GetTxErrors().GetValue() != 2 {
				t.Errorf("network = %v", n)
			}
			if len(n.GetInterfaces()) != 1 || n.Interfaces[0].Name != "net1" || n.Interfaces[0].GetRxBytes().GetValue() != 300 {
				t.Errorf("other interfaces = %v, want net1 only (lo left out)", n.GetInterfaces())
			}
			ctrs := map[string]*runtimeapi.ContainerStats{}
			for _, c := range l.Containers {
				ctrs[c.Attributes.Id] = c
			}
			if len(ctrs) != 2 || ctrs[running].GetCpu().GetUsageCoreNanoSeconds().GetValue() != ctrUsage.cpuNanos ||
				ctrs[running].Attributes.Metadata.GetName() != "running" || ctrs[created] == nil || ctrs[created].Cpu.UsageCoreNanoSeconds != nil {
				t.Errorf("containers = %v", l.Containers)
			}
			if calls := e.docker.Calls(); len(calls) != 0 {
				t.Errorf("PodSandboxStats called Docker: %v", calls)
			}

			// Two seconds on, 3 s more of CPU: 1.5 cores, through
			// the list as well.
			clock = clock.Add(2 * time.Second)
			h.cgroupFiles(pod, usage{cpuNanos: podUsage.cpuNanos + 3_000_000_000, mem: podUsage.mem, inactiveFile: podUsage.inactiveFile, tasks: 7})
			list, err := e.ds.ListPodSandboxStats(context.Background(), &runtimeapi.ListPodSandboxStatsRequest{})
			if err != nil || len(list.Stats) != 1 {
				t.Fatalf("ListPodSandboxStats = %v, %v", list, err)
			}
			if got := list.Stats[0].Linux.Cpu.GetUsageNanoCores().GetValue(); got != 1_500_000_000 {
				t.Errorf("pod rate = %d nanocores, want 1500000000", got)
			}
			if calls := e.docker.Calls(); len(calls) != 0 {
				t.Errorf("ListPodSandboxStats called Docker: %v", calls)
			}
		})
	}
}

// A sandbox made with no cgroup parent sits in Docker's own cgroup with
// every other container: that cgroup's figures are not the pod's, the sum
// of its containers' is.
func TestPodSandboxStatsWithoutPodCgroupSumsContainers(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "cgroup v1", true: "cgroup v2"}[v2], func(t *testing.T) {
			e := newPodEnv(t)
			h := newFakeHost(t, e.ds, v2)
			running := e.create(t, ctrConfig("running"))
			e.start(t, running)
			dockerDir := "/docker"
			if v2 {
				dockerDir = "/system.slice"
			}
			h.cgroupFiles(dockerDir, usage{cpuNanos: 999_000_000_000, mem: 999_000_000, tasks: 99})
			h.cgroupFiles(dockerDir+"/someone-elses", usage{cpuNanos: 1, mem: 1, tasks: 1})
			h.container(e.ds, e.sandboxID, dockerDir, infraUsage)
			h.container(e.ds, running, dockerDir, ctrUsage)

			resp, err := e.ds.PodSandboxStats(context.Background(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: e.sandboxID})
			if err != nil {
				t.Fatal(err)
			}
			l := resp.Stats.Linux
			if got, want := l.Cpu.GetUsageCoreNanoSeconds().GetValue(), infraUsage.cpuNanos+ctrUsage.cpuNanos; got != want {
				t.Errorf("cpu = %d, want the containers' sum %d", got, want)
			}
			wantWS := infraUsage.mem - infraUsage.inactiveFile + ctrUsage.mem - ctrUsage.inactiveFile
			if m := l.Memory; m.GetUsageBytes().GetValue() != infraUsage.mem+ctrUsage.mem || m.GetWorkingSetBytes().GetValue() != wantWS {
				t.Errorf("memory = %v, want the containers' sum", m)
			}
			if got := l.Process.GetProcessCount().GetValue(); got != infraUsage.tasks+ctrUsage.tasks {
				t.Errorf("tasks = %d, want %d", got, infraUsage.tasks+ctrUsage.tasks)
			}
			if l.Cpu.Psi != nil || l.Memory.Psi != nil || l.Io != nil {
				t.Errorf("pressure cannot be summed, yet reported: %v %v %v", l.Cpu.Psi, l.Memory.Psi, l.Io)
			}
		})
	}
}

// A cgroup parent kubelet did not name (another client's) is the pod's
// when it holds the pod's containers only.
func TestPodSandboxStatsFromUnnamedPodCgroup(t *testing.T) {
	e := newPodEnv(t)
	h := newFakeHost(t, e.ds, true)
	running := e.create(t, ctrConfig("running"))
	e.start(t, running)
	created := e.create(t, ctrConfig("created"))
	h.cgroupFiles("/mypods/web", podUsage)
	h.container(e.ds, e.sandboxID, "/mypods/web", infraUsage)
	h.container(e.ds, running, "/mypods/web", ctrUsage)
	// A cgroup the created container's runc left behind is the pod's too.
	h.cgroupFiles("/mypods/web/docker-"+created+".scope", usage{})

	resp, err := e.ds.PodSandboxStats(context.Background(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: e.sandboxID})
	if err != nil {
		t.Fatal(err)
	}
	if l := resp.Stats.Linux; l.Cpu.GetUsageCoreNanoSeconds().GetValue() != podUsage.cpuNanos || l.Cpu.Psi == nil {
		t.Errorf("cpu = %v, want the pod cgroup's", l.Cpu)
	}
}

// With the infra container gone, a running container of the pod stands
// for it: its cgroup's parent is the pod's, its netns the sandbox's.
func TestPodSandboxStatsWithInfraGone(t *testing.T) {
	e := newPodEnv(t)
	h := newFakeHost(t, e.ds, false)
	running := e.create(t, ctrConfig("running"))
	e.start(t, running)
	h.cgroupFiles(podDir(false), podUsage)
	h.container(e.ds, running, podDir(false), ctrUsage)
	h.netdev(e.pid(t, running), map[string][4]uint64{"eth0": {10, 0, 20, 0}})
	// The infra's pid now names another process.
	h.process(e.pid(t, e.sandboxID), "/system.slice/cron.service")

	resp, err := e.ds.PodSandboxStats(context.Background(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: e.sandboxID})
	if err != nil {
		t.Fatal(err)
	}
	l := resp.Stats.Linux
	if l.Cpu.GetUsageCoreNanoSeconds().GetValue() != podUsage.cpuNanos || l.Network.GetDefaultInterface().GetTxBytes().GetValue() != 20 {
		t.Errorf("cpu = %v, network = %v", l.Cpu, l.Network)
	}
}

func TestPodSandboxStatsHostNetworkHasNoNetwork(t *testing.T) {
	e := newTestEnv(t)
	cfg := podConfig("host")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}
	id := e.run(t, cfg)
	h := newFakeHost(t, e.ds, false)
	rec, _ := e.ds.store().Get(id)
	h.cgroupFiles("/kubepods/poduid-host", podUsage)
	h.process(rec.Pid, "/kubepods/poduid-host/"+id)
	h.netdev(rec.Pid, map[string][4]uint64{"eth0": {1, 1, 1, 1}})

	resp, err := e.ds.PodSandboxStats(context.Background(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if l := resp.Stats.Linux; l.Network != nil || l.Cpu.GetUsageCoreNanoSeconds().GetValue() != podUsage.cpuNanos {
		t.Errorf("host-network pod: network = %v (want none: the node's interfaces are not the pod's), cpu = %v", l.Network, l.Cpu)
	}
}

func TestPodSandboxStatsOfStoppedSandbox(t *testing.T) {
	e := newPodEnv(t)
	newFakeHost(t, e.ds, false)
	exited := e.create(t, ctrConfig("exited"))
	e.start(t, exited)
	if _, err := e.ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: e.sandboxID}); err != nil {
		t.Fatal(err)
	}
	resp, err := e.ds.PodSandboxStats(context.Background(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: e.sandboxID})
	if err != nil {
		t.Fatal(err)
	}
	l := resp.Stats.Linux
	if l == nil || l.Cpu.GetTimestamp() == 0 || l.Cpu.UsageCoreNanoSeconds != nil || l.Memory.UsageBytes != nil || l.Network != nil || l.Process != nil {
		t.Fatalf("stopped sandbox: linux = %v, want timestamps and no figures", l)
	}
	if len(l.Containers) != 1 || l.Containers[0].Attributes.Id != exited {
		t.Errorf("containers = %v", l.Containers)
	}
}

func TestPodSandboxStatsOfCheckpointOnlySandbox(t *testing.T) {
	e := newTestEnv(t)
	id := e.run(t, podConfig("web"))
	e.docker.RemoveBehindBack(id)
	testutil.Eventually(t, "the removal to reach the index", func() bool { _, ok := e.ds.store().Get(id); return !ok })
	resp, err := e.ds.PodSandboxStats(context.Background(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if a := resp.Stats.Attributes; a.Id != id || a.Metadata.GetName() != "web" || resp.Stats.Linux == nil {
		t.Errorf("stats = %v", resp.Stats)
	}
	list, err := e.ds.ListPodSandboxStats(context.Background(), &runtimeapi.ListPodSandboxStatsRequest{})
	if err != nil || len(list.Stats) != 0 {
		t.Errorf("ListPodSandboxStats = %v, %v; want the checkpoint-only sandbox left out", list, err)
	}
}

func TestListPodSandboxStatsFilter(t *testing.T) {
	e := newTestEnv(t)
	web := e.run(t, podConfig("web"))
	db := e.run(t, podConfig("db"))
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.PodSandboxStatsFilter
		want   []string
	}{
		{"none", nil, []string{web, db}},
		{"exact id", &runtimeapi.PodSandboxStatsFilter{Id: web}, []string{web}},
		{"id prefix", &runtimeapi.PodSandboxStatsFilter{Id: db[:6]}, []string{db}},
		{"label", &runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"app": "db"}}, []string{db}},
		{"id and label disagree", &runtimeapi.PodSandboxStatsFilter{Id: web, LabelSelector: map[string]string{"app": "db"}}, nil},
		{"unknown label", &runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"io.kubernetes.pod.name": "nope"}}, nil},
		{"unknown id", &runtimeapi.PodSandboxStatsFilter{Id: "ffffffffffff"}, nil},
	} {
		list, err := e.ds.ListPodSandboxStats(context.Background(), &runtimeapi.ListPodSandboxStatsRequest{Filter: tc.filter})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := map[string]bool{}
		for _, s := range list.Stats {
			got[s.Attributes.Id] = true
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: listed %v, want %v", tc.name, got, tc.want)
		}
		for _, id := range tc.want {
			if !got[id] {
				t.Errorf("%s: %s not listed", tc.name, id)
			}
		}
	}
}
