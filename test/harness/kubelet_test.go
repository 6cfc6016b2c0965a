package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeKubeletEnv makes this test binary act as a kubelet (see
// TestFakeKubeletProcess): serve, exit, or ignore-term.
const fakeKubeletEnv = "HARNESS_FAKE_KUBELET"

// TestFakeKubeletProcess is not a test: run as a fake kubelet (through the
// script fakeKubelet writes), it reads the config kubelet would and serves
// healthz on its port the way kubelet does.
func TestFakeKubeletProcess(t *testing.T) {
	mode := os.Getenv(fakeKubeletEnv)
	if mode == "" {
		t.Skip("the fake kubelet of TestKubeletStartStop, not a test")
	}
	var cfgPath string
	for _, a := range os.Args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			cfgPath = v
		}
	}
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		fmt.Println("F0101 00:00:00.000000 1 fake.go:1] no config:", err)
		os.Exit(1)
	}
	var cfg struct {
		HealthzPort int `json:"healthzPort"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		os.Exit(1)
	}
	if mode == "exit" {
		fmt.Println("E0101 00:00:00.000000 1 fake.go:1] fake kubelet fails on purpose")
		fmt.Println("last words")
		os.Exit(3)
	}
	if mode == "ignore-term" {
		signal.Ignore(syscall.SIGTERM)
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", cfg.HealthzPort))
	if err != nil {
		os.Exit(1)
	}
	if mode == "unhealthy" {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", 500) }))
	}
	// signal.Notify would undo the Ignore above: only the other modes exit on SIGTERM.
	if mode != "ignore-term" {
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() { <-term; os.Exit(0) }()
	}
	_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
}

// fakeKubelet writes a script that runs this test binary as a fake kubelet.
func fakeKubelet(t *testing.T, mode string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubelet")
	script := fmt.Sprintf("#!/bin/sh\nexec env %s=%s %q -test.run='^TestFakeKubeletProcess$' -- \"$@\"\n", fakeKubeletEnv, mode, self)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func freePorts(t *testing.T) (int, int) {
	t.Helper()
	var ports []int
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports[0], ports[1]
}

// withHostPaths moves the fixed host paths kubelet uses into dir.
func withHostPaths(dir string) KubeletOption {
	return func(c *kubeletConfig) {
		c.devicePluginDir = filepath.Join(dir, "var/lib/kubelet/device-plugins")
		c.containerLogsDir = filepath.Join(dir, "var/log/containers")
	}
}

// withOwnGuard gives the Kubelet's own guard these options.
func withOwnGuard(opts ...HostGuardOption) KubeletOption {
	return func(c *kubeletConfig) { c.guardOpts = append(c.guardOpts, opts...) }
}

// withGuardRoots moves the guard's /proc/sys, /sys/fs/cgroup and mountinfo.
func withGuardRoots(sysctl, cgroup, mountinfo string) HostGuardOption {
	return func(g *HostGuard) { g.sysctlRoot, g.cgroupRoot, g.mountinfo = sysctl, cgroup, mountinfo }
}

// fakeHost makes a /proc/sys with kubelet's sysctls, a cgroup root with
// two hierarchies, and an empty mountinfo, all under a temp dir.
func fakeHost(t *testing.T) (root string, opt HostGuardOption) {
	t.Helper()
	root = t.TempDir()
	for _, s := range KubeletSysctls {
		p := filepath.Join(root, "sys", strings.ReplaceAll(s, ".", "/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("7\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"cgroup/cpu", "cgroup/memory", "var/lib", "var/log"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mi := filepath.Join(root, "mountinfo")
	if err := os.WriteFile(mi, []byte("22 27 0:21 / /proc rw - proc proc rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, withGuardRoots(filepath.Join(root, "sys"), filepath.Join(root, "cgroup"), mi)
}

func TestKubeletConfigDefaults(t *testing.T) {
	dir := t.TempDir()
	k, err := NewKubelet(WithKubeletBinary("/bin/kubelet"), WithRuntimeEndpoint("/run/ns.sock"), WithKubeletDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(k.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("the config file is not JSON: %v", err)
	}
	want := map[string]any{
		"kind":                        "KubeletConfiguration",
		"containerRuntimeEndpoint":    "unix:///run/ns.sock",
		"imageServiceEndpoint":        "unix:///run/ns.sock",
		"staticPodPath":               filepath.Join(dir, "manifests"),
		"cgroupDriver":                "cgroupfs",
		"failCgroupV1":                false,
		"failSwapOn":                  false,
		"address":                     "127.0.0.1",
		"port":                        10250.0,
		"healthzPort":                 10248.0,
		"readOnlyPort":                0.0,
		"makeIPTablesUtilChains":      false,
		"imageGCHighThresholdPercent": 100.0,
		"oomScoreAdj":                 0.0,
		"fileCheckFrequency":          "2s",
		"syncFrequency":               "10s",
		"podLogsDir":                  "/var/log/pods",
		"featureGates":                map[string]any{},
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
	}
	for key, w := range want {
		if !reflect.DeepEqual(got[key], w) {
			t.Errorf("%s = %#v, want %#v", key, got[key], w)
		}
	}
	if a := got["authentication"].(map[string]any)["anonymous"].(map[string]any)["enabled"]; a != true {
		t.Errorf("anonymous auth = %v", a)
	}
	if e := got["evictionHard"].(map[string]any)["nodefs.available"]; e != "1%" {
		t.Errorf("evictionHard nodefs = %v", e)
	}
	wantArgs := []string{"--config=" + filepath.Join(dir, "kubelet-config.json"), "--root-dir=" + dir,
		"--cert-dir=" + filepath.Join(dir, "pki"), "--hostname-override=netshim-e2e-node", "-v=2"}
	if ip, err := DefaultNodeIP(); err == nil {
		wantArgs = append(wantArgs, "--node-ip="+ip)
	}
	if !slices.Equal(k.Args(), wantArgs) {
		t.Errorf("args %q, want %q", k.Args(), wantArgs)
	}
	if k.URL() != "https://127.0.0.1:10250" || k.HealthzURL() != "http://127.0.0.1:10248/healthz" || k.RootDir() != dir {
		t.Errorf("URL %s, healthz %s, root %s", k.URL(), k.HealthzURL(), k.RootDir())
	}
	if _, err := os.Stat(k.StaticPodPath); err != nil {
		t.Errorf("static pod dir: %v", err)
	}
	if k.Pid() != 0 || k.Running() {
		t.Errorf("pid %d running %v before Start", k.Pid(), k.Running())
	}
}

func TestKubeletConfigOptions(t *testing.T) {
	k, err := NewKubelet(WithKubeletBinary("/bin/kubelet"), WithRuntimeEndpoint("unix:///x.sock"),
		WithKubeletDir(t.TempDir()), WithKubeletPorts(11250, 11248), WithNodeName("n1"),
		WithFeatureGates(map[string]bool{"A": true}), WithFeatureGates(map[string]bool{"B": false}),
		WithPodLogsDir("/tmp/pl"), WithStaticPodPath("/tmp/sp-"+t.Name()), WithKubeconfig("/etc/kc"),
		WithKubeletArgs("--v=5", "--x"), WithKubeletVerbosity(4), WithNodeIP("192.0.2.9"),
		WithKubeletConfig(func(c map[string]any) { c["podCIDR"] = "10.1.0.0/24"; delete(c, "evictionHard") }),
		WithKubeletConfig(func(c map[string]any) { c["port"] = 12000 }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll("/tmp/sp-" + t.Name()) })
	cfg := k.Config()
	if cfg["podCIDR"] != "10.1.0.0/24" || cfg["evictionHard"] != nil || cfg["port"] != 12000 || cfg["healthzPort"] != 11248 {
		t.Errorf("edits not applied in order: %v", cfg)
	}
	if g := cfg["featureGates"].(map[string]any); !reflect.DeepEqual(g, map[string]any{"A": true, "B": false}) {
		t.Errorf("gates %v", g)
	}
	if cfg["podLogsDir"] != "/tmp/pl" || cfg["staticPodPath"] != "/tmp/sp-"+t.Name() || cfg["containerRuntimeEndpoint"] != "unix:///x.sock" {
		t.Errorf("config %v", cfg)
	}
	args := k.Args()
	if !slices.Contains(args, "--kubeconfig=/etc/kc") || !slices.Contains(args, "--hostname-override=n1") ||
		!slices.Contains(args, "-v=4") || !slices.Contains(args, "--node-ip=192.0.2.9") || !slices.Equal(args[len(args)-2:], []string{"--v=5", "--x"}) {
		t.Errorf("args %q", args)
	}
	if k.URL() != "https://127.0.0.1:11250" {
		t.Errorf("URL %s", k.URL())
	}
}

func TestNewKubeletRejectsBadOptions(t *testing.T) {
	ok := []KubeletOption{WithKubeletBinary("/bin/kubelet"), WithRuntimeEndpoint("/x.sock")}
	tests := []struct {
		name string
		opts []KubeletOption
		want string
	}{
		{"no binary", []KubeletOption{WithKubeletBinary(""), WithRuntimeEndpoint("/x")}, "no kubelet binary"},
		{"no endpoint", []KubeletOption{WithKubeletBinary("/k")}, "no runtime endpoint"},
		{"port out of range", append(ok, WithKubeletPorts(0, 10248)), "port 0 is out of range"},
		{"same ports", append(ok, WithKubeletPorts(10250, 10250)), "both 10250"},
		{"relative root dir", append(ok, WithKubeletDir("rel")), `root dir "rel" is not an absolute path`},
		{"relative pod logs dir", append(ok, WithPodLogsDir("logs")), "pod logs dir"},
		{"bad gate", append(ok, WithFeatureGates(map[string]bool{"A=B": true})), `bad feature gate name "A=B"`},
		{"bad node name", append(ok, WithNodeName("a b")), "bad node name"},
		{"zero timeout", append(ok, WithKubeletStartTimeout(0)), "timeouts must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBELET_BIN", "")
			k, err := NewKubelet(tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewKubelet: %v, %v; want an error with %q", k, err, tc.want)
			}
		})
	}
}

func TestParseFeatureGates(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]bool
		wantErr bool
	}{
		{"", map[string]bool{}, false},
		{"A=true", map[string]bool{"A": true}, false},
		{"PodAndContainerStatsFromCRI=true, EventedPLEG=false,", map[string]bool{"PodAndContainerStatsFromCRI": true, "EventedPLEG": false}, false},
		{"A", nil, true},
		{"A=yes", nil, true},
		{"=true", nil, true},
		{"a-b=true", nil, true},
	}
	for _, tc := range tests {
		got, err := ParseFeatureGates(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("ParseFeatureGates(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestKubeletStartStop(t *testing.T) {
	host, groots := fakeHost(t)
	tests := []struct {
		mode    string
		opts    []KubeletOption
		wantErr string // from Start
		stopErr string
	}{
		{mode: "serve"},
		{mode: "exit", wantErr: "kubelet exited during start-up"},
		{mode: "unhealthy", opts: []KubeletOption{WithKubeletStartTimeout(time.Second)}, wantErr: "did not answer ok within 1s"},
		{mode: "ignore-term", opts: []KubeletOption{WithKubeletStopTimeout(200 * time.Millisecond)}, stopErr: "did not exit within 200ms"},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			g, err := NewHostGuard(filepath.Join(t.TempDir(), "state"), groots, WithGuardLog(t.Logf))
			if err != nil {
				t.Fatal(err)
			}
			port, hport := freePorts(t)
			k, err := NewKubelet(append([]KubeletOption{WithKubeletBinary(fakeKubelet(t, tc.mode)),
				WithRuntimeEndpoint("/x.sock"), WithKubeletPorts(port, hport), WithHostGuard(g),
				WithPodLogsDir(filepath.Join(host, "pods")), withHostPaths(host)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = k.Start(ctx)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Start: %v, want %q", err, tc.wantErr)
				}
				if tc.mode == "exit" && !strings.Contains(err.Error(), "fails on purpose") {
					t.Errorf("the error lacks the log's errors: %v", err)
				}
				if k.Running() {
					t.Error("kubelet left running after a failed Start")
				}
			} else if err != nil {
				t.Fatalf("Start: %v", err)
			} else if !k.Running() || k.Pid() == 0 {
				t.Fatalf("running %v pid %d after Start", k.Running(), k.Pid())
			} else {
				// What a real kubelet does to the host, for Restore to undo.
				for _, d := range []string{"var/lib/kubelet/device-plugins", "var/log/containers", "pods/ns_p_uid/c",
					"cgroup/cpu/kubepods/pod1", "cgroup/memory/kubepods/burstable/pod2"} {
					if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(filepath.Join(host, "sys/vm/overcommit_memory"), []byte("1\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(host, "var/lib/kubelet/device-plugins/kubelet.sock"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := g.RemoveAtRestore(filepath.Join(host, "pods/ns_*")); err != nil {
					t.Fatal(err)
				}
			}
			err = k.Stop()
			if tc.stopErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.stopErr) {
					t.Fatalf("Stop: %v, want %q", err, tc.stopErr)
				}
			} else if err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if k.Running() {
				t.Fatal("kubelet runs after Stop")
			}
			if err := k.Stop(); err != nil {
				t.Fatalf("second Stop: %v", err)
			}
			if err := g.Restore(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(g.StatePath()); !os.IsNotExist(err) {
				t.Errorf("state file left: %v", err)
			}
			for _, d := range []string{"var/lib/kubelet", "var/log/containers", "pods", "cgroup/cpu/kubepods", "cgroup/memory/kubepods"} {
				if _, err := os.Stat(filepath.Join(host, d)); err == nil {
					t.Errorf("%s is left after Restore", d)
				}
			}
			if v, _ := os.ReadFile(filepath.Join(host, "sys/vm/overcommit_memory")); string(v) != "7" && string(v) != "7\n" {
				t.Errorf("vm.overcommit_memory is %q after Restore, want 7", v)
			}
			if _, err := os.Stat(filepath.Join(host, "var/lib")); err != nil {
				t.Errorf("Restore removed var/lib, which existed before: %v", err)
			}
		})
	}
}

func TestKubeletPreflight(t *testing.T) {
	host := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	pods := filepath.Join(host, "pods")
	if err := os.MkdirAll(filepath.Join(pods, "other_pod_uid"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, hport := freePorts(t)
	k, err := NewKubelet(WithKubeletBinary("/bin/false"), WithRuntimeEndpoint("/x.sock"), WithKubeletPorts(port, hport),
		WithPodLogsDir(pods), withHostPaths(host), WithKubeletDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	err = k.Start(context.Background())
	for _, want := range []string{fmt.Sprintf("port %d is in use", port), "other_pod_uid"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Start: %v, want an error with %q", err, want)
		}
	}
	if k.Pid() != 0 {
		t.Error("kubelet started despite the failed preflight")
	}
}

// StartKubelet's cleanup stops kubelet and, with the Kubelet's own guard
// and temp dir, restores the host and removes the dir.
func TestStartKubeletCleansUp(t *testing.T) {
	host, groots := fakeHost(t)
	state := filepath.Join(t.TempDir(), "state")
	var k *Kubelet
	t.Run("run", func(t *testing.T) {
		port, hport := freePorts(t)
		k = StartKubelet(t, WithKubeletBinary(fakeKubelet(t, "serve")), WithRuntimeEndpoint("/x.sock"),
			WithKubeletPorts(port, hport), WithPodLogsDir(filepath.Join(host, "pods")), withHostPaths(host),
			WithKubeletStateFile(state), withOwnGuard(groots, WithGuardLog(t.Logf)))
		if !k.Running() {
			t.Fatal("not running after StartKubelet")
		}
		if _, err := os.Stat(state); err != nil {
			t.Fatalf("no state file while kubelet runs: %v", err)
		}
		if err := os.MkdirAll(filepath.Join(host, "cgroup/cpu/kubepods/pod1"), 0o755); err != nil {
			t.Fatal(err)
		}
	})
	if k.Running() {
		t.Fatal("kubelet runs after the test's cleanup")
	}
	for _, p := range []string{k.Dir, state, filepath.Join(host, "cgroup/cpu/kubepods")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is left after the cleanup (%v)", p, err)
		}
	}
}
