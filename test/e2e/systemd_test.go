//go:build e2e

package e2e

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// watchdogUSec is the WATCHDOG_USEC the test gives netshim: a ping every
// half second.
const watchdogUSec = "1000000"

// TestSystemdSocketActivationAndNotify runs netshim as netshim.socket and
// netshim.service do, without a systemd PID 1: systemd-socket-activate
// holds the socket and execs netshim on the first connection with it as
// fd 3 (LISTEN_FDS), and NOTIFY_SOCKET is a datagram socket of the test's.
// Docker is reachable only through a proxy the test opens late, so the
// test sees netshim wait for it:
//   - the client whose connection started netshim is not answered while
//     netshim waits for Docker (STATUS= says why), and watchdog pings keep
//     coming meanwhile: a Docker that is down is not a stuck loop;
//   - once Docker answers, READY=1 (with a "Serving CRI" status) arrives
//     and that early client gets its Version and ListPodSandbox answers;
//   - WATCHDOG=1 keeps coming while it serves;
//   - SIGTERM brings STOPPING=1 and exit status 0, and the socket file,
//     systemd's, is left where it was.
func TestSystemdSocketActivationAndNotify(t *testing.T) {
	cfg := requireConfig(t)
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Fatalf("systemd-socket-activate is not in PATH (Debian's systemd package has it): %v", err)
	}
	// "nse2e": the prefix leak-audit.sh --e2e-tmp looks for; short, for
	// the socket paths.
	dir, err := os.MkdirTemp("", "nse2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "netshim.sock")
	notifyPath := filepath.Join(dir, "notify")
	proxyPath := filepath.Join(dir, "docker.sock")
	notify := harness.ListenNotify(t, notifyPath)

	n, err := harness.NewNetshim(harness.WithBinary(cfg.netshim), harness.WithDir(dir), harness.WithSocket(sock),
		harness.WithCNIBinDir(cfg.cniBinDir), harness.WithDockerEndpoint("unix://"+proxyPath),
		harness.WithArgs("--network-plugin=none"))
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(n.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	// No --accept: one netshim, exec'd (same PID) on the first
	// connection, with the listening socket as fd 3. Only PATH, HOME,
	// TERM and the -E variables reach it, as with systemd.
	args := append([]string{"-l", sock, "-E", "NOTIFY_SOCKET=" + notifyPath, "-E", "WATCHDOG_USEC=" + watchdogUSec, cfg.netshim}, n.Args()...)
	cmd := exec.Command(activate, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatal(err)
	}
	// exited is closed once the process is gone; waitErr is then its
	// exit status.
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		log.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
		// netshim never unmounts its netns dir; the dir goes with dir.
		if err := n.UnmountNetNSDir(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if t.Failed() {
			t.Logf("notifications: %q\n%s", notify.Received(), n.LogTail(60))
		}
	})
	if !poll(startDeadline, func() bool { _, err := os.Stat(sock); return err == nil }) {
		t.Fatalf("systemd-socket-activate did not listen on %s\n%s", sock, n.LogTail(20))
	}

	// The early client: its connection is what starts netshim.
	cri, err := harness.DialCRI(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cri.Conn.Close()
	type answer struct {
		version *runtimeapi.VersionResponse
		pods    *runtimeapi.ListPodSandboxResponse
		err     error
	}
	answered := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
		defer cancel()
		var a answer
		a.version, a.err = cri.Runtime.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
		if a.err == nil {
			a.pods, a.err = cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		}
		answered <- a
	}()
	notAnswered := func(when string) {
		t.Helper()
		select {
		case a := <-answered:
			t.Fatalf("the early client was answered %s (READY=1 not sent yet): %+v", when, a)
		default:
		}
	}

	notify.Wait(t, startDeadline, "the start-up status", func(s string) bool {
		return s == "STATUS=Reading the state of Docker at unix://"+proxyPath
	})
	notify.Wait(t, startDeadline, "the status saying netshim waits for Docker", func(s string) bool {
		return strings.HasPrefix(s, "STATUS=Waiting for Docker at unix://"+proxyPath+": ")
	})
	for i := range 2 {
		notify.Wait(t, startDeadline, "a watchdog ping while Docker is unreachable", func(s string) bool { return s == "WATCHDOG=1" })
		notAnswered("while netshim waited for Docker (ping " + strconv.Itoa(i+1) + ")")
	}
	for _, s := range notify.Received() {
		if strings.Contains(s, "READY=1") {
			t.Fatalf("READY=1 before Docker was reachable: %q", s)
		}
	}

	// Docker comes: READY=1, then the early client's answers.
	startUnixProxy(t, proxyPath, dockerSocket())
	ready := notify.Wait(t, startDeadline, "READY=1", func(s string) bool { return strings.HasPrefix(s, "READY=1\n") })
	if want := "STATUS=Serving CRI on " + sock + " (passed by systemd); "; !strings.Contains(ready, want) {
		t.Errorf("READY notification %q does not say %q", ready, want)
	}
	select {
	case a := <-answered:
		if a.err != nil {
			t.Fatalf("the early client after READY=1: %v", a.err)
		}
		if a.version.GetRuntimeVersion() == "" || a.pods == nil {
			t.Errorf("the early client's answers: %+v, %+v", a.version, a.pods)
		}
		t.Logf("the early client got %s %s and %d sandboxes after READY=1", a.version.GetRuntimeName(), a.version.GetRuntimeVersion(), len(a.pods.GetItems()))
	case <-time.After(rpcDeadline):
		t.Fatal("the early client was not answered after READY=1")
	}
	for range 2 {
		notify.Wait(t, startDeadline, "a watchdog ping while serving", func(s string) bool { return s == "WATCHDOG=1" })
	}
	if logged, _ := os.ReadFile(n.LogPath); !strings.Contains(string(logged), "Using the CRI socket the service manager passed") {
		t.Errorf("netshim's log does not say it serves the passed socket")
	}

	// Stop, as systemctl stop does.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	notify.Wait(t, stopDeadline, "STOPPING=1", func(s string) bool { return strings.HasPrefix(s, "STOPPING=1\n") })
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("netshim exited with %v after SIGTERM, want 0", waitErr)
		}
	case <-time.After(stopDeadline):
		t.Fatalf("netshim did not exit within %s of SIGTERM", stopDeadline)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the passed socket %s after netshim stopped: %v, %v; want it left to its owner", sock, fi, err)
	}
}

// dockerSocket is the path of the engine under test's socket.
func dockerSocket() string {
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		return strings.TrimPrefix(h, "unix://")
	}
	return "/var/run/docker.sock"
}

// startUnixProxy forwards connections to path to target until the test
// ends: a Docker endpoint the test opens when it chooses.
func startUnixProxy(t *testing.T, path, target string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("unix", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				io.Copy(dst, src)
				// Either side ending ends the pair.
				dst.Close()
				src.Close()
			}
			go pipe(in, out)
			go pipe(out, in)
		}
	}()
}
