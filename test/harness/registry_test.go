package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var testLan = &Lan{Name: "nslan", Prefix: netip.MustParsePrefix("10.131.0.0/24")}

func TestNewRegistryAddress(t *testing.T) {
	tests := []struct {
		name       string
		opts       []RegistryOption
		wantAddr   string
		wantPrefix string
		wantErr    string
	}{
		{name: "default", wantAddr: "127.0.0.1:5000", wantPrefix: "localhost:5000"},
		{name: "port", opts: []RegistryOption{WithRegistryPort(5001)}, wantAddr: "127.0.0.1:5001", wantPrefix: "localhost:5001"},
		{name: "other loopback address", opts: []RegistryOption{WithRegistryAddr("127.0.0.2:5000")},
			wantAddr: "127.0.0.2:5000", wantPrefix: "127.0.0.2:5000"},
		{name: "every address", opts: []RegistryOption{WithRegistryAddr("0.0.0.0:5000")}, wantErr: "loopback"},
		{name: "empty host", opts: []RegistryOption{WithRegistryAddr(":5000")}, wantErr: "loopback"},
		{name: "not loopback", opts: []RegistryOption{WithRegistryAddr("10.0.0.1:5000")}, wantErr: "loopback"},
		{name: "IPv6 loopback", opts: []RegistryOption{WithRegistryAddr("[::1]:5000")}, wantErr: "IPv4 loopback"},
		{name: "host name", opts: []RegistryOption{WithRegistryAddr("localhost:5000")}, wantErr: "loopback"},
		{name: "no port", opts: []RegistryOption{WithRegistryAddr("127.0.0.1")}, wantErr: "want 127.0.0.1:PORT"},
		{name: "port 0", opts: []RegistryOption{WithRegistryPort(0)}, wantErr: "1-65535"},
		{name: "port too big", opts: []RegistryOption{WithRegistryPort(70000)}, wantErr: "1-65535"},
		{name: "a lan's host address", opts: []RegistryOption{WithRegistryOnLan(testLan, 5000)},
			wantAddr: "10.131.0.254:5000", wantPrefix: "10.131.0.254:5000"},
		// Only the lan's host address: not another on the lan, not another port's check skipped.
		{name: "another address on the lan", opts: []RegistryOption{WithRegistryOnLan(testLan, 5000), WithRegistryAddr("10.131.0.11:5000")}, wantErr: "loopback"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "reg")
			r, err := NewRegistry(append([]RegistryOption{WithRegistryDir(dir)}, tc.opts...)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a refused registry created %s (stat: %v)", dir, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Addr() != tc.wantAddr || r.Prefix() != tc.wantPrefix || r.URL() != "http://"+tc.wantAddr {
				t.Errorf("Addr %q Prefix %q URL %q, want %q and %q", r.Addr(), r.Prefix(), r.URL(), tc.wantAddr, tc.wantPrefix)
			}
		})
	}
}

// The config written is the one docker-registry serves with: storage in
// the registry's own dir, deletes on, the loopback address, quiet log.
func TestNewRegistryWritesConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "with space")
	r, err := NewRegistry(WithRegistryDir(dir), WithRegistryPort(5123))
	if err != nil {
		t.Fatal(err)
	}
	if r.ConfigPath != filepath.Join(dir, "registry.yml") || r.StorageDir != filepath.Join(dir, "storage") ||
		r.LogPath != filepath.Join(dir, "registry.log") {
		t.Errorf("layout: config %s storage %s log %s", r.ConfigPath, r.StorageDir, r.LogPath)
	}
	if st, err := os.Stat(r.StorageDir); err != nil || !st.IsDir() {
		t.Fatalf("storage dir not created: %v", err)
	}
	data, err := os.ReadFile(r.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"version: 0.1\n",
		"  level: warn\n",
		"  accesslog:\n    disabled: true\n",
		"    rootdirectory: " + strconv.Quote(r.StorageDir) + "\n",
		"  delete:\n    enabled: true\n",
		"http:\n  addr: \"127.0.0.1:5123\"\n",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("config lacks %q:\n%s", want, data)
		}
	}
	if args := r.Args(); !slices.Equal(args, []string{"serve", r.ConfigPath}) {
		t.Errorf("args %v", args)
	}
	if r.Running() || r.Pid() != 0 {
		t.Error("a registry never started reports a process")
	}
	if err := r.Stop(); err != nil {
		t.Errorf("Stop of a never-started registry: %v", err)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("Close removed the caller's dir %s: %v", dir, err)
	}
}

