package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCRIDockerdArgs(t *testing.T) {
	t.Setenv("CRI_DOCKERD_BIN", "/bin/cri-dockerd")
	t.Setenv("CNI_BIN_DIR", "")
	t.Setenv("DOCKER_HOST", "")
	dir := t.TempDir()

	d, err := NewCRIDockerd(WithCRIDockerdDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--container-runtime-endpoint", "unix://" + filepath.Join(dir, "cri-dockerd.sock"),
		"--cri-dockerd-root-directory", filepath.Join(dir, "root"),
		"--network-plugin", "cni",
		"--cni-conf-dir", filepath.Join(dir, "net.d"),
		"--cni-bin-dir", "/usr/lib/cni",
		"--cni-cache-dir", filepath.Join(dir, "cnicache"),
		"--pod-infra-container-image", DefaultPauseImage,
		"--streaming-bind-addr", "127.0.0.1",
		"--log-level", "info",
	}
	if got := d.Args(); !slices.Equal(got, want) {
		t.Errorf("default args:\n got %q\nwant %q", got, want)
	}
	for _, sub := range []string{"root", "net.d", "cnicache"} {
		if fi, err := os.Stat(filepath.Join(dir, sub)); err != nil || !fi.IsDir() {
			t.Errorf("%s not created: %v", sub, err)
		}
	}
	if d.CheckpointDir() != filepath.Join(dir, "root", "sandbox") {
		t.Errorf("CheckpointDir = %s", d.CheckpointDir())
	}

	other := t.TempDir()
	d, err = NewCRIDockerd(
		WithCRIDockerdBinary("/opt/cri-dockerd"),
		WithCRIDockerdDir(dir),
		WithCRIDockerdSocket(filepath.Join(other, "s.sock")),
		WithCRIDockerdRootDir(filepath.Join(other, "cri-dockerd")),
		WithCRIDockerdDockerEndpoint("unix:///tmp/d/docker.sock"),
		WithCRIDockerdCNIConfDir(filepath.Join(other, "conf")),
		WithCRIDockerdCNIBinDir("/a,/b"),
		WithCRIDockerdCNICacheDir(filepath.Join(other, "cache")),
		WithCRIDockerdPauseImage("example.test/pause:1"),
		WithCRIDockerdNetworkPlugin("kubenet"),
		WithCRIDockerdLog(filepath.Join(other, "logs", "c.log")),
		WithCRIDockerdLogLevel("debug"),
		WithCRIDockerdArgs("--log-level", "warn"),
	)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{
		"--container-runtime-endpoint", "unix://" + filepath.Join(other, "s.sock"),
		"--cri-dockerd-root-directory", filepath.Join(other, "cri-dockerd"),
		"--network-plugin", "kubenet",
		"--cni-conf-dir", filepath.Join(other, "conf"),
		"--cni-bin-dir", "/a,/b",
		"--cni-cache-dir", filepath.Join(other, "cache"),
		"--pod-infra-container-image", "example.test/pause:1",
		"--streaming-bind-addr", "127.0.0.1",
		"--log-level", "debug",
		"--docker-endpoint", "unix:///tmp/d/docker.sock",
		"--log-level", "warn",
	}
	if got := d.Args(); !slices.Equal(got, want) {
		t.Errorf("args:\n got %q\nwant %q", got, want)
	}
	if d.LogPath != filepath.Join(other, "logs", "c.log") || d.RootDir != filepath.Join(other, "cri-dockerd") {
		t.Errorf("paths: log %s root %s", d.LogPath, d.RootDir)
	}
	if fi, err := os.Stat(filepath.Join(other, "logs")); err != nil || !fi.IsDir() {
		t.Errorf("the log's directory was not created: %v", err)
	}

	// The environment's engine and CNI plugins are the defaults.
	t.Setenv("DOCKER_HOST", "unix:///run/e.sock")
	t.Setenv("CNI_BIN_DIR", "/cni")
	d, err = NewCRIDockerd(WithCRIDockerdDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(d.Args(), " ")
	if !strings.Contains(args, "--docker-endpoint unix:///run/e.sock") || !strings.Contains(args, "--cni-bin-dir /cni ") {
		t.Errorf("args ignore DOCKER_HOST or CNI_BIN_DIR: %s", args)
	}
}

func TestCRIDockerdOptionErrors(t *testing.T) {
	t.Setenv("CRI_DOCKERD_BIN", "")
	for _, tc := range []struct {
		name string
		opts []CRIDockerdOption
		want string
	}{
		{name: "no binary", want: "no cri-dockerd binary"},
		{name: "relative root", opts: []CRIDockerdOption{WithCRIDockerdBinary("/x"), WithCRIDockerdRootDir("root")}, want: `root dir "root" is not an absolute path`},
		{name: "relative bin dir", opts: []CRIDockerdOption{WithCRIDockerdBinary("/x"), WithCRIDockerdCNIBinDir("/a,b")}, want: `CNI bin dir "b"`},
		{name: "log level", opts: []CRIDockerdOption{WithCRIDockerdBinary("/x"), WithCRIDockerdLogLevel("4")}, want: `log level "4"`},
		{name: "network plugin", opts: []CRIDockerdOption{WithCRIDockerdBinary("/x"), WithCRIDockerdNetworkPlugin("")}, want: "network plugin"},
		{name: "timeouts", opts: []CRIDockerdOption{WithCRIDockerdBinary("/x"), WithCRIDockerdTimeouts(0, time.Second)}, want: "timeouts must be positive"},
		{name: "long socket", opts: []CRIDockerdOption{WithCRIDockerdBinary("/x"), WithCRIDockerdDir(t.TempDir()),
			WithCRIDockerdSocket("/" + strings.Repeat("s", 120))}, want: "too long for a unix socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := NewCRIDockerd(tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewCRIDockerd: %v, %v; want an error with %q", d, err, tc.want)
			}
		})
	}
}

