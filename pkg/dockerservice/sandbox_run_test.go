package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/network"
)

// restart builds a second DockerService on the same engine and checkpoint
// directory, as a netshim started after the first one was killed: the
// first one's goroutines may still be blocked, but it is never used again.
func (e *testEnv) restart(t *testing.T) (*DockerService, *fakePlugin) {
	t.Helper()
	return e.restartWith(t)
}

// restartWith is restart with a changed configuration.
func (e *testEnv) restartWith(t *testing.T, mutate ...func(*Config)) (*DockerService, *fakePlugin) {
	t.Helper()
	plugin := &fakePlugin{}
	cfg := Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake"}
	for _, m := range mutate {
		m(&cfg)
	}
	ds, err := NewDockerService(cfg, e.docker, e.ckpt, []network.NetworkPlugin{plugin})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	// What the killed daemon's ADD allocated is still held by the
	// network (the fake plugin's state stands in for the IPAM store).
	e.plugin.mu.Lock()
	for id, ip := range e.plugin.ips {
		plugin.ips[id] = ip
	}
	e.plugin.mu.Unlock()
	startService(t, ds)
	return ds, plugin
}

// A daemon killed while the CNI ADD runs must not bring the sandbox back
// READY without its network: after restart it is NOTREADY with an (empty)
// network status, a retried RunPodSandbox does not return it as a success,
// and what the ADD allocated is released.
func TestKilledDuringAddIsNeverReady(t *testing.T) {
	e := newTestEnv(t)
	e.plugin.setUpGate = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	cfg := podConfig("slow")
	go func() {
		_, err := e.ds.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		done <- err
	}()
	testutil.Eventually(t, "the ADD to start", func() bool { return e.plugin.held() == 1 })
	var id string
	for cid := range e.docker.ContainerIDs() {
		id = cid
	}
	cp, err := e.ckpt.Get(id)
	if err != nil {
		t.Fatalf("checkpoint during ADD: %v", err)
	}
	if cp.NetworkReady() || cp.Setup != checkpoint.SetupPending {
		t.Fatalf("checkpoint during ADD says setup %q (ready %v), want pending", cp.Setup, cp.NetworkReady())
	}

	// "SIGKILL": the daemon is gone; a new one starts on the same state.
	ds, plugin := e.restart(t)
	st, err := ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("sandbox whose ADD never completed is %v after restart, want NOTREADY", st.Status.State)
	}
	if st.Status.Network == nil || st.Status.Network.Ip != "" {
		t.Errorf("network status %v, want present and empty", st.Status.Network)
	}
	list, err := ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if s.Id == id && s.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Errorf("ListPodSandbox reports it %v", s.State)
		}
	}
	_, err = ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if codeOf(err) != codes.AlreadyExists {
		t.Errorf("retried RunPodSandbox of the half-made sandbox: %v (code %v), want AlreadyExists", err, codeOf(err))
	}
	testutil.Eventually(t, "the start-up teardown to release the interrupted ADD's IP", func() bool { return !plugin.holds(id) })

	// kubelet then stops and removes it; nothing is left.
	if _, err := ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := e.ckpt.List(); len(ids) != 0 {
		t.Errorf("checkpoints left: %v", ids)
	}
	close(e.plugin.setUpGate)
	<-done
}

