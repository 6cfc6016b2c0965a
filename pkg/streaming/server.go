// Package streaming serves the CRI streaming sessions (exec, attach,
// port-forward) of netshim's pods over a Docker engine.
//
// The CRI Exec, Attach and PortForward RPCs only return a URL; the client
// (kubelet, which proxies kubectl's session, or crictl) then opens that URL
// and speaks SPDY or WebSocket to it. The HTTP side — request cache,
// single-use tokens, protocol negotiation, stream multiplexing, status
// reporting — is k8s.io/cri-streaming's server; this package supplies the
// Runtime it drives (Docker exec/attach, and dials into the pod's network
// namespace) and a Server that owns the listener.
package streaming

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criserver "k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/klog/v2"
)

// DefaultAddr is where the server listens unless told otherwise: loopback
// only, on a port the kernel picks, as containerd does by default. kubelet
// runs on the same node and proxies every session to the URL it is given,
// so nothing outside the node needs to reach it; and the server has no
// authentication besides the single-use, short-lived token in the URL.
const DefaultAddr = "127.0.0.1:0"

// Config configures a Server.
type Config struct {
	// Addr is the host:port to listen on; port 0 picks a free port.
	Addr string
	// StreamIdleTimeout closes a session idle this long (default 4h, as
	// kubelet and containerd).
	StreamIdleTimeout time.Duration
	// StreamCreationTimeout bounds how long a client may take to open its
	// streams after connecting (default 30s).
	StreamCreationTimeout time.Duration
}

// Server is netshim's streaming server: the library's HTTP handler on a
// listener of its own, with the Docker runtime behind it.
type Server struct {
	cfg     Config
	runtime *Runtime

	mu      sync.Mutex
	lib     criserver.Server // set by Start
	baseURL string
	httpSrv *http.Server
	conns   *connTracker
	served  chan struct{}
	stopped bool
}

// New builds a server; it does not listen until Start.
func New(cfg Config, docker DockerAPI, netnsOf NetNSFunc) (*Server, error) {
	if docker == nil || netnsOf == nil {
		return nil, errors.New("streaming: a Docker client and a netns lookup are required")
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("streaming address %q: want host:port: %w", cfg.Addr, err)
	}
	if cfg.StreamIdleTimeout == 0 {
		cfg.StreamIdleTimeout = criserver.DefaultConfig.StreamIdleTimeout
	}
	if cfg.StreamCreationTimeout == 0 {
		cfg.StreamCreationTimeout = criserver.DefaultConfig.StreamCreationTimeout
	}
	return &Server{cfg: cfg, runtime: NewRuntime(docker, netnsOf)}, nil
}

// Start listens on the configured address and serves in the background.
// The URLs handed out name the address actually bound (so port 0 works);
// for an unspecified host (0.0.0.0, ::) they name loopback, which is
// where kubelet, on the same node, reaches it.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lib != nil || s.stopped {
		return errors.New("streaming: server already started or stopped")
	}
	lis, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("streaming: listening on %s: %w", s.cfg.Addr, err)
	}
	bound := lis.Addr().(*net.TCPAddr)
	urlHost := bound.IP
	if urlHost.IsUnspecified() {
		// Go binds "0.0.0.0" and "" dual-stack, reported as [::]: the
		// configured host says which loopback to name.
		urlHost = net.IPv4(127, 0, 0, 1)
		if h, _, _ := net.SplitHostPort(s.cfg.Addr); strings.Contains(h, ":") {
			urlHost = net.IPv6loopback
		}
	}
	libCfg := criserver.DefaultConfig
	libCfg.Addr = lis.Addr().String()
	libCfg.BaseURL = &url.URL{Scheme: "http", Host: net.JoinHostPort(urlHost.String(), fmt.Sprint(bound.Port))}
	libCfg.StreamIdleTimeout = s.cfg.StreamIdleTimeout
	libCfg.StreamCreationTimeout = s.cfg.StreamCreationTimeout
	lib, err := criserver.NewServer(libCfg, s.runtime)
	if err != nil {
		lis.Close()
		return fmt.Errorf("streaming: %w", err)
	}
	s.lib = lib
	s.baseURL = libCfg.BaseURL.String()
	s.conns = newConnTracker()
	s.httpSrv = &http.Server{Handler: lib, ReadHeaderTimeout: 30 * time.Second, ConnContext: connContext}
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		if err := s.httpSrv.Serve(s.conns.listener(lis)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Streaming server stopped")
		}
	}()
	if !bound.IP.IsLoopback() {
		klog.InfoS("WARNING: the streaming server listens beyond loopback; it has no authentication besides the single-use tokens in its URLs", "address", lis.Addr().String())
	}
	klog.InfoS("Serving CRI streaming (exec, attach, port-forward)", "address", lis.Addr().String(), "url", libCfg.BaseURL.String())
	return nil
}

