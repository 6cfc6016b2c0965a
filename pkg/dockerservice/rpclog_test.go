package dockerservice

import (
	"context"
	"errors"
	"fmt"
	"path"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// captureLogs returns a context whose logger records every entry up to
// verbosity v, and a function returning what was recorded.
func captureLogs(t *testing.T, v int) (context.Context, func() ktesting.Log) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(v)))
	buf := logger.GetSink().(ktesting.Underlier).GetBuffer()
	return klog.NewContext(context.Background(), logger), buf.Data
}

// entryKV is an entry's key/value pairs, WithValues' and the call's, as
// strings.
func entryKV(e ktesting.LogEntry) map[string]string {
	kv := map[string]string{}
	for _, l := range [][]any{e.WithKVList, e.ParameterKVList} {
		for i := 0; i+1 < len(l); i += 2 {
			kv[fmt.Sprint(l[i])] = fmt.Sprint(l[i+1])
		}
	}
	return kv
}

func unaryInfo(method string) *grpc.UnaryServerInfo {
	return &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/" + method}
}

func TestUnaryInterceptorRequestLogger(t *testing.T) {
	podCfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "shop", Uid: "u-1"}}
	cases := []struct {
		name    string
		method  string
		req     any
		resp    any
		err     error
		panics  bool
		wantKV  map[string]string // on every line the RPC causes
		outcome map[string]string // on the outcome line only
		// wantV is the verbosity of the success line, -1 for an error.
		wantV    int
		wantCode codes.Code
	}{
		{
			name: "RunPodSandbox", method: "RunPodSandbox",
			req:     &runtimeapi.RunPodSandboxRequest{Config: podCfg},
			resp:    &runtimeapi.RunPodSandboxResponse{PodSandboxId: "sb-1"},
			wantKV:  map[string]string{"rpc": "RunPodSandbox", "pod": "shop/web", "podUID": "u-1"},
			outcome: map[string]string{"podSandboxID": "sb-1"},
			wantV:   2,
		},
		{
			name: "StopPodSandbox", method: "StopPodSandbox",
			req:    &runtimeapi.StopPodSandboxRequest{PodSandboxId: "sb-1"},
			resp:   &runtimeapi.StopPodSandboxResponse{},
			wantKV: map[string]string{"rpc": "StopPodSandbox", "podSandboxID": "sb-1"},
			wantV:  2,
		},
		{
			name: "CreateContainer", method: "CreateContainer",
			req: &runtimeapi.CreateContainerRequest{PodSandboxId: "sb-1", SandboxConfig: podCfg,
				Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "nginx"}}},
			resp: &runtimeapi.CreateContainerResponse{ContainerId: "c-1"},
			wantKV: map[string]string{"rpc": "CreateContainer", "podSandboxID": "sb-1", "pod": "shop/web",
				"podUID": "u-1", "container": "nginx"},
			outcome: map[string]string{"containerID": "c-1"},
			wantV:   2,
		},
		{
			name: "StartContainer", method: "StartContainer",
			req:    &runtimeapi.StartContainerRequest{ContainerId: "c-1"},
			resp:   &runtimeapi.StartContainerResponse{},
			wantKV: map[string]string{"rpc": "StartContainer", "containerID": "c-1"},
			wantV:  2,
		},
		{
			name: "RemoveContainer", method: "RemoveContainer",
			req:    &runtimeapi.RemoveContainerRequest{ContainerId: "c-1"},
			resp:   &runtimeapi.RemoveContainerResponse{},
			wantKV: map[string]string{"rpc": "RemoveContainer", "containerID": "c-1"},
			wantV:  2,
		},
		{
			name: "PullImage", method: "PullImage",
			req:     &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}, SandboxConfig: podCfg},
			resp:    &runtimeapi.PullImageResponse{ImageRef: "sha256:abc"},
			wantKV:  map[string]string{"rpc": "PullImage", "image": "busybox", "pod": "shop/web"},
			outcome: map[string]string{"imageRef": "sha256:abc"},
			wantV:   2,
		},
		{
			name: "ExecSync is not mutating", method: "ExecSync",
			req:    &runtimeapi.ExecSyncRequest{ContainerId: "c-1"},
			resp:   &runtimeapi.ExecSyncResponse{},
			wantKV: map[string]string{"rpc": "ExecSync", "containerID": "c-1"},
			wantV:  4,
		},
		{
			name: "hot RPC", method: "ContainerStatus",
			req:    &runtimeapi.ContainerStatusRequest{ContainerId: "c-1"},
			resp:   &runtimeapi.ContainerStatusResponse{},
			wantKV: map[string]string{"rpc": "ContainerStatus", "containerID": "c-1"},
			wantV:  6,
		},
		{
			name: "failed RPC", method: "StopContainer",
			req:      &runtimeapi.StopContainerRequest{ContainerId: "c-1"},
			err:      fmt.Errorf("stopping: %w", errors.New("boom")),
			wantKV:   map[string]string{"rpc": "StopContainer", "containerID": "c-1"},
			outcome:  map[string]string{"code": "Unknown"},
			wantV:    -1,
			wantCode: codes.Unknown,
		},
		{
			name: "not found", method: "RemovePodSandbox",
			req:      &runtimeapi.RemovePodSandboxRequest{PodSandboxId: "sb-9"},
			err:      notFoundf("pod sandbox sb-9 not found"),
			wantKV:   map[string]string{"rpc": "RemovePodSandbox", "podSandboxID": "sb-9"},
			outcome:  map[string]string{"code": "NotFound"},
			wantV:    -1,
			wantCode: codes.NotFound,
		},
		{
			name: "panicking handler", method: "StartContainer",
			req:      &runtimeapi.StartContainerRequest{ContainerId: "c-2"},
			panics:   true,
			wantKV:   map[string]string{"rpc": "StartContainer", "containerID": "c-2"},
			outcome:  map[string]string{"code": "Internal"},
			wantV:    -1,
			wantCode: codes.Internal,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, logs := captureLogs(t, 10)
			handler := func(ctx context.Context, _ any) (any, error) {
				klog.FromContext(ctx).Info("handler line")
				if tc.panics {
					panic("nil map")
				}
				return tc.resp, tc.err
			}
			_, err := UnaryInterceptor(ctx, tc.req, unaryInfo(tc.method), handler)
			if codeOf(err) != tc.wantCode {
				t.Fatalf("error %v, want code %v", err, tc.wantCode)
			}
			entries := logs()
			if len(entries) < 2 {
				t.Fatalf("%d log entries, want the handler's and the outcome: %+v", len(entries), entries)
			}
			for _, e := range entries {
				kv := entryKV(e)
				for k, v := range tc.wantKV {
					if kv[k] != v {
						t.Errorf("entry %q: %s=%q, want %q (all: %v)", e.Message, k, kv[k], v, kv)
					}
				}
			}
			if entries[0].Message != "handler line" {
				t.Errorf("first entry %q, want the handler's", entries[0].Message)
			}
			last := entries[len(entries)-1]
			switch {
			case tc.wantV < 0 && (last.Type != ktesting.LogError || last.Message != "RPC failed"):
				t.Errorf("outcome %s %q, want the error \"RPC failed\"", last.Type, last.Message)
			case tc.wantV >= 0 && (last.Type != ktesting.LogInfo || last.Message != "RPC" || last.Verbosity != tc.wantV):
				t.Errorf("outcome %s %q at V(%d), want \"RPC\" at V(%d)", last.Type, last.Message, last.Verbosity, tc.wantV)
			}
			kv := entryKV(last)
			for k, v := range tc.outcome {
				if kv[k] != v {
					t.Errorf("outcome: %s=%q, want %q (all: %v)", k, kv[k], v, kv)
				}
			}
			if kv["duration"] == "" {
				t.Errorf("outcome has no duration: %v", kv)
			}
		})
	}
}

