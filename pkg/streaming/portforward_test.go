package streaming

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// hostNetNS is the network namespace the test binary started in. It is
// read in TestMain, before any test switches a thread: /proc/self/ns/net
// would not do, as it names the main thread's netns, and the main thread
// can be the one a test goroutine left locked in a test netns (the Go
// runtime then parks it rather than ending it).
var hostNetNS netns.NsHandle = -1

func TestMain(m *testing.M) {
	if h, err := netns.Get(); err == nil {
		hostNetNS = h
	}
	os.Exit(m.Run())
}

// requireRoot skips tests that switch network namespaces.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("entering a network namespace needs root (CAP_SYS_ADMIN)")
	}
}

// podNetNS makes a network namespace with loopback up, standing in for a
// pod's, and returns its path. It is deleted with the test.
func podNetNS(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("nstest-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	errc := make(chan error, 1)
	go func() {
		// NewNamed switches the calling thread: this goroutine ends
		// locked, so its thread is discarded.
		runtime.LockOSThread()
		h, err := netns.NewNamed(name)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("creating network namespace %s: %v", name, err)
	}
	t.Cleanup(func() { _ = netns.DeleteNamed(name) })
	return "/var/run/netns/" + name
}

// listenIn listens on 127.0.0.1:port inside the netns at path (port 0
// picks one) and serves each connection with serve.
func listenIn(t *testing.T, path string, port int, serve func(net.Conn)) int {
	t.Helper()
	type res struct {
		l   net.Listener
		err error
	}
	rc := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		target, err := netns.GetFromPath(path)
		if err != nil {
			rc <- res{nil, err}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			rc <- res{nil, err}
			return
		}
		// Ends locked: the thread stays in the test netns and dies.
		l, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		rc <- res{l, err}
	}()
	r := <-rc
	if r.err != nil {
		t.Fatalf("listening in %s: %v", path, r.err)
	}
	t.Cleanup(func() { r.l.Close() })
	go acceptLoop(r.l, serve)
	return r.l.Addr().(*net.TCPAddr).Port
}

func acceptLoop(l net.Listener, serve func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			serve(c)
		}()
	}
}

// greeter answers every line with its reply and a prefix.
func greeter(prefix string) func(net.Conn) {
	return func(c net.Conn) {
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			fmt.Fprintf(c, "%s %s\n", prefix, sc.Text())
		}
	}
}

// pfStream is the client's side of a port-forward stream: what the test
// writes goes to the pod, what the pod answers is collected.
type pfStream struct {
	io.Reader // from the client
	mu        sync.Mutex
	got       strings.Builder
	closed    bool
}

func (s *pfStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got.Write(p)
}

func (s *pfStream) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

func (s *pfStream) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got.String()
}

func netnsIs(path string) NetNSFunc {
	return func(_ context.Context, id string) (string, error) {
		if id != "pod1" {
			return "", fmt.Errorf("pod sandbox %s not found", id)
		}
		return path, nil
	}
}

func TestPortForwardDialsInsideThePodNetNS(t *testing.T) {
	requireRoot(t)
	pod := podNetNS(t)
	port := listenIn(t, pod, 0, greeter("pod"))
	// The same port on the host's loopback answers differently: the
	// forward must reach the pod's.
	hostL, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err == nil {
		t.Cleanup(func() { hostL.Close() })
		go acceptLoop(hostL, greeter("host"))
	}

	r := NewRuntime(newFakeDocker(t), netnsIs(pod))
	t.Cleanup(r.stopAll)
	// The client sends a line and half-closes; the pod answers, then
	// closes because its input ended; the forward then returns.
	s := &pfStream{Reader: strings.NewReader("hello\n")}
	err = runWithin(t, 10*time.Second, "PortForward", func() error {
		return r.PortForward(context.Background(), "pod1", int32(port), s)
	})
	if err != nil {
		t.Fatalf("PortForward: %v", err)
	}
	if got := s.String(); got != "pod hello\n" {
		t.Fatalf("the forward got %q, want %q (from the pod's netns)", got, "pod hello\n")
	}

	// A port only the host listens on is not reachable from the pod.
	hostOnly, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostOnly.Close()
	go acceptLoop(hostOnly, greeter("host"))
	hp := hostOnly.Addr().(*net.TCPAddr).Port
	err = r.PortForward(context.Background(), "pod1", int32(hp), &pfStream{Reader: strings.NewReader("x\n")})
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("PortForward to a port only the host has returned %v, want connection refused", err)
	}
}

func TestPortForwardLeavesTheCallersNetNSAlone(t *testing.T) {
	requireRoot(t)
	pod := podNetNS(t)
	port := listenIn(t, pod, 0, greeter("pod"))
	r := NewRuntime(newFakeDocker(t), netnsIs(pod))
	t.Cleanup(r.stopAll)
	host := hostNetNS
	if !host.IsOpen() {
		t.Fatal("the test binary's network namespace was not recorded")
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			s := &pfStream{Reader: strings.NewReader("x\n")}
			if err := r.PortForward(context.Background(), "pod1", int32(port), s); err != nil {
				t.Errorf("PortForward: %v", err)
			}
		})
	}
	wg.Wait()
	// Every thread the Go runtime still runs goroutines on is in the
	// host's netns: probe many goroutines, each pinned to its thread.
	var bad int
	var mu sync.Mutex
	for range 50 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cur, err := netns.Get()
			if err != nil {
				t.Errorf("netns.Get: %v", err)
				return
			}
			defer cur.Close()
			if !cur.Equal(host) {
				mu.Lock()
				bad++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if bad > 0 {
		t.Fatalf("%d goroutines ran on threads left in another network namespace", bad)
	}
}

func TestPortForwardErrors(t *testing.T) {
	r := NewRuntime(newFakeDocker(t), netnsIs(""))
	t.Cleanup(r.stopAll)
	for _, port := range []int32{0, -1, 65536} {
		if err := r.PortForward(context.Background(), "pod1", port, &pfStream{Reader: strings.NewReader("")}); err == nil {
			t.Errorf("port %d accepted", port)
		}
	}
	if err := r.PortForward(context.Background(), "nope", 80, &pfStream{Reader: strings.NewReader("")}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("unknown sandbox: %v, want the lookup's error", err)
	}
	if err := r.PortForward(context.Background(), "pod1", 80, &pfStream{Reader: strings.NewReader("")}); err == nil || !strings.Contains(err.Error(), "no network namespace") {
		t.Errorf("sandbox without netns: %v", err)
	}
}

func TestPortForwardEndsWhenTheServerStops(t *testing.T) {
	requireRoot(t)
	pod := podNetNS(t)
	accepted := make(chan struct{}, 1)
	port := listenIn(t, pod, 0, func(c net.Conn) {
		accepted <- struct{}{}
		_, _ = io.Copy(io.Discard, c) // never answers, never closes
	})
	r := NewRuntime(newFakeDocker(t), netnsIs(pod))
	inR, inW := io.Pipe()
	defer inW.Close()
	errc := make(chan error, 1)
	go func() { errc <- r.PortForward(context.Background(), "pod1", int32(port), &pfStream{Reader: inR}) }()
	<-accepted
	r.stopAll()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("PortForward after stop returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("PortForward did not end when the server stopped")
	}
}
