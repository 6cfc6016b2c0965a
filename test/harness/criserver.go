package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criServer is what every CRI runtime the test world runs as a child
// process (netshim, cri-dockerd) has in common: the process of its last
// start, the client of its socket and its Version answer, the wait for it
// to serve, and the stop. Netshim and CRIDockerd embed it and add their
// own options, arguments and checks.
type criServer struct {
	name    string // in messages: "netshim", "cri-dockerd"
	sock    string
	logPath string

	mu      sync.Mutex
	proc    *proc // of the last start
	cri     *CRI
	version *runtimeapi.VersionResponse
	starts  int
}

// start runs cmd with its output appended to the log (truncated at the
// first start if truncateFirst), unless a process of this server still
// runs, and waits up to timeout for it to serve. A process that does not
// serve in time is left running: the caller decides.
func (s *criServer) start(ctx context.Context, cmd *exec.Cmd, truncateFirst bool, timeout time.Duration) (*proc, error) {
	s.mu.Lock()
	if s.proc != nil && !s.proc.exited() {
		s.mu.Unlock()
		return nil, fmt.Errorf("%s is already running", s.name)
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if truncateFirst && s.starts == 0 {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(s.logPath, flags, 0o644)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	fmt.Fprintf(f, "==== harness: starting %s at %s ====\n", s.name, time.Now().Format(time.RFC3339Nano))
	p, err := startProc(cmd, f)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.proc, s.cri, s.version = p, nil, nil
	s.starts++
	s.mu.Unlock()
	return p, s.waitServing(ctx, p, timeout)
}

// waitServing polls the socket with plain dials first (gRPC's reconnect
// backoff would stretch the wait after an early failed dial, and a socket
// file left by an earlier run may be there before the server replaces
// it), then waits for CRI Version.
func (s *criServer) waitServing(ctx context.Context, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	listening := EventuallyCtx(ctx, timeout, func() bool {
		if p.exited() {
			return true
		}
		c, err := net.DialTimeout("unix", s.sock, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	if p.exited() {
		return fmt.Errorf("%s exited during start-up: %v\n%s", s.name, p.exitErr(), tail(s.logPath, 15))
	}
	if !listening {
		return fmt.Errorf("%s did not listen on %s within %s (%v)", s.name, s.sock, timeout, ctx.Err())
	}
	cri, err := DialCRI(s.sock)
	if err != nil {
		return err
	}
	vctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	v, err := cri.Runtime.Version(vctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
	if err != nil {
		cri.Conn.Close()
		return fmt.Errorf("CRI Version on %s: %w", s.sock, err)
	}
	s.mu.Lock()
	s.cri, s.version = cri, v
	s.mu.Unlock()
	return nil
}

// stop closes the client and, if the process runs, sends sig and waits
// (at most timeout, then SIGKILL, which is an error). It returns the
// process it stopped, nil when none was running.
func (s *criServer) stop(sig syscall.Signal, timeout time.Duration) (*proc, error) {
	s.mu.Lock()
	p, cri := s.proc, s.cri
	s.cri = nil
	s.mu.Unlock()
	if cri != nil {
		cri.Conn.Close()
	}
	if p == nil || p.exited() {
		return nil, nil
	}
	return p, p.stop(s.name, sig, timeout)
}

// CRI is the client of the running server; nil when it is not running.
// It is closed when the server is stopped: a client that must outlive
// restarts makes its own with DialCRI.
func (s *criServer) CRI() *CRI {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cri
}

// Version is the CRI Version answer of the last start.
func (s *criServer) Version() *runtimeapi.VersionResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Pid is the process ID of the last start (0 before any).
func (s *criServer) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid()
}

// Running says whether the process started last has not exited.
func (s *criServer) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Exited says whether a process was started and has exited.
func (s *criServer) Exited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && s.proc.exited()
}

// WaitErr is the exit status of the last process, once it exited.
func (s *criServer) WaitErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	return s.proc.exitErr()
}
