package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestHandlerServesMetricsFamilies(t *testing.T) {
	m := New()
	m.ObserveRPC("RunPodSandbox", "OK", time.Millisecond)
	m.ObserveCNI("ADD", "net1", time.Millisecond, nil)
	m.ObserveDockerCall("ContainerCreate", time.Millisecond, nil)
	m.SetStateCounts(func() (map[string]int, map[string]int) {
		return map[string]int{"running": 1}, map[string]int{"exited": 1}
	})
	rec := get(t, Handler(m, nil), "/metrics")
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	body := rec.Body.String()
	for _, want := range []string{
		`netshim_rpc_duration_seconds_count{code="OK",rpc="RunPodSandbox"} 1`,
		`netshim_cni_operation_duration_seconds_count{network="net1",verb="ADD"} 1`,
		`netshim_docker_call_duration_seconds_count{call="ContainerCreate"} 1`,
		`netshim_index_events_total 0`,
		`netshim_index_resyncs_total{result="ok"} 0`,
		`netshim_teardown_retries_pending 0`,
		`netshim_gc_attachments_total 0`,
		`netshim_log_follower_restarts_total 0`,
		`netshim_sandboxes{state="running"} 1`,
		`netshim_containers{state="exited"} 1`,
		`go_goroutines `,
		`process_cpu_seconds_total `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestHealthzAndReadyz(t *testing.T) {
	var ready atomic.Bool
	h := Handler(New(), func() (bool, string) {
		if !ready.Load() {
			return false, "docker: not connected yet"
		}
		return true, ""
	})
	if rec := get(t, h, "/healthz"); rec.Code != http.StatusOK {
		t.Errorf("/healthz before sync: %d, want 200", rec.Code)
	}
	rec := get(t, h, "/readyz")
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "docker: not connected yet") {
		t.Errorf("/readyz before sync: %d %q, want 503 with the reason", rec.Code, rec.Body.String())
	}
	ready.Store(true)
	if rec := get(t, h, "/readyz"); rec.Code != http.StatusOK {
		t.Errorf("/readyz after sync: %d, want 200", rec.Code)
	}
}

func TestPprofHeapIsAProfile(t *testing.T) {
	rec := get(t, Handler(nil, nil), "/debug/pprof/heap")
	if rec.Code != http.StatusOK {
		t.Fatalf("/debug/pprof/heap: %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("content type %q", ct)
	}
	p, err := profile.Parse(rec.Body)
	if err != nil {
		t.Fatalf("parsing the heap profile: %v", err)
	}
	if len(p.SampleType) == 0 {
		t.Error("heap profile has no sample types")
	}
}

func TestListenAddress(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		wantErr  bool
	}{
		{in: ":9090", want: "127.0.0.1:9090"},
		{in: "127.0.0.1:0", want: "127.0.0.1:0"},
		{in: "0.0.0.0:9090", want: "0.0.0.0:9090"},
		{in: "[::1]:9090", want: "[::1]:9090"},
		{in: "localhost:9090", want: "localhost:9090"},
		{in: "9090", wantErr: true},
		{in: "127.0.0.1:", wantErr: true},
		{in: "", wantErr: true},
	} {
		got, err := ListenAddress(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ListenAddress(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestServerServesAndShutsDown(t *testing.T) {
	s, err := Listen(":0", Handler(New(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if ip := s.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Errorf("bound %s, want loopback", ip)
	}
	done := make(chan struct{})
	go func() { s.Serve(); close(done) }()
	resp, err := http.Get("http://" + s.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	<-done

	// The port is taken by another listener: Listen fails, it does not
	// serve somewhere else.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if _, err := Listen(busy.Addr().String(), Handler(nil, nil)); err == nil {
		t.Errorf("Listen on a busy port %s succeeded", busy.Addr())
	}
}
