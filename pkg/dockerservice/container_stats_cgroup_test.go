package dockerservice

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// A container's cgroup is looked up through its pid once: later readings
// go to the cgroup files alone. The lookup still refuses a pid that names
// another container's process, and is made again for a new process; a
// container gone from the index is forgotten at kubelet's next listing.
func TestContainerCgroupFoundOncePerProcess(t *testing.T) {
	e := newPodEnv(t)
	h := newFakeHost(t, e.ds, false)
	id := e.create(t, ctrConfig("app"))
	e.start(t, id)
	pid := e.pid(t, id)
	pod := "/kubepods/besteffort/pod" + e.sandbox.Metadata.Uid
	dir := pod + "/" + id
	h.cgroupFiles(dir, usage{mem: 1000})
	memory := func() *runtimeapi.UInt64Value {
		t.Helper()
		resp, err := e.ds.ContainerStats(context.Background(), &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStats().GetMemory().GetUsageBytes()
	}

	// The pid was given to a process of another container: no figures,
	// and nothing remembered.
	h.process(pid, pod+"/"+strings.Repeat("f", 64))
	if m := memory(); m != nil {
		t.Errorf("pid of another container's process: memory %v, want none", m)
	}
	h.process(pid, dir)
	if m := memory(); m.GetValue() != 1000 {
		t.Fatalf("memory %v, want 1000", m)
	}

	// Found: /proc/<pid>/cgroup is not read again, the cgroup's files are.
	if err := os.Remove(filepath.Join(h.proc, strconv.Itoa(pid), "cgroup")); err != nil {
		t.Fatal(err)
	}
	h.cgroupFiles(dir, usage{mem: 2000})
	if m := memory(); m.GetValue() != 2000 {
		t.Errorf("memory %v, want 2000 (from the cgroup found before)", m)
	}

	// A new process (Docker restarted the container in place): looked up
	// again, and refused as above.
	e.ds.store().Update(id, func(r *store.Record) { r.Pid = pid + 1 })
	h.process(pid+1, pod+"/"+strings.Repeat("f", 64))
	if m := memory(); m != nil {
		t.Errorf("new pid naming another container's cgroup: memory %v, want none", m)
	}
	h.process(pid+1, dir)
	if m := memory(); m.GetValue() != 2000 {
		t.Errorf("new pid in the container's cgroup: memory %v, want 2000", m)
	}

	// Gone from the index: the next unfiltered listing forgets it. Put
	// back with its /proc entry gone, it has no figures then; a
	// remembered cgroup would still give them.
	rec, _ := e.ds.store().Get(id)
	e.ds.store().Delete(id)
	if _, err := e.ds.ListContainerStats(context.Background(), &runtimeapi.ListContainerStatsRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(h.proc, strconv.Itoa(pid+1), "cgroup")); err != nil {
		t.Fatal(err)
	}
	e.ds.store().Put(rec)
	if m := memory(); m != nil {
		t.Errorf("the cgroup of a container gone from the index is still remembered: memory %v, want none", m)
	}
}
