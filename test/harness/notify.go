package harness

import (
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// NotifySocket is a NOTIFY_SOCKET of a test's own, standing in for
// systemd: it records each notification (one per datagram, sd_notify(3))
// a service under test sends.
type NotifySocket struct {
	Path string
	ch   chan string
	mu   sync.Mutex
	all  []string
}

// ListenNotify listens on a unix datagram socket at path until the test
// ends.
func ListenNotify(t testing.TB, path string) *NotifySocket {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// Buffered for a test's life of watchdog pings: the reader must not
	// block the service's sends.
	l := &NotifySocket{Path: path, ch: make(chan string, 10000)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			s := string(buf[:n])
			l.mu.Lock()
			l.all = append(l.all, s)
			l.mu.Unlock()
			l.ch <- s
		}
	}()
	return l
}

// Wait reads notifications until one satisfies ok and returns it; the
// test fails if none does within timeout.
func (l *NotifySocket) Wait(t testing.TB, timeout time.Duration, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case s := <-l.ch:
			if ok(s) {
				return s
			}
		case <-deadline:
			t.Fatalf("no %s within %s", what, timeout)
		}
	}
}

// Received is every notification so far, in order.
func (l *NotifySocket) Received() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}
