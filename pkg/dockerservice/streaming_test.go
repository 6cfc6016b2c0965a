package dockerservice

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// fakeStreaming records what the RPCs delegate.
type fakeStreaming struct {
	mu       sync.Mutex
	execs    []*runtimeapi.ExecRequest
	attaches []*runtimeapi.AttachRequest
	forwards []*runtimeapi.PortForwardRequest
}

func (f *fakeStreaming) GetExec(r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.execs = append(f.execs, r)
	return &runtimeapi.ExecResponse{Url: "http://127.0.0.1:1/exec/t"}, nil
}

func (f *fakeStreaming) GetAttach(r *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attaches = append(f.attaches, r)
	return &runtimeapi.AttachResponse{Url: "http://127.0.0.1:1/attach/t"}, nil
}

func (f *fakeStreaming) GetPortForward(r *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forwards = append(f.forwards, r)
	return &runtimeapi.PortForwardResponse{Url: "http://127.0.0.1:1/portforward/t"}, nil
}

// streamingEnv is a service with one running sandbox and, in the index,
// a running, a created and an exited container of it.
type streamingEnv struct {
	*testEnv
	srv                      *fakeStreaming
	sandbox                  string
	running, created, exited string
	stoppedSandbox           string
}

func newStreamingEnv(t *testing.T) *streamingEnv {
	t.Helper()
	e := &streamingEnv{testEnv: newTestEnv(t), srv: &fakeStreaming{}}
	e.ds.SetStreamingServer(e.srv)
	e.sandbox = e.run(t, podConfig("pod-a"))
	e.running = "aaaa" + strings.Repeat("1", 60)
	e.created = "bbbb" + strings.Repeat("2", 60)
	e.exited = "cccc" + strings.Repeat("3", 60)
	for id, st := range map[string]store.State{e.running: store.StateRunning, e.created: store.StateCreated, e.exited: store.StateExited} {
		pid := 0
		if st == store.StateRunning {
			pid = 4242
		}
		e.ds.store().Put(&store.Record{ID: id, Kind: store.KindContainer, SandboxID: e.sandbox, State: st, Pid: pid, ExitCode: 2})
	}
	e.stoppedSandbox = "dddd" + strings.Repeat("4", 60)
	e.ds.store().Put(&store.Record{ID: e.stoppedSandbox, Kind: store.KindSandbox, State: store.StateExited})
	return e
}

func TestExecValidation(t *testing.T) {
	e := newStreamingEnv(t)
	ctx := context.Background()
	cases := []struct {
		name string
		req  *runtimeapi.ExecRequest
		code codes.Code
		msg  string
	}{
		{"no container", &runtimeapi.ExecRequest{Cmd: []string{"ls"}, Stdout: true}, codes.InvalidArgument, "container ID is required"},
		{"no cmd", &runtimeapi.ExecRequest{ContainerId: e.running, Stdout: true}, codes.InvalidArgument, "cmd is required"},
		{"no streams", &runtimeapi.ExecRequest{ContainerId: e.running, Cmd: []string{"ls"}}, codes.InvalidArgument, "one of stdin, stdout and stderr"},
		{"tty and stderr", &runtimeapi.ExecRequest{ContainerId: e.running, Cmd: []string{"ls"}, Tty: true, Stdout: true, Stderr: true}, codes.InvalidArgument, "tty and stderr"},
		{"unknown", &runtimeapi.ExecRequest{ContainerId: "ffff0000", Cmd: []string{"ls"}, Stdout: true}, codes.NotFound, "container ffff0000 not found"},
		{"a sandbox", &runtimeapi.ExecRequest{ContainerId: e.sandbox, Cmd: []string{"ls"}, Stdout: true}, codes.NotFound, "is a pod sandbox, not a container"},
		{"created", &runtimeapi.ExecRequest{ContainerId: e.created, Cmd: []string{"ls"}, Stdout: true}, codes.FailedPrecondition, "is not running (created, not started)"},
		{"exited", &runtimeapi.ExecRequest{ContainerId: e.exited, Cmd: []string{"ls"}, Stdout: true}, codes.FailedPrecondition, "is not running (exited with code 2)"},
	}
	for _, c := range cases {
		_, err := e.ds.Exec(ctx, c.req)
		if codeOf(err) != c.code || err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: Exec returned %v (%s), want %s mentioning %q", c.name, err, codeOf(err), c.code, c.msg)
		}
	}
	if n := len(e.srv.execs); n != 0 {
		t.Errorf("%d invalid requests reached the streaming server", n)
	}
}

func TestExecDelegatesWithTheFullID(t *testing.T) {
	e := newStreamingEnv(t)
	req := &runtimeapi.ExecRequest{ContainerId: e.running[:8], Cmd: []string{"sh", "-c", "id"}, Tty: true, Stdin: true, Stdout: true}
	resp, err := e.ds.Exec(context.Background(), req)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if resp.Url != "http://127.0.0.1:1/exec/t" {
		t.Errorf("URL %q is not the streaming server's", resp.Url)
	}
	if len(e.srv.execs) != 1 {
		t.Fatalf("%d requests delegated, want 1", len(e.srv.execs))
	}
	got := e.srv.execs[0]
	if got.ContainerId != e.running || strings.Join(got.Cmd, " ") != "sh -c id" || !got.Tty || !got.Stdin || !got.Stdout || got.Stderr {
		t.Errorf("delegated %v, want the request with container ID %s", got, e.running)
	}
	if req.ContainerId != e.running[:8] {
		t.Errorf("the caller's request was modified: %v", req)
	}
}

