package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Socket activation: systemd (netshim.socket) owns the CRI socket and
// passes it to netshim (LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES). The
// socket then outlives netshim's restarts: kubelet's connections wait in
// its backlog instead of failing, and netshim neither creates nor removes
// the file.

// inheritedSocket is a listening socket the service manager passed.
type inheritedSocket struct {
	// name is its LISTEN_FDNAMES entry: the socket unit's
	// FileDescriptorName=, by default the unit's name (netshim.socket).
	name string
	// addr is its address: a unix socket's path.
	addr string
	lis  net.Listener
}

func (s inheritedSocket) String() string { return fmt.Sprintf("%s (%s)", s.addr, s.name) }

// takeInheritedSockets takes the sockets passed to this process and
// unsets LISTEN_* (activation.Files(true)), so that no child netshim
// runs (a CNI plugin) takes them for its own. A passed descriptor that is
// not a stream listener is closed, with a warning: it cannot serve CRI.
func takeInheritedSockets() []inheritedSocket {
	var out []inheritedSocket
	for _, f := range activation.Files(true) {
		var lis net.Listener
		err := listeningStream(f)
		if err == nil {
			lis, err = net.FileListener(f)
		}
		// FileListener dups the descriptor: the passed one is not needed
		// either way.
		f.Close()
		if err != nil {
			klog.InfoS("WARNING: ignoring a descriptor the service manager passed", "name", f.Name(), "err", err)
			continue
		}
		out = append(out, inheritedSocket{name: f.Name(), addr: lis.Addr().String(), lis: lis})
	}
	return out
}

// listeningStream says why f is not a listening stream socket, if it is
// not: net.FileListener takes a datagram or a connected socket as well,
// whose Accept would then fail.
func listeningStream(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var typ, accepting int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if typ, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE); serr == nil {
			accepting, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
		}
	}); err != nil {
		return err
	}
	switch {
	case serr != nil:
		return fmt.Errorf("not a socket: %w", serr)
	case typ != unix.SOCK_STREAM:
		return fmt.Errorf("not a stream socket (type %d)", typ)
	case accepting == 0:
		return errors.New("a stream socket that is not listening")
	}
	return nil
}

// pickListener chooses which inherited socket serves CRI for --listen,
// or -1 when netshim is to make its own (unix://PATH, nothing passed).
// With unix://PATH the inherited socket wins over making one, since
// systemd passed it for this: the one at PATH, else the first, with a
// warning (kubelet is configured with one of the two paths, and the
// operator should make them agree). fd:// and fd://NAME require one.
func pickListener(spec listenSpec, inherited []inheritedSocket) (idx int, warning string, err error) {
	if len(inherited) == 0 {
		if spec.fd {
			return -1, "", fmt.Errorf("--listen %s: the service manager passed no listening socket (LISTEN_FDS unset or not for this process): start netshim through its socket unit (systemctl start netshim.socket), or use --listen unix:///path/to/socket", spec)
		}
		return -1, "", nil
	}
	switch {
	case spec.fd && spec.fdName != "":
		for i, s := range inherited {
			if s.name == spec.fdName {
				return i, "", nil
			}
		}
		return -1, "", fmt.Errorf("--listen %s: no socket of that name was passed; passed: %s", spec, describe(inherited))
	case spec.fd:
		return 0, "", nil
	}
	for i, s := range inherited {
		if s.addr == spec.path {
			return i, "", nil
		}
	}
	return 0, fmt.Sprintf("the socket systemd passed, %s, is not --listen's %s: serving the passed one; make the socket unit's ListenStream= and --listen (and kubelet's --container-runtime-endpoint) agree", inherited[0], spec), nil
}

func describe(inherited []inheritedSocket) string {
	s := make([]string, len(inherited))
	for i, in := range inherited {
		s[i] = in.String()
	}
	return strings.Join(s, ", ")
}

// inheritedListener takes the passed sockets and returns the one that
// serves CRI, or nil when netshim is to make its own; the others are
// closed. With fd:// and nothing passed, or fd://NAME and no NAME, it is
// a start-up error.
func inheritedListener(spec listenSpec) (net.Listener, error) {
	inherited := takeInheritedSockets()
	idx, warning, err := pickListener(spec, inherited)
	for i, s := range inherited {
		if i == idx {
			continue
		}
		klog.InfoS("WARNING: closing a socket the service manager passed: netshim serves CRI on one socket", "socket", s.String())
		if cerr := s.lis.Close(); cerr != nil {
			klog.ErrorS(cerr, "Closing a passed socket", "socket", s.String())
		}
	}
	if err != nil || idx < 0 {
		return nil, err
	}
	if warning != "" {
		klog.InfoS("WARNING: " + warning)
	}
	klog.InfoS("Using the CRI socket the service manager passed", "socket", inherited[idx].addr, "name", inherited[idx].name)
	return inherited[idx].lis, nil
}
