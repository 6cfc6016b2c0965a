package harness

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeK8sBinDir makes a bin dir holding executables under the names a
// ControlPlane looks for, and an etcd.
func fakeK8sBinDir(t *testing.T) (dir, etcd string) {
	t.Helper()
	dir = t.TempDir()
	for _, b := range []string{kubeAPIServer, kubeControllerManager, kubeScheduler, kubectlBin, "etcd"} {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, filepath.Join(dir, "etcd")
}

func TestNewControlPlaneRefusesBadOptions(t *testing.T) {
	bin, etcd := fakeK8sBinDir(t)
	noKubectl := t.TempDir()
	for _, b := range []string{kubeAPIServer, kubeControllerManager, kubeScheduler} {
		if err := os.WriteFile(filepath.Join(noKubectl, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("K8S_BIN_DIR", "")
	t.Setenv("ETCD_BIN", "")
	tests := []struct {
		name string
		opts []ControlPlaneOption
		want string
	}{
		{"no bin dir", []ControlPlaneOption{WithEtcdBinary(etcd)}, "K8S_BIN_DIR"},
		{"kubectl missing", []ControlPlaneOption{WithK8sBinDir(noKubectl), WithEtcdBinary(etcd)}, "kubectl"},
		{"no etcd", []ControlPlaneOption{WithK8sBinDir(bin), WithEtcdBinary(filepath.Join(bin, "nope"))}, "etcd"},
		{"bad service CIDR", []ControlPlaneOption{WithK8sBinDir(bin), WithEtcdBinary(etcd), WithServiceCIDR("10.0.0.0")}, "service CIDR"},
		{"bad cluster CIDR", []ControlPlaneOption{WithK8sBinDir(bin), WithEtcdBinary(etcd), WithClusterCIDR("nope", 24)}, "cluster CIDR"},
		{"mask too short", []ControlPlaneOption{WithK8sBinDir(bin), WithEtcdBinary(etcd), WithClusterCIDR("10.177.0.0/16", 16)}, "mask size"},
		{"mask too long", []ControlPlaneOption{WithK8sBinDir(bin), WithEtcdBinary(etcd), WithClusterCIDR("10.177.0.0/16", 33)}, "mask size"},
		{"overlap", []ControlPlaneOption{WithK8sBinDir(bin), WithEtcdBinary(etcd), WithServiceCIDR("10.177.3.0/24"), WithClusterCIDR("10.177.0.0/16", 24)}, "overlaps"},
		{"relative dir", []ControlPlaneOption{WithK8sBinDir(bin), WithEtcdBinary(etcd), WithControlPlaneDir("rel")}, "absolute"},
		{"zero timeout", []ControlPlaneOption{WithK8sBinDir(bin), WithEtcdBinary(etcd), WithControlPlaneTimeouts(0, 1)}, "timeouts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cp, err := NewControlPlane(tt.opts...)
			if err == nil {
				cp.Stop()
				t.Fatal("NewControlPlane succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestNewControlPlaneOwnsItsDir(t *testing.T) {
	bin, etcd := fakeK8sBinDir(t)
	cp, err := NewControlPlane(WithK8sBinDir(bin), WithEtcdBinary(etcd), WithClusterCIDR("10.177.0.0/16", 24))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cp.PKIDir); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.NodeKubeconfig("n1"); err == nil {
		t.Error("NodeKubeconfig before Start succeeded")
	}
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cp.Dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there after Stop (stat: %v)", cp.Dir, err)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	// A dir the caller gives stays.
	mine := t.TempDir()
	cp, err = NewControlPlane(WithK8sBinDir(bin), WithEtcdBinary(etcd), WithControlPlaneDir(mine))
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("the caller's dir went: %v", err)
	}
}

// A component that dies at start-up fails Start with its log, and what
// started before it is stopped.
func TestControlPlaneStartFailsWithTheLog(t *testing.T) {
	bin, _ := fakeK8sBinDir(t)
	etcd := filepath.Join(t.TempDir(), "etcd")
	if err := os.WriteFile(etcd, []byte("#!/bin/sh\necho etcd cannot start: no disk >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cp, err := NewControlPlane(WithK8sBinDir(bin), WithEtcdBinary(etcd))
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	err = cp.Start(t.Context())
	if err == nil {
		t.Fatal("Start succeeded")
	}
	for _, want := range []string{"etcd exited during start-up", "no disk"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if len(cp.Pids()) != 0 {
		t.Errorf("components still recorded after a failed Start: %v", cp.Pids())
	}
	if err := cp.Start(t.Context()); err == nil {
		t.Error("a second Start succeeded")
	}
}

func TestFirstServiceIP(t *testing.T) {
	for cidr, want := range map[string]string{
		"10.179.0.0/24": "10.179.0.1",
		"10.96.0.5/12":  "10.96.0.1",
		"fd00::/108":    "fd00::1",
	} {
		ip, err := firstServiceIP(cidr)
		if err != nil || ip.String() != want {
			t.Errorf("firstServiceIP(%s) = %v, %v; want %s", cidr, ip, err, want)
		}
	}
}

// TestControlPlaneRuns starts the real thing when the binaries are there
// (K8S_BIN_DIR and ETCD_BIN, as `make e2e-cluster` sets them); it needs
// neither root nor Docker.
func TestControlPlaneRuns(t *testing.T) {
	if os.Getenv("K8S_BIN_DIR") == "" || os.Getenv("ETCD_BIN") == "" {
		t.Skip("K8S_BIN_DIR and ETCD_BIN are not set (hack/build-kubelet.sh cluster builds them)")
	}
	cp := StartControlPlane(t, WithClusterCIDR("10.177.0.0/16", 24))
	out := cp.MustKubectl(t, "get", "--raw", "/readyz")
	if strings.TrimSpace(out) != "ok" {
		t.Errorf("/readyz: %q", out)
	}
	// The controller-manager runs: it creates the default ServiceAccount.
	if !Eventually(ControlPlaneStartTimeout, func() bool {
		_, err := cp.Kubectl("get", "serviceaccount", "default", "-n", "default")
		return err == nil
	}) {
		t.Errorf("no default ServiceAccount: is kube-controller-manager running?\n%s", cp.LogTails(10))
	}
	kc, err := cp.NodeKubeconfig("n1")
	if err != nil {
		t.Fatal(err)
	}
	// A node's credentials work, and the Node authorizer confines them.
	out, err = cp.KubectlStdin(t.Context(), nil, "--kubeconfig", kc, "auth", "can-i", "get", "secrets", "-A")
	if err == nil || !strings.HasPrefix(out, "no") {
		t.Errorf("a node may read every secret: %q %v", out, err)
	}
	pids := cp.Pids()
	if len(pids) != 4 {
		t.Fatalf("pids: %v", pids)
	}
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	// Stop reaped them: the PIDs are gone.
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
			t.Errorf("%s (pid %d) is still there: kill 0: %v", name, pid, err)
		}
	}
	if _, err := os.Stat(cp.Dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there", cp.Dir)
	}
}