func TestNewRegistryTempDirIsRemoved(t *testing.T) {
	r, err := NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close left its temp dir %s (stat: %v)", r.Dir, err)
	}
}

func TestRegistryName(t *testing.T) {
	r, err := NewRegistry(WithRegistryDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ ref, tag, want, wantErr string }{
		{ref: "registry.k8s.io/e2e-test-images/busybox:1.29-2", want: "localhost:5000/e2e-test-images/busybox:1.29-2"},
		{ref: "registry.k8s.io/e2e-test-images/busybox:1.29-2", tag: "latest", want: "localhost:5000/e2e-test-images/busybox:latest"},
		{ref: "gcr.io/k8s-staging-cri-tools/test-image-tags:1", want: "localhost:5000/k8s-staging-cri-tools/test-image-tags:1"},
		{ref: "busybox", want: "localhost:5000/library/busybox:latest"},
		{ref: "localhost:5000/a/b:c", want: "localhost:5000/a/b:c"},
		{ref: "busybox@sha256:" + strings.Repeat("a", 64), wantErr: "digest"},
		{ref: "Bad:Ref", wantErr: "image reference"},
		{ref: "busybox", tag: "no/slash", wantErr: "tag"},
	}
	for _, tc := range tests {
		got, err := r.NameWithTag(tc.ref, tc.tag)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NameWithTag(%q, %q) = %q, %v; want error %q", tc.ref, tc.tag, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NameWithTag(%q, %q) = %q, %v; want %q", tc.ref, tc.tag, got, err, tc.want)
		}
	}
}

// fakeCLI records docker commands and fails those named in fail.
type fakeCLI struct {
	calls []string
	fail  map[string]string // command line -> output of its failure
}

func (f *fakeCLI) Docker(args ...string) (string, error) {
	line := strings.Join(args, " ")
	f.calls = append(f.calls, line)
	if out, ok := f.fail[line]; ok {
		return out, errors.New("exit status 1")
	}
	return "", nil
}

