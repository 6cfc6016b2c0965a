package dockerservice

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
)

func TestContainerLabelsAndAnnotationsRoundTripExactly(t *testing.T) {
	e := newPodEnv(t)
	// Image labels Docker merges in must not come back as CRI labels.
	e.docker.Do(func(s *fakedocker.State) {
		s.Images[testImage] = map[string]string{"io.kubernetes.container.name": "from-image", "maintainer": "someone"}
	})
	cfg := ctrConfig("rt")
	cfg.Labels = map[string]string{
		"io.kubernetes.container.name": "rt", "io.kubernetes.pod.uid": "uid-web",
		"netshim.io/type": "mine", "label.nested": "x", "annotation.x": "y", "empty": "",
	}
	cfg.Annotations = map[string]string{
		"io.kubernetes.container.hash": "1234", "io.kubernetes.container.ports": `[{"containerPort":80}]`,
		"label.k": "v", "multi\nline": "a\nb", "unicode": "ünïcødé",
	}
	id := e.create(t, cfg)
	check := func(what string, labels, annotations map[string]string) {
		t.Helper()
		if !maps.Equal(labels, cfg.Labels) {
			t.Errorf("%s labels = %v, want exactly %v", what, labels, cfg.Labels)
		}
		if !maps.Equal(annotations, cfg.Annotations) {
			t.Errorf("%s annotations = %v, want exactly %v", what, annotations, cfg.Annotations)
		}
	}
	st := e.status(t, id)
	check("status", st.Labels, st.Annotations)
	if st.Metadata.Name != "rt" || st.Metadata.Attempt != 2 {
		t.Errorf("metadata = %v", st.Metadata)
	}
	// The image the user wrote, not the one kubelet resolved (imageSpecOf).
	if st.Image.Image != "busybox:1.36" || st.Image.UserSpecifiedImage != "busybox:1.36" || st.ImageRef != testImageDigest || st.ImageId != testImageID {
		t.Errorf("image = %v, ref %q, id %q", st.Image, st.ImageRef, st.ImageId)
	}
	list, err := e.ds.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{})
	if err != nil || len(list.Containers) != 1 {
		t.Fatalf("ListContainers = %v, %v", list, err)
	}
	check("list", list.Containers[0].Labels, list.Containers[0].Annotations)

	// A record rebuilt from Docker (a resync, a netshim restart) says the
	// same.
	e.ds.refreshRecord(context.Background(), id)
	st = e.status(t, id)
	check("status after re-inspect", st.Labels, st.Annotations)
	if st.Image.UserSpecifiedImage != "busybox:1.36" || st.LogPath == "" {
		t.Errorf("after re-inspect: image %v log path %q", st.Image, st.LogPath)
	}
}

func TestContainerLifecycleIsIdempotent(t *testing.T) {
	e := newPodEnv(t)
	ctx := context.Background()
	stop := func(id string) error {
		_, err := e.ds.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 5})
		return err
	}
	remove := func(id string) error {
		_, err := e.ds.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		return err
	}
	// Missing containers: nothing to do.
	if err := stop("0123456789abcdef"); err != nil {
		t.Errorf("Stop of a missing container: %v", err)
	}
	if err := remove("0123456789abcdef"); err != nil {
		t.Errorf("Remove of a missing container: %v", err)
	}

	id := e.create(t, ctrConfig("idem"))
	if st := e.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_CREATED || st.CreatedAt == 0 || st.StartedAt != 0 {
		t.Errorf("after create: state %v created %d started %d", st.State, st.CreatedAt, st.StartedAt)
	}
	// Stopping a created container is a no-op.
	e.docker.ResetCalls()
	if err := stop(id); err != nil {
		t.Errorf("Stop of a created container: %v", err)
	}
	if n := e.docker.Count("ContainerStop"); n != 0 {
		t.Errorf("Stop of a created container called Docker %d times", n)
	}

	e.start(t, id)
	st := e.status(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.StartedAt == 0 {
		t.Errorf("after start: state %v started %d", st.State, st.StartedAt)
	}
	if _, err := e.ds.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("second start: %v, want FailedPrecondition", err)
	}

	// Stop: the index knows at once, without waiting for the event.
	if err := stop(id[:12]); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if st := e.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.FinishedAt == 0 {
		t.Errorf("after stop: state %v finished %d", st.State, st.FinishedAt)
	}
	if err := stop(id); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	if err := remove(id); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := e.ds.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id}); codeOf(err) != codes.NotFound {
		t.Errorf("status after remove: %v, want NotFound", err)
	}
	if err := remove(id); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if err := stop(id); err != nil {
		t.Errorf("Stop after Remove: %v", err)
	}
	if len(e.docker.ContainerIDs()) != 1 {
		t.Errorf("%d Docker containers left, want only the sandbox's", len(e.docker.ContainerIDs()))
	}

	// A running container is removed by force.
	id2 := e.create(t, ctrConfig("idem2"))
	e.start(t, id2)
	if err := remove(id2); err != nil {
		t.Fatalf("Remove of a running container: %v", err)
	}
	if _, ok := e.ds.store().Get(id2); ok {
		t.Error("removed container still in the index")
	}
}

