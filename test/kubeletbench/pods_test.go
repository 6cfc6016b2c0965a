package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestWriteAndRemoveManifests(t *testing.T) {
	dir := t.TempDir()
	paths, err := writeManifests(dir, "ns1", "img:1", 3)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"kb-000.json", "kb-001.json", "kb-002.json"}; !slices.Equal(names, want) {
		t.Fatalf("dir holds %v, want %v (no temp files)", names, want)
	}
	var pod struct {
		Metadata struct{ Name, Namespace string }
		Spec     struct {
			Containers []struct {
				Image, ImagePullPolicy string
				Command                []string
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "kb-001.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &pod); err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers
	if pod.Metadata.Name != "kb-001" || pod.Metadata.Namespace != "ns1" || len(c) != 1 ||
		c[0].Image != "img:1" || c[0].ImagePullPolicy != "Never" || !slices.Equal(c[0].Command, []string{"sh", "-c", sleeper}) {
		t.Errorf("manifest = %s", data)
	}
	if err := removeManifests(append(paths, filepath.Join(dir, "never-there.json"))); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}

func TestChangedDuring(t *testing.T) {
	before := podView{runningIDs: map[string]uint32{"aaaaaaaaaaaaaaaa": 0, "bbbb": 0, "cccc": 1}}
	after := podView{runningIDs: map[string]uint32{"aaaaaaaaaaaaaaaa": 0, "cccc": 2, "dddd": 0}}
	got := changedDuring(before, after)
	want := []string{"container bbbb no longer running", "container cccc attempt 1 -> 2", "container dddd started during the hold"}
	if !slices.Equal(got, want) {
		t.Errorf("changes = %q, want %q", got, want)
	}
	if got := changedDuring(after, after); len(got) != 0 {
		t.Errorf("no change: %q", got)
	}
}

func TestPercentile(t *testing.T) {
	s := func(vs ...int) []time.Duration {
		var out []time.Duration
		for _, v := range vs {
			out = append(out, time.Duration(v)*time.Second)
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * time.Millisecond // 100..1 ms, unsorted
	}
	for _, tt := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
		ok   bool
	}{
		{nil, 50, 0, false},
		{s(3), 50, 3 * time.Second, true},
		{s(3), 99, 3 * time.Second, true},
		{s(4, 1, 3, 2), 50, 2 * time.Second, true}, // nearest rank: the 2nd of 4
		{s(4, 1, 3, 2), 99, 4 * time.Second, true},
		{hundred, 50, 50 * time.Millisecond, true},
		{hundred, 99, 99 * time.Millisecond, true},
		{hundred, 100, 100 * time.Millisecond, true},
		{s(1), 0, 0, false},
	} {
		got, ok := percentile(tt.in, tt.p)
		if got != tt.want || ok != tt.ok {
			t.Errorf("percentile(%d values, %v) = %v, %v; want %v, %v", len(tt.in), tt.p, got, ok, tt.want, tt.ok)
		}
	}
	in := s(4, 1, 3, 2)
	percentile(in, 50)
	if in[0] != 4*time.Second {
		t.Error("percentile sorted its argument")
	}
}

// fakeRuntime answers the CRI calls startedAfter makes; the rest of the
// interface is left nil (a call would panic: the test would show it).
type fakeRuntime struct {
	runtimeapi.RuntimeServiceClient
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	startedAt  map[string]int64
}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: f.sandboxes}, nil
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{Containers: f.containers}, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, r *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	at, ok := f.startedAt[r.ContainerId]
	if !ok {
		return nil, errors.New("not found")
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: r.ContainerId, StartedAt: at}}, nil
}

func TestStartedAfter(t *testing.T) {
	drop := time.Unix(1000, 0)
	sb := func(id, ns string) *runtimeapi.PodSandbox {
		return &runtimeapi.PodSandbox{Id: id, State: runtimeapi.PodSandboxState_SANDBOX_READY,
			Metadata: &runtimeapi.PodSandboxMetadata{Namespace: ns}}
	}
	ctr := func(id, sandbox string, state runtimeapi.ContainerState) *runtimeapi.Container {
		return &runtimeapi.Container{Id: id, PodSandboxId: sandbox, State: state, Metadata: &runtimeapi.ContainerMetadata{}}
	}
	f := &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandbox{sb("s1", "ns"), sb("s2", "ns"), sb("other", "kube-system")},
		containers: []*runtimeapi.Container{
			ctr("c1", "s1", runtimeapi.ContainerState_CONTAINER_RUNNING),
			ctr("c2", "s2", runtimeapi.ContainerState_CONTAINER_RUNNING),
			ctr("c3", "s2", runtimeapi.ContainerState_CONTAINER_EXITED),     // not running: not read
			ctr("c4", "other", runtimeapi.ContainerState_CONTAINER_RUNNING), // another namespace
		},
		startedAt: map[string]int64{"c1": drop.Add(2 * time.Second).UnixNano(), "c2": drop.Add(500 * time.Millisecond).UnixNano()},
	}
	got, err := startedAfter(context.Background(), f, "ns", drop)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []time.Duration{2 * time.Second, 500 * time.Millisecond}) {
		t.Errorf("started after = %v, want [2s 500ms] (c1, c2)", got)
	}
	f.startedAt["c2"] = 0
	if _, err := startedAfter(context.Background(), f, "ns", drop); err == nil || !strings.Contains(err.Error(), "no StartedAt") {
		t.Errorf("a running container without StartedAt: err = %v", err)
	}
	delete(f.startedAt, "c2")
	if _, err := startedAfter(context.Background(), f, "ns", drop); err == nil || !strings.Contains(err.Error(), "ContainerStatus c2") {
		t.Errorf("ContainerStatus failing: err = %v", err)
	}
}
