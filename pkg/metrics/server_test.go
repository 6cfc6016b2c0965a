package metrics

import (
	"context"
	"fmt"
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
	rec := get(t, Handler(m, nil, false), "/metrics")
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
	}, false)
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
	rec := get(t, Handler(nil, nil, true), "/debug/pprof/heap")
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
	s, err := Listen(":0", Handler(New(), nil, false))
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
	if _, err := Listen(busy.Addr().String(), Handler(nil, nil, false)); err == nil {
		t.Errorf("Listen on a busy port %s succeeded", busy.Addr())
	}
}

// The pprof endpoints are served only when profiling is asked for; the
// rest is served either way.
func TestPprofOnlyWithProfiling(t *testing.T) {
	paths := []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=0.1"}
	for _, profiling := range []bool{false, true} {
		h := Handler(New(), nil, profiling)
		for _, p := range paths {
			want := http.StatusNotFound
			if profiling {
				want = http.StatusOK
			}
			if rec := get(t, h, p); rec.Code != want {
				t.Errorf("profiling %v: %s: %d, want %d", profiling, p, rec.Code, want)
			}
		}
		for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
			if rec := get(t, h, p); rec.Code != http.StatusOK {
				t.Errorf("profiling %v: %s: %d, want 200", profiling, p, rec.Code)
			}
		}
	}
}

// A profile, trace or delta profile longer than MaxProfileDuration is
// refused at once, saying the limit, before any sampling starts.
func TestProfileDurationIsCapped(t *testing.T) {
	h := Handler(nil, nil, true)
	limit := int(MaxProfileDuration.Seconds())
	for _, tc := range []struct {
		path string
		code int
	}{
		{fmt.Sprintf("/debug/pprof/profile?seconds=%d", limit+1), http.StatusBadRequest},
		{"/debug/pprof/profile?seconds=3600", http.StatusBadRequest},
		{"/debug/pprof/profile?seconds=9223372036854775807", http.StatusBadRequest},
		{"/debug/pprof/profile?seconds=1e9", http.StatusBadRequest},
		{"/debug/pprof/trace?seconds=60.5", http.StatusBadRequest},
		{"/debug/pprof/trace?seconds=Inf", http.StatusBadRequest},
		{"/debug/pprof/trace?seconds=NaN", http.StatusBadRequest},
		{"/debug/pprof/heap?seconds=86400", http.StatusBadRequest},
		{"/debug/pprof/allocs?seconds=120", http.StatusBadRequest},
		// The first value is the one pprof reads.
		{"/debug/pprof/profile?seconds=1000&seconds=1", http.StatusBadRequest},
		// Within the limit: pprof runs them (short ones, for the test).
		{"/debug/pprof/profile?seconds=1", http.StatusOK},
		{"/debug/pprof/trace?seconds=0.2", http.StatusOK},
		{"/debug/pprof/heap?seconds=1", http.StatusOK},
	} {
		start := time.Now()
		rec := get(t, h, tc.path)
		if rec.Code != tc.code {
			t.Errorf("%s: %d %q, want %d", tc.path, rec.Code, rec.Body.String(), tc.code)
			continue
		}
		if tc.code != http.StatusBadRequest {
			continue
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: refused only after %s", tc.path, d)
		}
		if body := rec.Body.String(); !strings.Contains(body, fmt.Sprintf("limit of %d s", limit)) {
			t.Errorf("%s: %q does not say the limit", tc.path, body)
		}
	}
	// Also for a form in the body, which pprof reads too.
	req := httptest.NewRequest(http.MethodPost, "/debug/pprof/profile", strings.NewReader("seconds=600"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest {
		t.Errorf("POST seconds=600: %d, want 400", rec.Code)
	}
}

// The server bounds every phase of a connection, and lets a profile of
// the longest allowed duration be written (pprof refuses one that would
// outlast the write timeout).
func TestServerTimeouts(t *testing.T) {
	s, err := Listen("127.0.0.1:0", Handler(nil, nil, true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	srv := s.srv
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout,
	} {
		if d <= 0 {
			t.Errorf("%s is not set", name)
		}
	}
	if srv.WriteTimeout <= MaxProfileDuration+10*time.Second {
		t.Errorf("WriteTimeout %s leaves no room for a %s profile", srv.WriteTimeout, MaxProfileDuration)
	}
}