// fakeCRIDockerdEnv makes this test binary act as cri-dockerd (see
// TestFakeCRIDockerdProcess): serve, exit or ignore-term.
const fakeCRIDockerdEnv = "HARNESS_FAKE_CRI_DOCKERD"

type fakeCRIDockerdRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (fakeCRIDockerdRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "docker", RuntimeVersion: "20.10.24", RuntimeApiVersion: "v1"}, nil
}

// TestFakeCRIDockerdProcess is not a test: run as a fake cri-dockerd
// (through the script fakeCRIDockerd writes), it serves CRI Version on
// its --container-runtime-endpoint and exits 0 on SIGTERM, as cri-dockerd
// does.
func TestFakeCRIDockerdProcess(t *testing.T) {
	mode := os.Getenv(fakeCRIDockerdEnv)
	if mode == "" {
		t.Skip("the fake cri-dockerd of TestCRIDockerdStartStop, not a test")
	}
	if mode == "exit" {
		fmt.Println("level=fatal msg=\"fake cri-dockerd fails on purpose\"")
		os.Exit(1)
	}
	var sock string
	for i, a := range os.Args {
		if a == "--container-runtime-endpoint" && i+1 < len(os.Args) {
			sock = strings.TrimPrefix(os.Args[i+1], "unix://")
		}
	}
	terms := make(chan os.Signal, 1)
	if mode == "ignore-term" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(terms, syscall.SIGTERM)
	}
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		os.Exit(2)
	}
	s := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(s, fakeCRIDockerdRuntime{})
	go func() { _ = s.Serve(l) }()
	<-terms
	os.Exit(0)
}

func fakeCRIDockerd(t *testing.T, mode string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cri-dockerd")
	script := fmt.Sprintf("#!/bin/sh\nexec env %s=%s %q -test.run='^TestFakeCRIDockerdProcess$' -- \"$@\"\n", fakeCRIDockerdEnv, mode, self)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCRIDockerdStartStop(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		opts    []CRIDockerdOption
		wantErr string // from Start
		stopErr string
	}{
		{mode: "serve"},
		{mode: "exit", wantErr: "cri-dockerd exited during start-up"},
		{mode: "ignore-term", opts: []CRIDockerdOption{WithCRIDockerdTimeouts(10*time.Second, 200*time.Millisecond)},
			stopErr: "did not exit within 200ms"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "nscridt")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			d, err := NewCRIDockerd(append([]CRIDockerdOption{WithCRIDockerdBinary(fakeCRIDockerd(t, tc.mode)),
				WithCRIDockerdDir(dir)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = d.Start(ctx)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Start: %v, want %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), "fails on purpose") {
					t.Errorf("the error lacks the log's tail: %v", err)
				}
				if d.Running() {
					t.Error("cri-dockerd left running after a failed Start")
				}
				return
			}
			if err != nil {
				t.Fatalf("Start: %v\n%s", err, d.LogTail(20))
			}
			if !d.Running() || d.Pid() == 0 || d.CRI() == nil || d.Version().GetRuntimeVersion() != "20.10.24" {
				t.Fatalf("after Start: running %v pid %d cri %v version %v", d.Running(), d.Pid(), d.CRI(), d.Version())
			}
			if err := d.Start(ctx); err == nil || !strings.Contains(err.Error(), "already running") {
				t.Errorf("second Start: %v, want already running", err)
			}
			err = d.Stop()
			if tc.stopErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.stopErr) {
					t.Fatalf("Stop: %v, want %q", err, tc.stopErr)
				}
			} else if err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if d.Running() || d.CRI() != nil {
				t.Errorf("after Stop: running %v, client %v", d.Running(), d.CRI())
			}
			if err := d.Stop(); err != nil {
				t.Errorf("second Stop: %v", err)
			}
			// The log holds both the harness's marker and the process's output.
			data, _ := os.ReadFile(d.LogPath)
			if !strings.Contains(string(data), "==== harness: starting cri-dockerd") {
				t.Errorf("log %s lacks the start marker: %q", d.LogPath, data)
			}
			// It starts again on the same directories.
			if tc.stopErr == "" {
				if err := d.Start(ctx); err != nil {
					t.Fatalf("restart: %v", err)
				}
				if err := d.Remove(); err != nil {
					t.Fatalf("Remove: %v", err)
				}
			}
		})
	}
}

// TestCRIDockerdOwnDir: without WithCRIDockerdDir the CRIDockerd makes
// a temp dir and Remove deletes it.
func TestCRIDockerdOwnDir(t *testing.T) {
	d, err := NewCRIDockerd(WithCRIDockerdBinary("/x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.RootDir); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Dir); !os.IsNotExist(err) {
		t.Errorf("own dir %s still there after Remove: %v", d.Dir, err)
	}
}
