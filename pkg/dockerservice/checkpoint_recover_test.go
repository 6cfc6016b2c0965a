package dockerservice

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/checkpoint"
)

// Start-up survives every kind of bad checkpoint, reports it, and rebuilds
// the sandboxes from what is still known: a running pod whose IPs the
// network still has stays READY; a dead one's network is released.
func TestStartupSurvivesBadCheckpoints(t *testing.T) {
	e := newTestEnv(t)
	corrupt := e.run(t, podConfig("corrupt"))
	newer := e.run(t, podConfig("newer"))
	unreadable := e.run(t, podConfig("unreadable"))
	deadCorrupt := e.run(t, podConfig("dead"))
	healthy := e.run(t, podConfig("healthy"))
	e.docker.KillBehindBack(deadCorrupt)

	dir := e.ckpt.Dir()
	path := func(id string) string { return filepath.Join(dir, id+".json") }
	writeFile := func(p string, data []byte) {
		t.Helper()
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(path(corrupt), []byte(`{"checksum":"sha256:00","data":{}}`))
	writeFile(path(deadCorrupt), []byte("\x00\x01garbage"))
	// A valid envelope around a version this netshim does not know.
	var newerContent []byte
	{
		cp, err := e.ckpt.Get(newer)
		if err != nil {
			t.Fatal(err)
		}
		cp.Version = 99
		if err := e.ckpt.Put(cp); err != nil {
			t.Fatal(err)
		}
		if newerContent, err = os.ReadFile(path(newer)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(path(unreadable)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path(unreadable), 0o700); err != nil {
		t.Fatal(err)
	}

	ds, plugin := e.restart(t)

	for _, tc := range []struct {
		id    string
		state runtimeapi.PodSandboxState
		ip    bool
	}{
		{corrupt, runtimeapi.PodSandboxState_SANDBOX_READY, true},
		{newer, runtimeapi.PodSandboxState_SANDBOX_READY, true},
		{unreadable, runtimeapi.PodSandboxState_SANDBOX_READY, true},
		{healthy, runtimeapi.PodSandboxState_SANDBOX_READY, true},
		{deadCorrupt, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, false},
	} {
		st, err := ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: tc.id})
		if err != nil {
			t.Errorf("status of %s: %v", tc.id, err)
			continue
		}
		if st.Status.State != tc.state || st.Status.Network == nil || (st.Status.Network.Ip != "") != tc.ip {
			t.Errorf("%s (%s): state %v network %v, want %v with IP %v", tc.id, st.Status.Metadata.GetName(), st.Status.State, st.Status.Network, tc.state, tc.ip)
		}
	}

	resp, err := ds.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rc := resp.Status.Conditions[0]
	if !rc.Status || !strings.Contains(rc.Message, "4 sandbox checkpoint(s)") {
		t.Errorf("RuntimeReady = %v %q, want ready with a warning naming 4 checkpoints", rc.Status, rc.Message)
	}

	// The corrupt one's file is rewritten; the newer version's is kept
	// byte for byte for the netshim that wrote it.
	if cp, err := e.ckpt.Get(corrupt); err != nil || cp.Setup != checkpoint.SetupReady || len(cp.IPs) != 1 {
		t.Errorf("rebuilt checkpoint of the corrupt sandbox: %+v, %v", cp, err)
	}
	if got, _ := os.ReadFile(path(newer)); string(got) != string(newerContent) {
		t.Error("the newer version's checkpoint file was changed")
	}
	testutil.Eventually(t, "the dead sandbox's IP to be released", func() bool { return !plugin.holds(deadCorrupt) })

	// Removing a sandbox clears its warning.
	for _, id := range []string{corrupt, newer, deadCorrupt} {
		if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("remove %s: %v", id, err)
		}
	}
	if msg := ds.checkpointIssuesMessage(); !strings.Contains(msg, "1 sandbox checkpoint(s)") {
		t.Errorf("after removing three: %q, want one left", msg)
	}
}

// A pause-less sandbox has no infra container: when its checkpoint is
// damaged, its workload containers' labels are what still names the pod,
// which kubelet finds its sandboxes by to stop and remove them. One with no
// container is rebuilt as before, nameless.
func TestPauselessDamagedCheckpointTakesThePodFromItsContainers(t *testing.T) {
	e, dir := newPauselessEnv(t)
	e.docker.AddImage(fakedocker.Image{ID: testImageID}, testImage, testImageDigest)
	cfg := pauselessPodConfig("web")
	withCtr := e.run(t, cfg)
	if _, err := e.ds.CreateContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: withCtr, Config: ctrConfig("app"), SandboxConfig: cfg}); err != nil {
		t.Fatal(err)
	}
	bare := e.run(t, pauselessPodConfig("bare"))
	for _, id := range []string{withCtr, bare} {
		if err := os.WriteFile(filepath.Join(e.ckpt.Dir(), id+".json"), []byte(`{"checksum":"sha256:00","data":{}}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	ds, _ := e.restartWith(t, func(c *Config) { c.SandboxNetNS, c.NetNSDir = SandboxNetNSPauseless, dir })
	for _, tc := range []struct {
		id   string
		want *runtimeapi.PodSandboxMetadata
	}{
		{withCtr, &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-web"}},
		{bare, &runtimeapi.PodSandboxMetadata{}},
	} {
		listed := plSandbox(t, ds, tc.id)
		if listed == nil {
			t.Fatalf("sandbox %s not listed", tc.id)
		}
		st, err := ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: tc.id})
		if err != nil {
			t.Fatal(err)
		}
		for what, md := range map[string]*runtimeapi.PodSandboxMetadata{"listed": listed.Metadata, "status": st.Status.Metadata} {
			if md.GetName() != tc.want.Name || md.GetNamespace() != tc.want.Namespace || md.GetUid() != tc.want.Uid {
				t.Errorf("sandbox %s %s with metadata %v, want %v", tc.id, what, md, tc.want)
			}
		}
		if listed.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Status.State != listed.State {
			t.Errorf("sandbox %s: listed %v, status %v, want NOTREADY", tc.id, listed.State, st.Status.State)
		}
	}
	// What kubelet then does.
	for _, id := range []string{withCtr, bare} {
		if _, err := ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("stop %s: %v", id, err)
		}
		if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatalf("remove %s: %v", id, err)
		}
	}
	if ids, _ := e.ckpt.List(); len(ids) != 0 {
		t.Errorf("checkpoints after removing both sandboxes: %v", ids)
	}
}
