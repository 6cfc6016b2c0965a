package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestConflist(t *testing.T) {
	type plugin = map[string]any
	tests := []struct {
		name    string
		opts    []ConflistOption
		wantErr string
		check   func(t *testing.T, name string, plugins []plugin)
	}{
		{
			name: "default chain is bridge, host-local and portmap",
			opts: []ConflistOption{WithBridge("br9"), WithSubnets("10.9.0.0/24"), WithIPAMDataDir("/d")},
			check: func(t *testing.T, name string, p []plugin) {
				if name != "br9" || len(p) != 2 || p[0]["type"] != "bridge" || p[1]["type"] != "portmap" || p[0]["hairpinMode"] != true {
					t.Fatalf("name %q, plugins %v", name, p)
				}
				ipam := p[0]["ipam"].(map[string]any)
				if ipam["dataDir"] != "/d" || ipam["type"] != "host-local" || ipam["routes"] != nil {
					t.Fatalf("ipam %v", ipam)
				}
			},
		},
		{
			name: "dual-stack ranges, default route, extra plugin, no hairpin",
			opts: []ConflistOption{WithBridge("b"), WithNetworkName("net"), WithSubnets("10.9.0.0/24", "fd00::/64"),
				WithDefaultRoute(), WithHairpin(false), WithPlugins(plugin{"type": "firewall"})},
			check: func(t *testing.T, name string, p []plugin) {
				if name != "net" || len(p) != 3 || p[1]["type"] != "firewall" || p[0]["hairpinMode"] != nil {
					t.Fatalf("name %q, plugins %v", name, p)
				}
				ipam := p[0]["ipam"].(map[string]any)
				if len(ipam["ranges"].([]any)) != 2 || ipam["routes"] == nil {
					t.Fatalf("ipam %v", ipam)
				}
			},
		},
		{
			name: "firewall after portmap",
			opts: []ConflistOption{WithBridge("b"), WithSubnets("10.9.0.0/24"), WithFirewall()},
			check: func(t *testing.T, _ string, p []plugin) {
				if len(p) != 3 || p[1]["type"] != "portmap" || p[2]["type"] != "firewall" {
					t.Fatalf("plugins %v", p)
				}
			},
		},
		{
			name: "replaced IPAM, no portmap",
			opts: []ConflistOption{WithBridge("b"), WithIPAM(plugin{"type": "slow-ipam"}), WithoutPortmap()},
			check: func(t *testing.T, _ string, p []plugin) {
				if len(p) != 1 || p[0]["ipam"].(map[string]any)["type"] != "slow-ipam" {
					t.Fatalf("plugins %v", p)
				}
			},
		},
		{
			name: "whole chain",
			opts: []ConflistOption{WithNetworkName("n"), WithChain(plugin{"type": "loopback"})},
			check: func(t *testing.T, _ string, p []plugin) {
				if len(p) != 1 || p[0]["type"] != "loopback" {
					t.Fatalf("plugins %v", p)
				}
			},
		},
		{name: "no name", opts: []ConflistOption{WithSubnets("10.0.0.0/8")}, wantErr: "no network name"},
		{name: "no subnet", opts: []ConflistOption{WithBridge("b")}, wantErr: "no subnet"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Conflist(tc.opts...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				Version string   `json:"cniVersion"`
				Name    string   `json:"name"`
				Plugins []plugin `json:"plugins"`
			}
			if err := json.Unmarshal(data, &v); err != nil {
				t.Fatal(err)
			}
			if v.Version != "1.0.0" {
				t.Errorf("cniVersion %q", v.Version)
			}
			tc.check(t, v.Name, v.Plugins)
		})
	}
}

func TestWriteConflistNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := WriteConflist(t, filepath.Join(dir, "net.d"), WithBridge("nsx1"), WithSubnets("10.1.0.0/24"))
	if want := filepath.Join(dir, "net.d", "10-nsx1.conflist"); path != want {
		t.Fatalf("path %s, want %s", path, want)
	}
	path = WriteConflist(t, dir, WithBridge("nsx1"), WithSubnets("10.1.0.0/24"), WithFileName("99-x.conflist"))
	if _, err := os.Stat(path); err != nil || filepath.Base(path) != "99-x.conflist" {
		t.Fatalf("path %s: %v", path, err)
	}
}

func TestEventually(t *testing.T) {
	var calls atomic.Int32
	if !Eventually(time.Second, func() bool { return calls.Add(1) == 3 }) {
		t.Fatal("Eventually gave up on a condition that turned true")
	}
	start := time.Now()
	if Eventually(0, func() bool { return false }) {
		t.Fatal("Eventually reported a false condition as true")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a zero timeout waited %s", d)
	}
}

func TestNewNetshimLayoutAndArgs(t *testing.T) {
	dir := t.TempDir()
	n, err := NewNetshim(WithBinary("/bin/false"), WithDir(dir), WithCNIBinDir("/cni"),
		WithDockerEndpoint("unix:///d.sock"), WithKubenet("10.5.0.0/24", "kbr", ""), WithArgs("--cni-timeout", "2s"),
		WithCNIConfig(WithBridge("b1"), WithSubnets("10.6.0.0/24")))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{n.RootDir, n.ConfDir, n.CacheDir} {
		if !strings.HasPrefix(d, dir) {
			t.Errorf("%s is not under %s", d, dir)
		}
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			t.Errorf("%s was not created: %v", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(n.ConfDir, "10-b1.conflist")); err != nil {
		t.Errorf("WithCNIConfig wrote no conflist: %v", err)
	}
	args := n.Args()
	for _, want := range [][]string{
		{"--listen", "unix://" + n.Sock}, {"--cni-bin-dir", "/cni"}, {"--docker-endpoint", "unix:///d.sock"},
		{"--network-plugin=kubenet", "--pod-cidr=10.5.0.0/24", "--kubenet-bridge=kbr"}, {"--cni-timeout", "2s"},
	} {
		i := slices.Index(args, want[0])
		if i < 0 || !slices.Equal(args[i:min(i+len(want), len(args))], want) {
			t.Errorf("args %v lack %v", args, want)
		}
	}
	if slices.Index(args, "--cni-timeout") < slices.Index(args, "--docker-endpoint") {
		t.Errorf("WithArgs must come last (the later flag wins): %v", args)
	}
	if n.Running() || n.Exited() || n.CRI() != nil {
		t.Error("a Netshim that was never started reports a process")
	}
	if err := n.Stop(0); err != nil {
		t.Errorf("Stop of a never-started netshim: %v", err)
	}
}

func TestNewNetshimRejectsBadInput(t *testing.T) {
	t.Setenv("NETSHIM_BIN", "")
	if _, err := NewNetshim(WithDir(t.TempDir())); err == nil || !strings.Contains(err.Error(), "NETSHIM_BIN") {
		t.Errorf("no binary: err = %v", err)
	}
	long := filepath.Join(t.TempDir(), strings.Repeat("x", 120))
	if _, err := NewNetshim(WithBinary("/bin/true"), WithDir(t.TempDir()), WithSocket(long)); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("long socket path: err = %v", err)
	}
}

// A binary that exits at once is reported as such, not waited for.
func TestStartReportsEarlyExit(t *testing.T) {
	n, err := NewNetshim(WithBinary("/bin/false"), WithDir(t.TempDir()), WithStartTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	err = n.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") {
		t.Fatalf("Start of /bin/false: %v", err)
	}
	if !n.Exited() || n.Running() {
		t.Fatalf("after an early exit: Exited=%v Running=%v", n.Exited(), n.Running())
	}
	if data, _ := os.ReadFile(n.LogPath); !strings.Contains(string(data), "starting netshim") {
		t.Errorf("log %s lacks the start banner: %q", n.LogPath, data)
	}
}