// At -v=2 a mutating RPC's success shows, a polled one's does not.
func TestUnaryInterceptorVerbosity2(t *testing.T) {
	cases := []struct {
		method string
		req    any
		lines  int
	}{
		{"StopContainer", &runtimeapi.StopContainerRequest{ContainerId: "c-1"}, 1},
		{"ContainerStatus", &runtimeapi.ContainerStatusRequest{ContainerId: "c-1"}, 0},
		{"ListContainers", &runtimeapi.ListContainersRequest{}, 0},
		{"Version", &runtimeapi.VersionRequest{}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.method, func(t *testing.T) {
			ctx, logs := captureLogs(t, 2)
			_, err := UnaryInterceptor(ctx, tc.req, unaryInfo(tc.method), func(context.Context, any) (any, error) { return struct{}{}, nil })
			if err != nil {
				t.Fatal(err)
			}
			if got := len(logs()); got != tc.lines {
				t.Errorf("%d lines at -v=2, want %d: %+v", got, tc.lines, logs())
			}
		})
	}
}

func TestStreamInterceptorRequestLogger(t *testing.T) {
	ctx, logs := captureLogs(t, 10)
	info := &grpc.StreamServerInfo{FullMethod: "/runtime.v1.RuntimeService/GetContainerEvents", IsServerStream: true}
	err := StreamInterceptor(nil, fakeServerStream{ctx: ctx}, info, func(_ any, ss grpc.ServerStream) error {
		klog.FromContext(ss.Context()).Info("handler line")
		return notFoundf("gone")
	})
	if codeOf(err) != codes.NotFound {
		t.Fatalf("got %v, want NotFound", err)
	}
	entries := logs()
	if len(entries) != 2 {
		t.Fatalf("%d entries, want the handler's and the failure: %+v", len(entries), entries)
	}
	for _, e := range entries {
		if kv := entryKV(e); kv["rpc"] != "GetContainerEvents" {
			t.Errorf("entry %q has rpc=%q, want GetContainerEvents", e.Message, kv["rpc"])
		}
	}
	if kv := entryKV(entries[1]); entries[1].Type != ktesting.LogError || kv["code"] != "NotFound" {
		t.Errorf("outcome %s %v, want an error with code NotFound", entries[1].Type, kv)
	}
}

