package dockerservice

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
)

func unaryInfo(method string) *grpc.UnaryServerInfo {
	return &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/" + method}
}

// Real handlers on the fake engine: their own lines (the step timings)
// carry what only the request logger knows.
func TestRPCHandlersLogThroughRequestLogger(t *testing.T) {
	e := newTestEnv(t)
	ctx, logs := testutil.CaptureLogs(t, 4)
	resp, err := crirpc.UnaryInterceptor(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("web")}, unaryInfo("RunPodSandbox"),
		func(ctx context.Context, req any) (any, error) {
			return e.ds.RunPodSandbox(ctx, req.(*runtimeapi.RunPodSandboxRequest))
		})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	id := resp.(*runtimeapi.RunPodSandboxResponse).GetPodSandboxId()
	if _, err := crirpc.UnaryInterceptor(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}, unaryInfo("StopPodSandbox"),
		func(ctx context.Context, req any) (any, error) {
			return e.ds.StopPodSandbox(ctx, req.(*runtimeapi.StopPodSandboxRequest))
		}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	want := map[string]map[string]string{
		"RunPodSandbox steps":  {"rpc": "RunPodSandbox", "pod": "ns/web", "podUID": "uid-web"},
		"StopPodSandbox steps": {"rpc": "StopPodSandbox", "podSandboxID": id},
	}
	seen := map[string]bool{}
	for _, entry := range logs() {
		w, ok := want[entry.Message]
		if !ok {
			continue
		}
		seen[entry.Message] = true
		kv := testutil.LogEntryKV(entry)
		for k, v := range w {
			if kv[k] != v {
				t.Errorf("%q: %s=%q, want %q (all: %v)", entry.Message, k, kv[k], v, kv)
			}
		}
	}
	for msg := range want {
		if !seen[msg] {
			t.Errorf("no %q line: %+v", msg, logs())
		}
	}
}
