package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {90, 90 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := percentile(s, c.p); got != c.want {
			t.Errorf("percentile(1..100 ms, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(nil) = %v", got)
	}
	if got := percentile([]time.Duration{3, 1, 2}, 50); got != 2 {
		t.Errorf("percentile of 3 samples, p50 = %v, want 2", got)
	}
}

func TestRequestKind(t *testing.T) {
	for _, c := range []struct{ method, path, kind, object string }{
		{"GET", "/v1.41/containers/json", "GET /containers/json", ""},
		{"POST", "/v1.41/containers/create", "POST /containers/create", ""},
		{"GET", "/v1.41/containers/0123abc/json", "GET /containers/{id}/json", "0123abc"},
		{"POST", "/v1.41/containers/k8s_POD_a_b_c_0/start", "POST /containers/{id}/start", "k8s_POD_a_b_c_0"},
		{"DELETE", "/v1.41/containers/0123abc", "DELETE /containers/{id}", "0123abc"},
		{"GET", "/v1.41/images/registry.k8s.io/pause:3.10/json", "GET /images/{name}/json", "registry.k8s.io/pause:3.10"},
		{"POST", "/v1.41/images/create", "POST /images/create", ""},
		{"GET", "/v1.41/events", "GET /events", ""},
		{"HEAD", "/_ping", "HEAD /_ping", ""},
		{"GET", "/version", "GET /version", ""},
	} {
		kind, object := requestKind(c.method, c.path)
		if kind != c.kind || object != c.object {
			t.Errorf("requestKind(%s %s) = %q, %q; want %q, %q", c.method, c.path, kind, object, c.kind, c.object)
		}
	}
}

// TestProxyStreamsAndCounts checks that the proxy forwards an events-like
// stream as it is written (not when it ends) and counts requests by kind,
// the stream apart.
func TestProxyStreamsAndCounts(t *testing.T) {
	dir := t.TempDir()
	upstream := filepath.Join(dir, "upstream.sock")
	ln, err := net.Listen("unix", upstream)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1.41/events":
			fmt.Fprintln(w, `{"status":"start"}`)
			w.(http.Flusher).Flush()
			<-release
		default:
			fmt.Fprint(w, "{}")
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	defer close(release)

	p, err := startProxy(filepath.Join(dir, "proxy.sock"), upstream)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", p.path)
	}}}
	start := p.mark()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/v1.41/events", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "{\"status\":\"start\"}\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}

	for _, path := range []string{"/v1.41/containers/abc/json", "/v1.41/containers/def/json", "/v1.41/containers/json"} {
		resp, err := client.Get("http://docker" + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	end := p.mark()
	if end.eventsOpen != 1 || end.eventsOpened-start.eventsOpened != 1 {
		t.Errorf("events streams: open %d, opened %d; want 1, 1", end.eventsOpen, end.eventsOpened-start.eventsOpened)
	}
	c := p.between(start, end, func(object string) bool { return object == "def" })
	if c.total() != 2 || c.byKind["GET /containers/{id}/json"] != 1 || c.byKind["GET /containers/json"] != 1 {
		t.Errorf("counts: %v", c.byKind)
	}
	if c.foreignTotal() != 1 {
		t.Errorf("foreign: %v", c.foreign)
	}
}
