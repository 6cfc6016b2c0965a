//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// freeLoopbackPort is a TCP port on 127.0.0.1 that was free a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// httpGet fetches url and returns the status code and body.
func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, body
}

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the samples of the Prometheus text format (netshim's
// label values have no quotes, commas or escapes).
func parseMetrics(t *testing.T, text []byte) []sample {
	t.Helper()
	var out []sample
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, val, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(strings.Fields(val)[0], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		s := sample{name: series, labels: map[string]string{}, value: v}
		if name, rest, ok := strings.Cut(series, "{"); ok {
			s.name = name
			for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
				k, v, _ := strings.Cut(kv, "=")
				s.labels[k] = strings.Trim(v, `"`)
			}
		}
		out = append(out, s)
	}
	return out
}

// sum adds the samples named name whose labels include labels.
func sum(samples []sample, name string, labels map[string]string) float64 {
	total := 0.0
next:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for k, v := range labels {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
	}
	return total
}

// TestMetricsEndpoint: netshim started with --metrics-bind-address serves
// /healthz and /readyz, and after a pod and container lifecycle /metrics
// has the RPC, CNI and Docker histograms with non-zero counts; with
// --enable-profiling the heap profile at /debug/pprof/heap is one
// `go tool pprof` reads.
func TestMetricsEndpoint(t *testing.T) {
	requireWorkloadImage(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	e := newEnv(t, envOptions{extraFlags: []string{"--metrics-bind-address=" + addr, "--enable-profiling"}})
	e.start()
	base := "http://" + addr

	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	// Version answered (the harness waits for it) means the first sync
	// was tried; with the host's dockerd up it succeeded.
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s\n%s", code, body, e.logTail(20))
	}

	podJSON := e.writePodJSON("metrics")
	podID := e.runp(podJSON)
	// A pause-less sandbox (--sandbox-netns=pauseless) is no container.
	creates := 2.0
	if e.readCheckpoint(podID).Data.Pauseless != nil {
		creates = 1
	}
	ctr := e.crictlRun(podID, podJSON, "metrics", "sh", "-c", "echo metrics-e2e; sleep 3600")
	running := scrape(t, base)
	if n := sum(running, "netshim_sandboxes", map[string]string{"state": "running"}); n < 1 {
		t.Errorf("netshim_sandboxes{state=running} = %v with a pod running", n)
	}
	if n := sum(running, "netshim_containers", map[string]string{"state": "running"}); n < 1 {
		t.Errorf("netshim_containers{state=running} = %v with a container running", n)
	}
	e.mustCrictl("stop", "--timeout", "1", ctr) // sh as PID 1 ignores SIGTERM
	e.mustCrictl("rm", ctr)
	e.mustCrictl("stopp", podID)
	e.mustCrictl("rmp", podID)

	samples := scrape(t, base)
	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{
		{"netshim_rpc_duration_seconds_count", map[string]string{"rpc": "RunPodSandbox", "code": "OK"}},
		{"netshim_rpc_duration_seconds_count", map[string]string{"rpc": "CreateContainer", "code": "OK"}},
		{"netshim_rpc_duration_seconds_count", map[string]string{"rpc": "StopPodSandbox", "code": "OK"}},
		{"netshim_cni_operation_duration_seconds_count", map[string]string{"verb": "ADD", "network": e.bridge}},
		{"netshim_cni_operation_duration_seconds_count", map[string]string{"verb": "DEL", "network": e.bridge}},
		{"netshim_docker_call_duration_seconds_count", map[string]string{"call": "ContainerCreate"}},
		{"netshim_docker_call_duration_seconds_count", map[string]string{"call": "ContainerStart"}},
		{"netshim_index_events_total", nil},
		{"go_goroutines", nil},
		{"process_resident_memory_bytes", nil},
	} {
		if n := sum(samples, tc.name, tc.labels); n <= 0 {
			t.Errorf("%s%v = %v, want > 0", tc.name, tc.labels, n)
		}
	}
	if n := sum(samples, "netshim_docker_call_duration_seconds_count", map[string]string{"call": "ContainerCreate"}); n < creates {
		t.Errorf("ContainerCreate count %v, want >= %v (the pause container, if any, and the workload)", n, creates)
	}

	code, heap := httpGet(t, base+"/debug/pprof/heap")
	if code != http.StatusOK {
		t.Fatalf("/debug/pprof/heap: %d %s", code, heap)
	}
	if _, err := profile.Parse(bytes.NewReader(heap)); err != nil {
		t.Fatalf("/debug/pprof/heap is not a profile: %v", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Logf("go not on PATH: `go tool pprof` not run (the profile parsed)")
		return
	}
	path := filepath.Join(e.dir, "heap.pb.gz")
	if err := os.WriteFile(path, heap, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandDeadline)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "tool", "pprof", "-top", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "inuse_space") {
		t.Errorf("go tool pprof -top %s: %v\n%s", path, err, out)
	}
}

// scrape fetches and parses /metrics.
func scrape(t *testing.T, base string) []sample {
	t.Helper()
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	return parseMetrics(t, body)
}
