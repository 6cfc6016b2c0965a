package crirpc

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/netshim/netshim/internal/testutil"
)

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
			err:      NotFoundf("pod sandbox sb-9 not found"),
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
			ctx, logs := testutil.CaptureLogs(t, 10)
			handler := func(ctx context.Context, _ any) (any, error) {
				klog.FromContext(ctx).Info("handler line")
				if tc.panics {
					panic("nil map")
				}
				return tc.resp, tc.err
			}
			_, err := UnaryInterceptor(ctx, tc.req, unaryInfo(tc.method), handler)
			if Code(err) != tc.wantCode {
				t.Fatalf("error %v, want code %v", err, tc.wantCode)
			}
			entries := logs()
			if len(entries) < 2 {
				t.Fatalf("%d log entries, want the handler's and the outcome: %+v", len(entries), entries)
			}
			for _, e := range entries {
				kv := testutil.LogEntryKV(e)
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
			kv := testutil.LogEntryKV(last)
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
			ctx, logs := testutil.CaptureLogs(t, 2)
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
	ctx, logs := testutil.CaptureLogs(t, 10)
	info := &grpc.StreamServerInfo{FullMethod: "/runtime.v1.RuntimeService/GetContainerEvents", IsServerStream: true}
	err := StreamInterceptor(nil, fakeServerStream{ctx: ctx}, info, func(_ any, ss grpc.ServerStream) error {
		klog.FromContext(ss.Context()).Info("handler line")
		return NotFoundf("gone")
	})
	if Code(err) != codes.NotFound {
		t.Fatalf("got %v, want NotFound", err)
	}
	entries := logs()
	if len(entries) != 2 {
		t.Fatalf("%d entries, want the handler's and the failure: %+v", len(entries), entries)
	}
	for _, e := range entries {
		if kv := testutil.LogEntryKV(e); kv["rpc"] != "GetContainerEvents" {
			t.Errorf("entry %q has rpc=%q, want GetContainerEvents", e.Message, kv["rpc"])
		}
	}
	if kv := testutil.LogEntryKV(entries[1]); entries[1].Type != ktesting.LogError || kv["code"] != "NotFound" {
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
		return resp, ToStatus(err)
	}
	if l := klog.V(klog.Level(rpcVerbosity(method))); l.Enabled() {
		l.InfoS("RPC", "method", method, "duration", time.Since(start))
	}
	return resp, nil
}

// fakeServerStream is a stream whose client has gone or never reads.
type fakeServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeServerStream) Context() context.Context { return s.ctx }

func TestStreamInterceptor(t *testing.T) {
	info := &grpc.StreamServerInfo{FullMethod: "/runtime.v1.RuntimeService/StreamBoom", IsServerStream: true}
	ss := fakeServerStream{ctx: context.Background()}
	cases := []struct {
		name    string
		handler grpc.StreamHandler
		code    codes.Code
		msg     string
	}{
		{"ok", func(any, grpc.ServerStream) error { return nil }, codes.OK, ""},
		{"panic", func(any, grpc.ServerStream) error { panic("nil map") }, codes.Internal, "StreamBoom panicked"},
		{"coded error", func(any, grpc.ServerStream) error { return NotFoundf("pod sandbox x not found") }, codes.NotFound, "pod sandbox x not found"},
		{"plain error", func(any, grpc.ServerStream) error { return fmt.Errorf("wrapped: %w", context.DeadlineExceeded) }, codes.DeadlineExceeded, "wrapped"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := StreamInterceptor(nil, ss, info, tc.handler)
			st, ok := status.FromError(err)
			if !ok || st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
				t.Errorf("got %v, want %v saying %q", err, tc.code, tc.msg)
			}
		})
	}
	// A client that went away is not a failure, and still a status.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := StreamInterceptor(nil, fakeServerStream{ctx: ctx}, info, func(any, grpc.ServerStream) error { return ctx.Err() })
	if status.Code(err) != codes.Canceled {
		t.Errorf("client gone: %v, want Canceled", err)
	}
}