func TestRegistryPushAndUntag(t *testing.T) {
	r, err := NewRegistry(WithRegistryDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	cli := &fakeCLI{fail: map[string]string{
		"image rm localhost:5000/x/gone:1": "Error: No such image: localhost:5000/x/gone:1",
	}}
	names, err := r.Push(t.Context(), cli, "registry.k8s.io/x/a:1", "gcr.io/x/gone:1")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"localhost:5000/x/a:1", "localhost:5000/x/gone:1"}; !slices.Equal(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
	if err := r.PushAs(t.Context(), cli, "registry.k8s.io/x/a:1", "localhost:5000/x/a:latest"); err != nil {
		t.Fatal(err)
	}
	if err := r.PushAs(t.Context(), cli, "registry.k8s.io/x/a:1", "elsewhere:5000/x/a:1"); err == nil {
		t.Error("PushAs to a name outside the registry succeeded")
	}
	want := []string{
		"tag registry.k8s.io/x/a:1 localhost:5000/x/a:1", "push localhost:5000/x/a:1",
		"tag gcr.io/x/gone:1 localhost:5000/x/gone:1", "push localhost:5000/x/gone:1",
		"tag registry.k8s.io/x/a:1 localhost:5000/x/a:latest", "push localhost:5000/x/a:latest",
	}
	if !slices.Equal(cli.calls, want) {
		t.Fatalf("calls\n%q\nwant\n%q", cli.calls, want)
	}
	// An image whose name is already gone is no error.
	cli.calls = nil
	if err := r.Untag(t.Context()); err != nil {
		t.Fatal(err)
	}
	want = []string{"image rm localhost:5000/x/a:1", "image rm localhost:5000/x/gone:1", "image rm localhost:5000/x/a:latest"}
	if !slices.Equal(cli.calls, want) {
		t.Fatalf("untag calls %q, want %q", cli.calls, want)
	}
	cli.calls = nil
	if err := r.Untag(t.Context()); err != nil || len(cli.calls) != 0 {
		t.Errorf("a second Untag: %v, calls %q", err, cli.calls)
	}
}

// A failed push leaves the tag it made for Untag; a failed tag stops the
// push; a failed untag of a present image is reported.
func TestRegistryPushFailures(t *testing.T) {
	r, err := NewRegistry(WithRegistryDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	cli := &fakeCLI{fail: map[string]string{
		"push localhost:5000/x/b:1":                      "connection refused",
		"tag registry.k8s.io/x/c:1 localhost:5000/x/c:1": "No such image: registry.k8s.io/x/c:1",
		"image rm localhost:5000/x/b:1":                  "Error response from daemon: conflict: unable to remove",
	}}
	names, err := r.Push(t.Context(), cli, "registry.k8s.io/x/b:1")
	if err == nil || !strings.Contains(err.Error(), "docker push localhost:5000/x/b:1") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("failed push: names %v, err %v", names, err)
	}
	if _, err := r.Push(t.Context(), cli, "registry.k8s.io/x/c:1"); err == nil || !strings.Contains(err.Error(), "docker tag") {
		t.Fatalf("failed tag: %v", err)
	}
	if slices.Contains(cli.calls, "push localhost:5000/x/c:1") {
		t.Error("pushed after a failed tag")
	}
	cli.calls = nil
	err = r.Untag(t.Context())
	if err == nil || !strings.Contains(err.Error(), "conflict") {
		t.Fatalf("Untag: %v", err)
	}
	if !slices.Equal(cli.calls, []string{"image rm localhost:5000/x/b:1"}) {
		t.Errorf("untag calls %q: want only the tag that was made", cli.calls)
	}
}

func TestRegistryPushHonoursContext(t *testing.T) {
	r, err := NewRegistry(WithRegistryDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	cli := &fakeCLI{}
	if _, err := r.Push(ctx, cli, "registry.k8s.io/x/a:1"); err == nil || len(cli.calls) != 0 {
		t.Errorf("Push on a cancelled context: %v, calls %q", err, cli.calls)
	}
}

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestRegistryStartRefusesBusyAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, err := NewRegistry(WithRegistryDir(t.TempDir()), WithRegistryAddr(l.Addr().String()), WithRegistryBinary("/bin/true"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "not free") {
		t.Fatalf("Start on a busy address: %v", err)
	}
	if r.Pid() != 0 {
		t.Error("Start on a busy address started a process")
	}
}

func TestRegistryStartReportsEarlyExit(t *testing.T) {
	r, err := NewRegistry(WithRegistryDir(t.TempDir()), WithRegistryAddr(freeAddr(t)),
		WithRegistryBinary("/bin/false"), WithRegistryStartTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "exited during start-up") {
		t.Fatalf("Start of /bin/false: %v", err)
	}
	if r.Running() {
		t.Error("Running after an early exit")
	}
}

// With Debian's docker-registry installed (no root needed), a registry
// serves on a free port, answers /v2/ and is gone after Stop.
func TestStartRegistryServes(t *testing.T) {
	if _, err := exec.LookPath(registryComm); err != nil {
		t.Skipf("no %s on PATH (Debian package docker-registry)", registryComm)
	}
	r := StartRegistry(t, WithRegistryAddr(freeAddr(t)))
	resp, err := http.Get(r.URL() + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !r.Running() {
		t.Fatalf("GET /v2/: %s, running %v", resp.Status, r.Running())
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
	if r.Running() {
		t.Error("Running after Stop")
	}
	if l, err := net.Listen("tcp", r.Addr()); err != nil {
		t.Errorf("the address is still held after Stop: %v", err)
	} else {
		l.Close()
	}
}

func TestStopPackageRegistry(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "docker-registry.pid")
	if pid, err := StopPackageRegistry(pidFile); pid != 0 || err != nil {
		t.Errorf("no pid file: %d, %v", pid, err)
	}
	if err := os.WriteFile(pidFile, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := StopPackageRegistry(pidFile); err == nil {
		t.Error("a pid file without a PID is no error")
	}

	// sleep under the service's name (comm comes from the executed name),
	// and a plain sleep that the pid file names later: that one must stay.
	bin := filepath.Join(dir, registryComm)
	if err := os.Symlink("/bin/sleep", bin); err != nil {
		t.Fatal(err)
	}
	start := func(name string) *exec.Cmd {
		cmd := exec.Command(name, "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	other := start("/bin/sleep")
	if err := os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", other.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, err := StopPackageRegistry(pidFile); pid != 0 || err != nil {
		t.Errorf("a PID of another program: %d, %v", pid, err)
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("another program was signalled: %v", err)
	}

	svc := start(bin)
	if !Eventually(5*time.Second, func() bool { return procAlive("/proc", svc.Process.Pid, registryComm) }) {
		t.Fatal("the fake service does not show as docker-registry")
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(svc.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	pid, err := StopPackageRegistry(pidFile)
	if err != nil || pid != svc.Process.Pid {
		t.Fatalf("StopPackageRegistry = %d, %v; want %d", pid, err, svc.Process.Pid)
	}
	if procAlive("/proc", pid, registryComm) {
		t.Error("the service still runs")
	}
	if _, err := os.Stat(pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid file left: %v", err)
	}
}
