package harness

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
)

// A forwarder relays both ways, lets each side see the other's EOF, and
// Close ends relays still open.
func TestForwardTCP(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the client's EOF
				_, _ = c.Write([]byte(strings.ToUpper(string(b))))
			}()
		}
	}()
	f, err := ForwardTCP(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.Addr(), "127.0.0.1:") {
		t.Errorf("listens on %s, want loopback", f.Addr())
	}
	for range 3 {
		c, err := net.Dial("tcp", f.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != "PING" {
			t.Errorf("relayed answer %q, %v; want PING", got, err)
		}
	}
	// A connection left open is closed by Close.
	open, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if _, err := open.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(open).ReadByte(); err == nil {
		t.Error("a relayed connection is still open after Close")
	}
	if c, err := net.Dial("tcp", f.Addr()); err == nil {
		c.Close()
		t.Error("the forwarder still accepts after Close")
	}
	if _, err := ForwardTCP("no-port"); err == nil {
		t.Error("ForwardTCP accepted an address without a port")
	}
}