func TestCreateContainerPreconditions(t *testing.T) {
	e := newPodEnv(t)
	ctx := context.Background()

	t.Run("unknown sandbox", func(t *testing.T) {
		_, err := e.ds.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: "feedface", Config: ctrConfig("x")})
		if codeOf(err) != codes.NotFound {
			t.Errorf("got %v, want NotFound", err)
		}
	})
	t.Run("missing image", func(t *testing.T) {
		cfg := ctrConfig("x")
		cfg.Image.Image = "nowhere/nothing:1"
		e.docker.ResetCalls()
		_, err := e.createErr(cfg)
		if codeOf(err) != codes.NotFound || !strings.Contains(err.Error(), "nowhere/nothing:1") || !strings.Contains(err.Error(), "pull") {
			t.Errorf("got %v, want NotFound naming the image and saying to pull it", err)
		}
		if e.docker.Count("ContainerCreate") != 0 || e.docker.Count("ImagePull") != 0 {
			t.Errorf("calls = %v", e.docker.Calls())
		}
	})
	t.Run("name taken", func(t *testing.T) {
		first := e.create(t, ctrConfig("dup"))
		_, err := e.createErr(ctrConfig("dup"))
		if codeOf(err) != codes.AlreadyExists || !strings.Contains(err.Error(), first) {
			t.Errorf("got %v, want AlreadyExists naming %s", err, first)
		}
	})
	t.Run("sandbox not ready", func(t *testing.T) {
		if _, err := e.ds.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: e.sandboxID}); err != nil {
			t.Fatal(err)
		}
		_, err := e.createErr(ctrConfig("late"))
		if codeOf(err) != codes.FailedPrecondition {
			t.Errorf("got %v, want FailedPrecondition", err)
		}
	})
}

func TestStartContainerFailureShowsInStatus(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("broken"))
	e.docker.Do(func(s *fakedocker.State) {
		s.StartErr = errors.New(`OCI runtime create failed: exec: "nope": executable file not found in $PATH`)
	})
	_, err := e.ds.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
	if err == nil || !strings.Contains(err.Error(), "executable file not found") {
		t.Fatalf("StartContainer error %v does not carry Docker's", err)
	}
	st := e.status(t, id)
	if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode == 0 || st.Reason != reasonError {
		t.Errorf("status = %v exit %d reason %q, want exited with Docker's exit code", st.State, st.ExitCode, st.Reason)
	}
}