// When the undo of a failed RunPodSandbox fails halfway (the container
// cannot be removed), the sandbox keeps its checkpoint and is never READY.
func TestFailedUndoIsNeverReady(t *testing.T) {
	e := newTestEnv(t)
	e.plugin.setUpErr = errors.New("plugin failed")
	e.docker.Do(func(s *fakedocker.State) { s.RemoveErr = errors.New("device or resource busy") })
	_, err := e.ds.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: podConfig("stuck")})
	if err == nil {
		t.Fatal("RunPodSandbox succeeded with a failing plugin")
	}
	list, err := e.ds.ListPodSandbox(context.Background(), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("want the stuck sandbox listed, got %d items", len(list.Items))
	}
	if s := list.Items[0]; s.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("sandbox whose undo failed is %v, want NOTREADY", s.State)
	}
	if ids, _ := e.ckpt.List(); len(ids) != 1 {
		t.Errorf("checkpoints %v: the stuck sandbox's must be kept", ids)
	}
	// Even with its checkpoint lost, a running container is not READY.
	id := list.Items[0].Id
	e.ds.pods.Delete(id)
	if st := e.ds.sandboxState(id, true); st != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("running sandbox without a checkpoint is %v, want NOTREADY", st)
	}
	e.docker.Do(func(s *fakedocker.State) { s.RemoveErr = nil })
	if _, err := e.ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if len(e.docker.ContainerIDs()) != 0 {
		t.Error("container left after Remove")
	}
}

// A host-network sandbox is ready as soon as its container runs: it has no
// network setup to wait for, and the checkpoint says so from the start.
func TestHostNetworkSandboxCheckpointIsReady(t *testing.T) {
	e := newTestEnv(t)
	cfg := podConfig("host")
	cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}
	id := e.run(t, cfg)
	cp, err := e.ckpt.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Setup != checkpoint.SetupReady {
		t.Errorf("host-network checkpoint setup %q, want ready", cp.Setup)
	}
	st, err := e.ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Status.Network != nil {
		t.Errorf("host-network sandbox: state %v network %v, want READY and no pod network", st.Status.State, st.Status.Network)
	}
}

// A privileged sandbox runs unconfined whatever seccomp profile the pod
// has; an unprivileged one gets the profile it asked for; either gets the
// pod's SELinux label.
func TestRunPodSandboxSecurityOpts(t *testing.T) {
	e := newTestEnv(t)
	profile := filepath.Join(t.TempDir(), "seccomp.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction":"SCMP_ACT_ERRNO"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(t.TempDir(), "absent.json")
	localhost := func(ref string) *runtimeapi.SecurityProfile {
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: ref}
	}
	unconfined := []string{"seccomp=unconfined", "apparmor=unconfined"}
	for i, c := range []struct {
		name       string
		privileged bool
		seccomp    *runtimeapi.SecurityProfile
		selinux    *runtimeapi.SELinuxOption
		want       []string
	}{
		{"unprivileged runtime default", false, &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil, nil},
		{"unprivileged localhost", false, localhost(profile), nil, []string{`seccomp={"defaultAction":"SCMP_ACT_ERRNO"}`}},
		{"privileged without profile", true, nil, nil, unconfined},
		{"privileged runtime default", true, &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil, unconfined},
		{"privileged localhost", true, localhost(profile), nil, unconfined},
		// Not read at all: a missing file is no error.
		{"privileged absent localhost", true, localhost(absent), nil, unconfined},
		// The pod's SELinux label goes to its pause container (dockershim
		// did so), as each container's own goes to it.
		{"selinux", false, nil, &runtimeapi.SELinuxOption{User: "system_u", Role: "system_r", Type: "spc_t", Level: "s0:c1,c2"},
			[]string{"label=user:system_u", "label=role:system_r", "label=type:spc_t", "label=level:s0:c1,c2"}},
		{"selinux level only", false, nil, &runtimeapi.SELinuxOption{Level: "s0:c5"}, []string{"label=level:s0:c5"}},
		{"privileged selinux", true, nil, &runtimeapi.SELinuxOption{Type: "spc_t"}, append(slices.Clone(unconfined), "label=type:spc_t")},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := podConfig(fmt.Sprintf("sec%d", i))
			cfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: c.privileged, Seccomp: c.seccomp, SelinuxOptions: c.selinux}
			id := e.run(t, cfg)
			got, err := e.docker.ContainerInspect(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if got.HostConfig.Privileged != c.privileged || !slices.Equal(got.HostConfig.SecurityOpt, c.want) {
				t.Errorf("privileged=%v security opts = %q, want %v %q", got.HostConfig.Privileged, got.HostConfig.SecurityOpt, c.privileged, c.want)
			}
		})
	}
}
