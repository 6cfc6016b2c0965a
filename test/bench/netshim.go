package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// netshimProc is the netshim daemon under test, run as a child process.
type netshimProc struct {
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{}
	waitErr error
}

// startNetshim starts bin with args, its output going to logPath. The
// child gets its own process group, so that a Ctrl-C meant for the bench
// reaches the bench only, which then removes the pods through netshim
// before stopping it; if the bench dies, the child gets SIGTERM.
func startNetshim(bin string, args []string, logPath string) (*netshimProc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &netshimProc{cmd: cmd, logPath: logPath, logFile: f, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *netshimProc) pid() int { return p.cmd.Process.Pid }

func (p *netshimProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to timeout before SIGKILL.
func (p *netshimProc) stop(timeout time.Duration) error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		var ee *exec.ExitError
		if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
			return p.waitErr
		}
		if ee != nil {
			return fmt.Errorf("netshim exited after SIGTERM: %v", p.waitErr)
		}
		return nil
	case <-time.After(timeout):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("netshim did not exit within %s of SIGTERM; killed it", timeout)
}

// rssBytes reads the resident set size of the process from /proc.
func rssBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			fields := strings.Fields(v)
			if len(fields) != 2 || fields[1] != "kB" {
				return 0, fmt.Errorf("unexpected VmRSS line %q", s.Text())
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			return kb * 1024, err
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// logTail returns the last n lines of the netshim log.
func (p *netshimProc) logTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitForCRI waits (at most timeout) until the process accepts connections
// on sock and answers CRI Version, and returns a client. The socket is
// polled with plain dials first: gRPC's reconnect backoff would otherwise
// stretch the wait after an early failure.
func waitForCRI(ctx context.Context, p *netshimProc, sock string, timeout time.Duration) (*grpc.ClientConn, *runtimeapi.VersionResponse, error) {
	deadline := time.Now().Add(timeout)
	for {
		if p.exited() {
			return nil, nil, fmt.Errorf("netshim exited before serving (%v); last log lines:\n%s", p.waitErr, p.logTail(30))
		}
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("netshim does not listen on %s after %s; last log lines:\n%s", sock, timeout, p.logTail(30))
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return nil, nil, err
		}
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	vctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	v, err := runtimeapi.NewRuntimeServiceClient(conn).Version(vctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("CRI Version: %w; last log lines:\n%s", err, p.logTail(30))
	}
	return conn, v, nil
}

// runLabel is the CRI label that marks the pods of one bench run, so that
// cleanup never touches anyone else's pods on the same engine.
const runLabel = "netshim.bench/run"

// podConfig is a sandbox config shaped like kubelet's for an ordinary pod
// without host ports.
func (b *bench) podConfig(name string) *runtimeapi.PodSandboxConfig {
	uid := newUID()
	ns := b.namespace
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid, Attempt: 0},
		Hostname:     name,
		LogDirectory: filepath.Join(b.dir, "pods", ns+"_"+name+"_"+uid),
		DnsConfig: &runtimeapi.DNSConfig{
			Servers:  []string{"10.96.0.10"},
			Searches: []string{ns + ".svc.cluster.local", "svc.cluster.local", "cluster.local"},
			Options:  []string{"ndots:5"},
		},
		Labels: map[string]string{
			"io.kubernetes.pod.name":      name,
			"io.kubernetes.pod.namespace": ns,
			"io.kubernetes.pod.uid":       uid,
			"app":                         "bench",
			runLabel:                      b.runID,
		},
		Annotations: map[string]string{
			"kubernetes.io/config.seen":   time.Now().UTC().Format(time.RFC3339Nano),
			"kubernetes.io/config.source": "api",
		},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
}

// newUID returns a random UUID-shaped string, as pod UIDs are.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