// TestContainerStatusReasonsFromEvents: exits seen only through Docker's
// events stream give the right exit code, reason and finish time.
func TestContainerStatusReasonsFromEvents(t *testing.T) {
	e := newPodEnv(t)
	for _, c := range []struct {
		name   string
		code   int
		oom    bool
		reason string
	}{
		{"ok", 0, false, reasonCompleted},
		{"fail", 3, false, reasonError},
		{"oom", 137, true, reasonOOMKilled},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := e.create(t, ctrConfig(c.name))
			e.start(t, id)
			e.docker.ResetCalls()
			e.docker.ExitBehindBack(id, c.code, c.oom)
			testutil.Eventually(t, "the exit to reach the index", func() bool {
				return e.status(t, id).State == runtimeapi.ContainerState_CONTAINER_EXITED && e.docker.Count("ContainerInspect "+id) >= 1
			})
			st := e.status(t, id)
			if st.ExitCode != int32(c.code) || st.Reason != c.reason || st.FinishedAt < st.StartedAt || st.FinishedAt == 0 {
				t.Errorf("exit %d reason %q finished %d started %d; want exit %d reason %q", st.ExitCode, st.Reason, st.FinishedAt, st.StartedAt, c.code, c.reason)
			}
			// One inspect per death, and none per status read.
			e.quiesce(t)
			e.docker.ResetCalls()
			for range 10 {
				e.status(t, id)
			}
			if len(e.docker.Calls()) != 0 {
				t.Errorf("ContainerStatus called Docker: %v", e.docker.Calls())
			}
		})
	}
}

func TestListContainersFiltersWithoutDockerCalls(t *testing.T) {
	e := newPodEnv(t)
	ctx := context.Background()
	other := podConfig("other")
	other.PortMappings = nil
	otherID := e.run(t, other)

	a := e.create(t, ctrConfig("a")) // created
	b := e.create(t, ctrConfig("b")) // running
	e.start(t, b)
	cfgC := ctrConfig("c")
	cfgC.Labels["tier"] = "db"
	cc, err := e.ds.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: otherID, Config: cfgC, SandboxConfig: other})
	if err != nil {
		t.Fatal(err)
	}
	c := cc.ContainerId
	e.start(t, c)
	if _, err := e.ds.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c}); err != nil {
		t.Fatal(err)
	}
	e.quiesce(t)
	e.docker.ResetCalls()
	list := func(f *runtimeapi.ContainerFilter) []string {
		t.Helper()
		resp, err := e.ds.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range resp.Containers {
			ids = append(ids, c.Id)
		}
		return ids
	}
	same := func(got []string, want ...string) bool {
		got, want = slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
		return slices.Equal(got, want)
	}
	for name, c := range map[string]struct {
		f    *runtimeapi.ContainerFilter
		want []string
	}{
		"all":            {nil, []string{a, b, c}},
		"id prefix":      {&runtimeapi.ContainerFilter{Id: b[:10]}, []string{b}},
		"running":        {&runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}, []string{b}},
		"created":        {&runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_CREATED}}, []string{a}},
		"exited":         {&runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED}}, []string{c}},
		"sandbox":        {&runtimeapi.ContainerFilter{PodSandboxId: e.sandboxID}, []string{a, b}},
		"sandbox prefix": {&runtimeapi.ContainerFilter{PodSandboxId: otherID[:8]}, []string{c}},
		"unknown sbx":    {&runtimeapi.ContainerFilter{PodSandboxId: "nope"}, nil},
		"labels":         {&runtimeapi.ContainerFilter{LabelSelector: map[string]string{"app": "web", "tier": "db"}}, []string{c}},
		"labels miss":    {&runtimeapi.ContainerFilter{LabelSelector: map[string]string{"app": "nope"}}, nil},
		"combined":       {&runtimeapi.ContainerFilter{PodSandboxId: e.sandboxID, LabelSelector: map[string]string{"io.kubernetes.container.name": "a"}}, []string{a}},
	} {
		if got := list(c.f); !same(got, c.want...) {
			t.Errorf("%s: got %v, want %v", name, got, c.want)
		}
	}
	if len(e.docker.Calls()) != 0 {
		t.Errorf("ListContainers called Docker: %v", e.docker.Calls())
	}
}

