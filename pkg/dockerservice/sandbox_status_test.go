package dockerservice

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/checkpoint"
)

// TestSandboxStatusOneCheckpoint: a status is built from the checkpoint
// its caller looked up, never from a newer one read again for the state.
// An event built while a RunPodSandbox finished its network setup once
// said READY with no IP (CI, TestPauselessSandboxEvents): the state came
// from the new checkpoint, the IPs from the one looked up before it.
func TestSandboxStatusOneCheckpoint(t *testing.T) {
	e := newTestEnv(t)
	id := e.run(t, podConfig("web"))
	ref, found, err := e.ds.lookupSandbox(id)
	if err != nil || !found {
		t.Fatalf("lookupSandbox(%s): found %v, %v", id, found, err)
	}
	if st := e.ds.sandboxStatusOf(ref); st.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Network.GetIp() == "" {
		t.Fatalf("status of a set-up sandbox: %v, want READY with an IP", st)
	}

	// The checkpoint as it was before its setup completed, while the
	// service already holds the completed one.
	pending := *ref.cp
	pending.Setup, pending.IPs = checkpoint.SetupPending, nil
	ref.cp = &pending
	st := e.ds.sandboxStatusOf(ref)
	if st.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Network.GetIp() != "" {
		t.Errorf("status from a pending checkpoint: state %v, IP %q; want NOTREADY with no IP", st.State, st.Network.GetIp())
	}
}
