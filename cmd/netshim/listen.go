package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// listenUnix listens on a unix socket at path: it creates the directory,
// replaces a stale socket left by a crash (but refuses to steal one a live
// process still serves), and makes the socket 0660 so only root and the
// socket's group may drive the runtime.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
		}
		if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
			conn.Close()
			return nil, fmt.Errorf("%s is served by another process (is netshim already running?)", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checking socket path %s: %w", path, err)
	}
	// The umask closes the window in which the new socket would have the
	// default permissions; Chmod then states the intent.
	old := syscall.Umask(0o117)
	lis, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		lis.Close()
		return nil, fmt.Errorf("setting permissions of %s: %w", path, err)
	}
	return lis, nil
}

// listenSpec is --listen parsed: unix://PATH, a socket netshim makes
// unless the service manager passed one; or fd:// (the first socket the
// service manager passed) and fd://NAME (the one it named NAME: a socket
// unit's FileDescriptorName=, by default the unit's name, e.g.
// netshim.socket), which must have been passed.
type listenSpec struct {
	path   string // unix://PATH
	fd     bool   // fd:// or fd://NAME
	fdName string // NAME of fd://NAME
}

func parseListen(s string) (listenSpec, error) {
	switch {
	case strings.HasPrefix(s, "unix://") && len(s) > len("unix://"):
		return listenSpec{path: strings.TrimPrefix(s, "unix://")}, nil
	case strings.HasPrefix(s, "fd://"):
		name := strings.TrimPrefix(s, "fd://")
		if strings.ContainsAny(name, ":/") {
			return listenSpec{}, fmt.Errorf("--listen %q: a socket name has no ':' or '/'", s)
		}
		return listenSpec{fd: true, fdName: name}, nil
	}
	return listenSpec{}, fmt.Errorf("--listen %q: want unix:///path/to/socket, fd:// or fd://NAME", s)
}

func (l listenSpec) String() string {
	if l.fd {
		return "fd://" + l.fdName
	}
	return "unix://" + l.path
}