func TestPodSandboxStopAndRemoveTakeTheContainers(t *testing.T) {
	e := newPodEnv(t)
	ctx := context.Background()
	id := e.create(t, ctrConfig("inpod"))
	e.start(t, id)
	created := e.create(t, ctrConfig("never"))
	if _, err := e.ds.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: e.sandboxID}); err != nil {
		t.Fatal(err)
	}
	// The pod's stop does not wait for the containers' logs to be copied;
	// their exit shows once they are.
	testutil.Eventually(t, "the container to show exited", func() bool {
		return e.status(t, id).State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	if _, err := e.ds.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: e.sandboxID}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{id, created} {
		if _, err := e.docker.ContainerInspect(ctx, c); err == nil {
			t.Errorf("container %s still exists in Docker after RemovePodSandbox", c)
		}
		if _, ok := e.ds.store().Get(c); ok {
			t.Errorf("container %s still in the index after RemovePodSandbox", c)
		}
	}
}

func TestUpdateContainerResources(t *testing.T) {
	e := newPodEnv(t)
	ctx := context.Background()
	cfg := ctrConfig("upd")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 256, MemoryLimitInBytes: 64 << 20, OomScoreAdj: 900}
	id := e.create(t, cfg)
	e.start(t, id)

	_, err := e.ds.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{
		CpuShares: 512, CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 128 << 20, OomScoreAdj: 900,
	}})
	if err != nil {
		t.Fatal(err)
	}
	hc := e.dockerInspect(t, id).HostConfig
	if hc.CPUShares != 512 || hc.CPUQuota != 20000 || hc.Memory != 128<<20 {
		t.Errorf("docker resources = %+v", hc.Resources)
	}
	if r := e.status(t, id).GetResources().GetLinux(); r.GetCpuShares() != 512 || r.GetMemoryLimitInBytes() != 128<<20 {
		t.Errorf("status resources after update = %v", r)
	}

	_, err = e.ds.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{OomScoreAdj: 500}})
	if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "Docker cannot change oom_score_adj") {
		t.Errorf("oom_score_adj: got %v, want InvalidArgument saying Docker cannot change it", err)
	}

	// What kubelet 1.36 sends for a resize on a cgroup v2 node: unified
	// keys and hugepage limits Docker has no setting for are skipped, not
	// refused.
	_, err = e.ds.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{
		CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: 256 << 20, OomScoreAdj: 900,
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 2 << 20}, {PageSize: "1GB"}},
		Unified:        map[string]string{"memory.oom.group": "1", "memory.swap.max": "0"},
	}})
	if err != nil {
		t.Fatalf("kubelet's cgroup v2 resize: %v", err)
	}
	hc = e.dockerInspect(t, id).HostConfig
	if hc.CPUQuota != 100000 || hc.Memory != 256<<20 || hc.MemorySwap != 256<<20 {
		t.Errorf("docker resources after the v2 resize = quota %d memory %d swap %d, want 100000/256Mi/256Mi (no swap)", hc.CPUQuota, hc.Memory, hc.MemorySwap)
	}

	// Lifting both limits: Docker reads 0 as "unchanged" and refuses a
	// memory limit of -1, so the kernel's maximum stands for none.
	_, err = e.ds.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: &runtimeapi.LinuxContainerResources{CpuQuota: -1, MemoryLimitInBytes: -1}})
	if err != nil {
		t.Fatalf("lifting the limits: %v", err)
	}
	hc = e.dockerInspect(t, id).HostConfig
	if hc.CPUQuota != -1 || hc.Memory != dockerspec.DockerNoMemoryLimit || hc.MemorySwap != dockerspec.DockerNoMemoryLimit {
		t.Errorf("docker resources after the lift = quota %d memory %d swap %d", hc.CPUQuota, hc.Memory, hc.MemorySwap)
	}
	if r := e.status(t, id).GetResources().GetLinux(); r.GetCpuQuota() != -1 || r.GetMemoryLimitInBytes() != 0 || r.GetMemorySwapLimitInBytes() != 0 {
		t.Errorf("status resources after the lift = %v, want quota -1 and no memory or swap limit", r)
	}

	// No Linux resources: nothing to change, and no Docker call.
	e.docker.ResetCalls()
	if _, err := e.ds.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id}); err != nil {
		t.Errorf("empty update: %v", err)
	}
	if n := e.docker.Count("ContainerUpdate"); n != 0 {
		t.Errorf("an empty update made %d Docker updates", n)
	}
	if _, err := e.ds.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: "nope", Linux: &runtimeapi.LinuxContainerResources{}}); codeOf(err) != codes.NotFound {
		t.Errorf("unknown container: %v, want NotFound", err)
	}
}

