package main

import (
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/netshim/netshim/pkg/metrics"
)

// parseFlagsWant parses args and checks the error against wantErr (a
// substring; "" for none): the options when parsing succeeded as wanted,
// nil when it failed (as wanted or not, reported).
func parseFlagsWant(t *testing.T, args []string, wantErr string) *options {
	t.Helper()
	opts, err := parseFlags(t, args...)
	switch {
	case wantErr != "":
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%v: error %v, want one mentioning %q", args, err, wantErr)
		}
		return nil
	case err != nil:
		t.Errorf("%v: %v", args, err)
		return nil
	}
	return opts
}

// requireStatus GETs path from the endpoint at addr and checks its code.
func requireStatus(t *testing.T, addr net.Addr, path string, code int) {
	t.Helper()
	resp, err := http.Get("http://" + addr.String() + path)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != code {
		t.Errorf("%s: %d, want %d", path, resp.StatusCode, code)
	}
}

func parseFlags(t *testing.T, args ...string) (*options, error) {
	t.Helper()
	opts := defaultOptions()
	fs := pflag.NewFlagSet("netshim", pflag.ContinueOnError)
	opts.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return opts, opts.validate()
}

func TestMetricsBindAddressFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    string // the address listened on; "" = off
		wantErr string
	}{
		{args: nil, want: ""},
		{args: []string{"--metrics-bind-address=:9090"}, want: "127.0.0.1:9090"},
		{args: []string{"--metrics-bind-address=0.0.0.0:9090"}, want: "0.0.0.0:9090"},
		{args: []string{"--metrics-bind-address=[::1]:9090"}, want: "[::1]:9090"},
		{args: []string{"--metrics-bind-address=9090"}, wantErr: "--metrics-bind-address"},
		{args: []string{"--metrics-bind-address=localhost:"}, wantErr: "missing port"},
	} {
		opts := parseFlagsWant(t, tc.args, tc.wantErr)
		if opts == nil {
			continue
		}
		got := ""
		if opts.metricsBindAddress != "" {
			got, _ = metrics.ListenAddress(opts.metricsBindAddress)
		}
		if got != tc.want {
			t.Errorf("%v: listens on %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestStartMetricsServer(t *testing.T) {
	bound, stop, err := startMetricsServer("", false, nil, nil)
	if err != nil || bound != nil {
		t.Fatalf("off: bound %v, err %v", bound, err)
	}
	stop()

	ready := func() (bool, string) { return false, "not synced" }
	bound, stop, err = startMetricsServer(":0", false, metrics.New(), ready)
	if err != nil {
		t.Fatal(err)
	}
	if !bound.(*net.TCPAddr).IP.IsLoopback() {
		t.Errorf("%q bound %v, want loopback", ":0", bound)
	}
	// Without --enable-profiling there is no pprof.
	for path, code := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable, "/metrics": http.StatusOK, "/debug/pprof/": http.StatusNotFound, "/debug/pprof/heap": http.StatusNotFound} {
		requireStatus(t, bound, path, code)
	}
	stop()
	if _, err := http.Get("http://" + bound.String() + "/healthz"); err == nil {
		t.Error("still serving after stop")
	}

	// A port already taken is a start-up error.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if _, _, err := startMetricsServer(busy.Addr().String(), false, metrics.New(), ready); err == nil {
		t.Errorf("started on busy %s", busy.Addr())
	}
}

func TestEnableProfilingFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    bool
		wantErr string
	}{
		{args: nil, want: false},
		{args: []string{"--metrics-bind-address=:9090"}, want: false},
		{args: []string{"--metrics-bind-address=:9090", "--enable-profiling"}, want: true},
		{args: []string{"--metrics-bind-address=:9090", "--enable-profiling=false"}, want: false},
		{args: []string{"--enable-profiling"}, wantErr: "--metrics-bind-address"},
	} {
		opts := parseFlagsWant(t, tc.args, tc.wantErr)
		if opts == nil {
			continue
		}
		if opts.enableProfiling != tc.want {
			t.Errorf("%v: enableProfiling %v, want %v", tc.args, opts.enableProfiling, tc.want)
		}
	}
}

func TestStartMetricsServerWithProfiling(t *testing.T) {
	bound, stop, err := startMetricsServer("127.0.0.1:0", true, metrics.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for path, code := range map[string]int{
		"/metrics": http.StatusOK, "/debug/pprof/": http.StatusOK, "/debug/pprof/heap": http.StatusOK,
		"/debug/pprof/profile?seconds=3600": http.StatusBadRequest,
	} {
		requireStatus(t, bound, path, code)
	}
}

func TestExposureWarning(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		warn bool
	}{
		{"127.0.0.1", false},
		{"127.0.0.53", false},
		{"::1", false},
		{"0.0.0.0", true},
		{"::", true},
		{"10.0.0.5", true},
		{"192.168.1.2", true},
		{"fe80::1", true},
	} {
		for _, profiling := range []bool{false, true} {
			w := exposureWarning(&net.TCPAddr{IP: net.ParseIP(tc.ip), Port: 9090}, profiling)
			if (w != "") != tc.warn {
				t.Errorf("%s, profiling %v: warning %q, want one: %v", tc.ip, profiling, w, tc.warn)
			}
			if w != "" && (!strings.HasPrefix(w, "WARNING: ") || strings.Contains(w, "pprof") != profiling) {
				t.Errorf("%s, profiling %v: warning %q does not say what is exposed", tc.ip, profiling, w)
			}
		}
	}
}

func TestModeCountsKV(t *testing.T) {
	got := modeCountsKV(map[metrics.SandboxMode]int{
		{Mode: "pinned", Reason: "shared-pid-namespace"}: 2,
		{Mode: "docker", Reason: "host-network"}:         1,
		{Mode: "pauseless", Reason: "no-pause-needed"}:   7,
	})
	want := []any{"docker/host-network", 1, "pauseless/no-pause-needed", 7, "pinned/shared-pid-namespace", 2}
	if !slices.Equal(got, want) {
		t.Errorf("modeCountsKV = %v, want %v", got, want)
	}
	if got := modeCountsKV(nil); len(got) != 0 {
		t.Errorf("no sandboxes: %v", got)
	}
}