// The interceptor's cost for a polled RPC, without the handler's: kubelet
// calls these per pod and container every second or so.
func BenchmarkUnaryInterceptorHotRPC(b *testing.B) {
	cases := []struct {
		name, method string
		req          any
	}{
		{"ContainerStatus", "ContainerStatus", &runtimeapi.ContainerStatusRequest{ContainerId: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}},
		{"ListContainers", "ListContainers", &runtimeapi.ListContainersRequest{}},
	}
	info := map[string]*grpc.UnaryServerInfo{}
	for _, c := range cases {
		info[c.method] = unaryInfo(c.method)
	}
	resp := &runtimeapi.ContainerStatusResponse{}
	ctx := context.Background()
	for _, c := range cases {
		b.Run(c.name+"/logger", func(b *testing.B) {
			handler := func(context.Context, any) (any, error) { return resp, nil }
			b.ReportAllocs()
			for b.Loop() {
				if _, err := UnaryInterceptor(ctx, c.req, info[c.method], handler); err != nil {
					b.Fatal(err)
				}
			}
		})
		// What the interceptor costs without a request logger: the
		// recovery, the status conversion and the verbosity check.
		b.Run(c.name+"/bare", func(b *testing.B) {
			handler := func(context.Context, any) (any, error) { return resp, nil }
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bareInterceptor(ctx, c.req, info[c.method], handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// bareInterceptor is UnaryInterceptor as it was before it made a request
// logger, as the benchmark's baseline.
func bareInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	start := time.Now()
	resp, err := callRecovering(ctx, klog.Background(), req, method, handler)
	if err != nil {
		return resp, toStatus(err)
	}
	if l := klog.V(klog.Level(rpcVerbosity(method))); l.Enabled() {
		l.InfoS("RPC", "method", method, "duration", time.Since(start))
	}
	return resp, nil
}

// Real handlers on the fake engine: their own lines (the step timings)
// carry what only the request logger knows.
func TestRPCHandlersLogThroughRequestLogger(t *testing.T) {
	e := newTestEnv(t)
	ctx, logs := captureLogs(t, 4)
	resp, err := UnaryInterceptor(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("web")}, unaryInfo("RunPodSandbox"),
		func(ctx context.Context, req any) (any, error) {
			return e.ds.RunPodSandbox(ctx, req.(*runtimeapi.RunPodSandboxRequest))
		})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	id := resp.(*runtimeapi.RunPodSandboxResponse).GetPodSandboxId()
	if _, err := UnaryInterceptor(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}, unaryInfo("StopPodSandbox"),
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
		kv := entryKV(entry)
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