func TestAttachValidationAndDelegation(t *testing.T) {
	e := newStreamingEnv(t)
	ctx := context.Background()
	for name, c := range map[string]struct {
		req  *runtimeapi.AttachRequest
		code codes.Code
	}{
		"no container": {&runtimeapi.AttachRequest{Stdout: true}, codes.InvalidArgument},
		"no streams":   {&runtimeapi.AttachRequest{ContainerId: e.running}, codes.InvalidArgument},
		"unknown":      {&runtimeapi.AttachRequest{ContainerId: "ffff", Stdout: true}, codes.NotFound},
		"exited":       {&runtimeapi.AttachRequest{ContainerId: e.exited, Stdout: true}, codes.FailedPrecondition},
		"sandbox":      {&runtimeapi.AttachRequest{ContainerId: e.sandbox, Stdout: true}, codes.NotFound},
	} {
		if _, err := e.ds.Attach(ctx, c.req); codeOf(err) != c.code {
			t.Errorf("%s: Attach returned %v, want %s", name, err, c.code)
		}
	}
	resp, err := e.ds.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: e.running, Stdin: true, Stdout: true, Stderr: true})
	if err != nil || resp.Url != "http://127.0.0.1:1/attach/t" {
		t.Fatalf("Attach: %v %v", resp, err)
	}
	if len(e.srv.attaches) != 1 || e.srv.attaches[0].ContainerId != e.running {
		t.Errorf("delegated %v", e.srv.attaches)
	}
}

func TestPortForwardValidationAndDelegation(t *testing.T) {
	e := newStreamingEnv(t)
	ctx := context.Background()
	for name, c := range map[string]struct {
		req  *runtimeapi.PortForwardRequest
		code codes.Code
		msg  string
	}{
		"no sandbox":  {&runtimeapi.PortForwardRequest{}, codes.InvalidArgument, "pod sandbox ID is required"},
		"bad port":    {&runtimeapi.PortForwardRequest{PodSandboxId: e.sandbox, Port: []int32{80, 70000}}, codes.InvalidArgument, "invalid port 70000"},
		"unknown":     {&runtimeapi.PortForwardRequest{PodSandboxId: "ffff"}, codes.NotFound, "pod sandbox ffff not found"},
		"a container": {&runtimeapi.PortForwardRequest{PodSandboxId: e.running}, codes.NotFound, "is a container, not a pod sandbox"},
		"stopped":     {&runtimeapi.PortForwardRequest{PodSandboxId: e.stoppedSandbox}, codes.FailedPrecondition, "is not ready"},
	} {
		_, err := e.ds.PortForward(ctx, c.req)
		if codeOf(err) != c.code || err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: PortForward returned %v (%s), want %s mentioning %q", name, err, codeOf(err), c.code, c.msg)
		}
	}
	resp, err := e.ds.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: e.sandbox[:12], Port: []int32{8080}})
	if err != nil || resp.Url != "http://127.0.0.1:1/portforward/t" {
		t.Fatalf("PortForward: %v %v", resp, err)
	}
	if len(e.srv.forwards) != 1 || e.srv.forwards[0].PodSandboxId != e.sandbox || e.srv.forwards[0].Port[0] != 8080 {
		t.Errorf("delegated %v, want sandbox %s port 8080", e.srv.forwards, e.sandbox)
	}
}

func TestPodNetNSFromTheIndex(t *testing.T) {
	e := newStreamingEnv(t)
	e.docker.ResetCalls()
	rec, _ := e.ds.store().Get(e.sandbox)
	path, err := e.ds.PodNetNS(context.Background(), e.sandbox)
	if err != nil || path != fmt.Sprintf("/proc/%d/ns/net", rec.Pid) {
		t.Errorf("PodNetNS of a running sandbox: %q %v, want /proc/%d/ns/net", path, err, rec.Pid)
	}
	if _, err := e.ds.PodNetNS(context.Background(), e.stoppedSandbox); codeOf(err) != codes.FailedPrecondition {
		t.Errorf("PodNetNS of a stopped sandbox: %v, want FailedPrecondition", err)
	}
	if _, err := e.ds.PodNetNS(context.Background(), e.running); codeOf(err) != codes.NotFound {
		t.Errorf("PodNetNS of a container: %v, want NotFound", err)
	}
	calls := e.docker.Calls()
	if len(calls) != 0 {
		t.Errorf("PodNetNS called Docker: %v", calls)
	}
}

func TestStreamingRPCsWithoutAServer(t *testing.T) {
	e := newTestEnv(t)
	sb := e.run(t, podConfig("pod-b"))
	if _, err := e.ds.PortForward(context.Background(), &runtimeapi.PortForwardRequest{PodSandboxId: sb}); codeOf(err) != codes.Unavailable {
		t.Errorf("PortForward with no streaming server: %v, want Unavailable", err)
	}
}