// URL is the base URL of the session URLs handed out ("" before Start).
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.baseURL
}

// Stop closes the listener and ends every open session: running execs and
// attaches are detached (their processes keep running, as with docker
// exec/attach), forwarded connections are closed.
func (s *Server) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	httpSrv, conns, served := s.httpSrv, s.conns, s.served
	s.mu.Unlock()

	s.runtime.stopAll()
	if httpSrv == nil {
		return
	}
	_ = httpSrv.Close()
	// Upgraded (hijacked) connections are no longer the http.Server's.
	conns.closeAll()
	<-served
}

func (s *Server) started() (criserver.Server, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, status.Error(codes.Unavailable, "the streaming server is stopped")
	}
	if s.lib == nil {
		return nil, status.Error(codes.Unavailable, "the streaming server is not started")
	}
	return s.lib, nil
}

// GetExec validates and caches an exec request and returns the URL the
// client opens to run it. The token in the URL is single-use and expires
// after a minute.
func (s *Server) GetExec(req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	lib, err := s.started()
	if err != nil {
		return nil, err
	}
	return lib.GetExec(req)
}

// GetAttach is GetExec for attach requests.
func (s *Server) GetAttach(req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	lib, err := s.started()
	if err != nil {
		return nil, err
	}
	return lib.GetAttach(req)
}

// GetPortForward is GetExec for port-forward requests.
func (s *Server) GetPortForward(req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	lib, err := s.started()
	if err != nil {
		return nil, err
	}
	return lib.GetPortForward(req)
}

// connTracker remembers the server's open connections so Stop can close
// those the HTTP server has handed over to the streaming protocols.
type connTracker struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func newConnTracker() *connTracker { return &connTracker{conns: map[*trackedConn]struct{}{}} }

func (t *connTracker) listener(l net.Listener) net.Listener { return &trackingListener{l, t} }

func (t *connTracker) closeAll() {
	t.mu.Lock()
	conns := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

type trackingListener struct {
	net.Listener
	t *connTracker
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: l.t}
	tc.gone, tc.markGone = context.WithCancelCause(context.Background())
	l.t.mu.Lock()
	l.t.conns[tc] = struct{}{}
	l.t.mu.Unlock()
	return tc, nil
}

// errClientGone is the cause of a session's end when its connection
// ended under it.
var errClientGone = errors.New("the client's connection closed")

// trackedConn is a client connection that also tells when the client has
// gone. Once a session's connection is hijacked, the HTTP server no
// longer watches it, and the streaming library, which does, ends the
// session's streams without telling the runtime: a command that neither
// reads stdin nor writes output would run on unnoticed. The end of the
// connection (a failed read, or its close) cancels the context of the
// requests made on it (see connContext), which the runtime's sessions
// derive from.
type trackedConn struct {
	net.Conn
	t    *connTracker
	once sync.Once
	// gone is cancelled, with errClientGone, when the connection ends.
	gone     context.Context
	markGone context.CancelCauseFunc
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	// A timeout is not the end: the HTTP server interrupts its own
	// pending read with a past deadline when a handler hijacks the
	// connection.
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.markGone(errClientGone)
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	c.markGone(errClientGone)
	return c.Conn.Close()
}

// connContext is the HTTP server's ConnContext: requests on a connection
// get a context that ends when the connection does.
func connContext(ctx context.Context, c net.Conn) context.Context {
	tc, ok := c.(*trackedConn)
	if !ok {
		return ctx
	}
	ctx, cancel := context.WithCancelCause(ctx)
	// Never unregistered: gone ends with the connection at the latest.
	context.AfterFunc(tc.gone, func() { cancel(context.Cause(tc.gone)) })
	return ctx
}