func TestRuntimeConfigReportsDockersCgroupDriverOnce(t *testing.T) {
	e := newTestEnv(t)
	e.docker.Do(func(s *fakedocker.State) { s.Info.CgroupDriver = "cgroupfs" })
	for range 3 {
		resp, err := e.ds.RuntimeConfig(context.Background(), &runtimeapi.RuntimeConfigRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_CGROUPFS {
			t.Errorf("cgroup driver = %v", resp.GetLinux().GetCgroupDriver())
		}
	}
	if n := e.docker.Count("Info"); n != 1 {
		t.Errorf("asked Docker %d times, want once (cached)", n)
	}
}

func TestContainerStatusVerbose(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("verbose"))
	e.start(t, id)
	resp, err := e.ds.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		SandboxID string `json:"sandboxID"`
		Pid       int    `json:"pid"`
		Config    *struct {
			Image string
		} `json:"dockerConfig"`
		HostConfig *struct {
			NetworkMode string
		} `json:"dockerHostConfig"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
		t.Fatalf("info is not JSON: %v\n%s", err, resp.Info["info"])
	}
	rec, _ := e.ds.store().Get(id)
	if info.SandboxID != e.sandboxID || info.Pid != rec.Pid || info.Config == nil || info.Config.Image != testImage ||
		info.HostConfig == nil || info.HostConfig.NetworkMode != "container:"+e.sandboxID {
		t.Errorf("verbose info = %s", resp.Info["info"])
	}
}

// TestStopAndRemoveFindContainersTheIndexLacks: with the events that
// announced a container lost, Stop and Remove still act on it in Docker
// instead of reporting it gone.
func TestStopAndRemoveFindContainersTheIndexLacks(t *testing.T) {
	e := newPodEnv(t)
	ctx := context.Background()
	id := e.create(t, ctrConfig("unseen"))
	e.start(t, id)
	e.ds.store().Delete(id)
	if _, err := e.ds.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	var running bool
	e.docker.Do(func(s *fakedocker.State) { running = s.Containers[id].State.Running })
	if running {
		t.Error("Stop of a container the index lacked left it running")
	}
	if rec, ok := e.ds.store().Get(id); !ok || rec.Running() {
		t.Errorf("after Stop the index has %+v, want the stopped container", rec)
	}
	e.ds.store().Delete(id)
	if _, err := e.ds.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if e.docker.HasContainer(id) {
		t.Error("Remove of a container the index lacked left it in Docker")
	}
}

// TestCreateThatFailsAfterDockerMadeTheContainerLeavesNothing: a create
// whose call failed though Docker made the container (the client timed
// out) removes it, so neither an orphan nor a blocked name remains.
func TestCreateThatFailsAfterDockerMadeTheContainerLeavesNothing(t *testing.T) {
	e := newPodEnv(t)
	e.docker.Do(func(s *fakedocker.State) { s.CreateErr, s.CreateMakes = context.DeadlineExceeded, true })
	if _, err := e.createErr(ctrConfig("slow")); err == nil {
		t.Fatal("CreateContainer succeeded though Docker's answer was lost")
	}
	if n := e.docker.Count("ContainerRemove"); n != 1 {
		t.Errorf("%d removals, want 1 (of the container the failed create made)", n)
	}
	if n := len(e.ds.store().ContainersOf(e.sandboxID)); n != 0 {
		t.Errorf("index holds %d containers of the sandbox, want 0", n)
	}
	e.docker.Do(func(s *fakedocker.State) { s.CreateErr, s.CreateMakes = nil, false })
	e.create(t, ctrConfig("slow")) // the name is free again
}
