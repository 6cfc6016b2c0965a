package dockerservice

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageFsInfo is the images service's answer, whose container filesystem
// the writable layers must report as theirs.
func (e *testEnv) imageFsInfo(t *testing.T) *runtimeapi.ImageFsInfoResponse {
	t.Helper()
	resp, err := e.ds.images.ImageFsInfo(context.Background(), &runtimeapi.ImageFsInfoRequest{})
	if err != nil || len(resp.ContainerFilesystems) != 1 {
		t.Fatalf("ImageFsInfo = %v, %v; want one container filesystem", resp, err)
	}
	return resp
}

// A new events stream may be a new dockerd: its sync starts a new engine
// session, so that the images service reads Docker's storage settings
// again (pkg/dockerservice/images tests the reading per session).
func TestIndexSyncStartsANewEngineSession(t *testing.T) {
	e := newTestEnv(t)
	before := e.ds.engine.Session()
	e.ds.onIndexSync(context.Background())
	if got := e.ds.engine.Session(); got != before+1 {
		t.Errorf("engine session %d after a sync, want %d", got, before+1)
	}
}
