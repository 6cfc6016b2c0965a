package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

// dialTimeout bounds a connect to a port inside a pod: on loopback it
// either succeeds or is refused at once, unless a firewall drops it.
const dialTimeout = 10 * time.Second

// PortForward connects stream to port on the loopback interface of a pod
// sandbox's network namespace, so a port the pod listens on only
// locally is reachable too, as with kubelet's own runtimes. The socket is
// created inside the pod's netns (see dialInNetNS); nothing is forked.
//
// Data is copied both ways. When the client has nothing more to send, the
// TCP connection is half-closed so the pod sees EOF and can still answer;
// the session ends when the pod's side closes (or the server stops).
func (r *Runtime) PortForward(ctx context.Context, podSandboxID string, port int32, stream io.ReadWriteCloser) error {
	if port <= 0 || port > 65535 {
		return fmt.Errorf("invalid port %d", port)
	}
	ctx, cancel := r.session(ctx)
	defer cancel()
	path, err := r.netnsOf(ctx, podSandboxID)
	if err != nil {
		return err
	}
	if path == "" {
		return fmt.Errorf("pod sandbox %s has no network namespace (is it running?)", podSandboxID)
	}
	dialCtx, cancelDial := context.WithTimeout(ctx, dialTimeout)
	conn, err := dialInNetNS(dialCtx, path, int(port))
	cancelDial()
	if err != nil {
		return fmt.Errorf("connecting to port %d in pod sandbox %s: %w", port, podSandboxID, err)
	}
	defer conn.Close()
	unhook := context.AfterFunc(ctx, func() { conn.Close() })
	defer unhook()

	go func() {
		if _, err := io.Copy(conn, stream); err == nil {
			if tc, ok := conn.(interface{ CloseWrite() error }); ok {
				_ = tc.CloseWrite()
			}
		}
	}()
	_, err = io.Copy(stream, conn)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("forwarding port %d of pod sandbox %s: %w", port, podSandboxID, err)
	}
	return nil
}

// dialInNetNS opens a TCP connection to port on the loopback address of
// the network namespace at nsPath: 127.0.0.1 first, then ::1 when IPv4 is
// refused (a server listening on IPv6 only).
//
// A socket belongs to the netns it was created in, for its whole life; so
// the socket is created by an OS thread switched into the pod's netns,
// which is switched back right after. That runs on a goroutine of its
// own, locked to its thread: if switching back failed, the goroutine ends
// still locked and the Go runtime discards the thread rather than let
// other goroutines run in the pod's netns. While connecting, the goroutine
// may park in the netpoller, but it stays on its locked thread.
func dialInNetNS(ctx context.Context, nsPath string, port int) (net.Conn, error) {
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", nsPath, err)
	}
	defer target.Close()

	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		conn, restored, err := dialFromNetNS(ctx, target, port)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- result{conn, err}
	}()
	res := <-done
	return res.conn, res.err
}

// dialFromNetNS runs on a locked thread: it switches into target, dials,
// and switches back. restored reports whether the thread is back in its
// original netns.
func dialFromNetNS(ctx context.Context, target netns.NsHandle, port int) (conn net.Conn, restored bool, err error) {
	origin, err := netns.Get()
	if err != nil {
		return nil, true, fmt.Errorf("reading the current network namespace: %w", err)
	}
	defer origin.Close()
	if err := netns.Set(target); err != nil {
		// setns failed, so the thread never left its netns.
		return nil, true, fmt.Errorf("entering the pod's network namespace: %w", err)
	}
	defer func() {
		if serr := netns.Set(origin); serr != nil {
			restored = false
			if conn != nil {
				conn.Close()
				conn = nil
			}
			err = fmt.Errorf("leaving the pod's network namespace: %w", serr)
		}
	}()
	restored = true
	conn, err = dialLoopback(ctx, port)
	return conn, restored, err
}

func dialLoopback(ctx context.Context, port int) (net.Conn, error) {
	var d net.Dialer
	p := strconv.Itoa(port)
	conn, err4 := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
	if err4 == nil {
		return conn, nil
	}
	if !errors.Is(err4, syscall.ECONNREFUSED) {
		return nil, err4
	}
	conn, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", p))
	if err6 == nil {
		return conn, nil
	}
	return nil, err4
}
