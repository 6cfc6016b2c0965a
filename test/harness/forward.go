package harness

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Forwarder relays TCP connections from a loopback address to another
// address of the test's (a registry on a Lan's host address, say): the
// host's Docker engine pushes without TLS only to 127.0.0.0/8, the nodes
// reach only the lan, and both then name one registry.
type Forwarder struct {
	ln   net.Listener
	to   string
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]bool
	done bool
}

// ForwardTCP listens on 127.0.0.1 at a free port and relays every
// connection to to. Close stops it.
func ForwardTCP(to string) (*Forwarder, error) {
	if _, _, err := net.SplitHostPort(to); err != nil {
		return nil, fmt.Errorf("forwarding to %q: %w", to, err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Forwarder{ln: ln, to: to, open: map[net.Conn]bool{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// Addr is the loopback address the forwarder listens on (127.0.0.1:PORT).
func (f *Forwarder) Addr() string { return f.ln.Addr().String() }

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		if !f.track(c, true) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.track(c, false)
			f.relay(c)
		}()
	}
}

// track adds (or removes) a connection Close must close; false once
// closed.
func (f *Forwarder) track(c net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !add {
		delete(f.open, c)
		return true
	}
	if f.done {
		return false
	}
	f.open[c] = true
	return true
}

func (f *Forwarder) relay(c net.Conn) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", f.to, StartTimeout)
	if err != nil {
		return // the client sees its connection closed
	}
	if !f.track(up, true) {
		up.Close()
		return
	}
	defer f.track(up, false)
	defer up.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(up, c)
		// The client is done sending: let the other side see EOF.
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, up)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	wg.Wait()
}

// Close stops listening, closes every relayed connection and waits for
// the relays to end.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.done = true
	for c := range f.open {
		c.Close()
	}
	f.mu.Unlock()
	err := f.ln.Close()
	f.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
