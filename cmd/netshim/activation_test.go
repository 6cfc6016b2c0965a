package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseListen(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    listenSpec
		wantErr string
	}{
		{in: "unix:///run/netshim/netshim.sock", want: listenSpec{path: "/run/netshim/netshim.sock"}},
		{in: "fd://", want: listenSpec{fd: true}},
		{in: "fd://netshim.socket", want: listenSpec{fd: true, fdName: "netshim.socket"}},
		{in: "unix://", wantErr: "want unix:///path/to/socket, fd:// or fd://NAME"},
		{in: "/run/netshim/netshim.sock", wantErr: "want unix:///path/to/socket"},
		{in: "tcp://127.0.0.1:1234", wantErr: "want unix:///path/to/socket"},
		{in: "fd://a/b", wantErr: "no ':' or '/'"},
		{in: "fd://3:4", wantErr: "no ':' or '/'"},
	} {
		got, err := parseListen(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseListen(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseListen(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("parseListen(%q).String() = %q", tc.in, got.String())
		}
	}
}

func TestPickListener(t *testing.T) {
	const def = "/run/netshim/netshim.sock"
	unit := inheritedSocket{name: "netshim.socket", addr: def}
	other := inheritedSocket{name: "other.socket", addr: "/run/other.sock"}
	for _, tc := range []struct {
		name      string
		listen    string
		inherited []inheritedSocket
		want      int
		warning   string // a substring; "" wants none
		wantErr   string
	}{
		{name: "nothing passed: netshim makes its own", listen: "unix://" + def, want: -1},
		{name: "one passed at --listen's path", listen: "unix://" + def, inherited: []inheritedSocket{unit}, want: 0},
		{name: "one passed elsewhere: served, with a warning", listen: "unix:///tmp/x.sock", inherited: []inheritedSocket{unit},
			want: 0, warning: "the socket systemd passed, " + def + " (netshim.socket), is not --listen's unix:///tmp/x.sock"},
		{name: "several passed: the one at --listen's path", listen: "unix://" + def, inherited: []inheritedSocket{other, unit}, want: 1},
		{name: "several passed, none at the path: the first", listen: "unix:///tmp/x.sock", inherited: []inheritedSocket{other, unit}, want: 0, warning: "/run/other.sock"},
		{name: "fd:// takes the first", listen: "fd://", inherited: []inheritedSocket{other, unit}, want: 0},
		{name: "fd://NAME takes that one", listen: "fd://netshim.socket", inherited: []inheritedSocket{other, unit}, want: 1},
		{name: "fd:// without a passed socket", listen: "fd://", want: -1,
			wantErr: "--listen fd://: the service manager passed no listening socket"},
		{name: "fd://NAME without a passed socket", listen: "fd://netshim.socket", want: -1, wantErr: "passed no listening socket"},
		{name: "fd://NAME and another name passed", listen: "fd://netshim.socket", inherited: []inheritedSocket{other}, want: -1,
			wantErr: "--listen fd://netshim.socket: no socket of that name was passed; passed: /run/other.sock (other.socket)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := parseListen(tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			got, warning, err := pickListener(spec, tc.inherited)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Errorf("err = %v", err)
			}
			if got != tc.want {
				t.Errorf("picked %d, want %d", got, tc.want)
			}
			switch {
			case tc.warning == "" && warning != "":
				t.Errorf("warning %q, want none", warning)
			case !strings.Contains(warning, tc.warning):
				t.Errorf("warning %q, want one containing %q", warning, tc.warning)
			}
		})
	}
}

// Without LISTEN_FDS for this process, fd:// is a start-up error before
// anything else happens, and unix:// makes its own socket later.
func TestInheritedListenerWithoutSockets(t *testing.T) {
	t.Setenv("LISTEN_FDS", "1")
	t.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()+1)) // someone else's
	lis, err := inheritedListener(listenSpec{fd: true})
	if lis != nil || err == nil || !strings.Contains(err.Error(), "passed no listening socket") {
		t.Errorf("fd:// = %v, %v; want the no-socket error", lis, err)
	}
	if v, ok := os.LookupEnv("LISTEN_FDS"); ok {
		t.Errorf("LISTEN_FDS=%q left for children", v)
	}
	if lis, err := inheritedListener(listenSpec{path: "/run/netshim/netshim.sock"}); lis != nil || err != nil {
		t.Errorf("unix:// = %v, %v; want nil, nil", lis, err)
	}
}

const inheritHelperEnv = "NETSHIM_TEST_INHERIT_HELPER"

// TestInheritHelperProcess is not a test: it is the process that
// TestInheritedListenerFromServiceManager runs (the test binary again)
// with a socket at fd 3, as systemd starts netshim.
func TestInheritHelperProcess(t *testing.T) {
	listen := os.Getenv(inheritHelperEnv)
	if listen == "" {
		t.Skip("helper process only")
	}
	// systemd sets LISTEN_PID to the PID it execs; the parent cannot
	// know it, so the child states it as the exec'd process would see.
	os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	spec, err := parseListen(listen)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	lis, err := inheritedListener(spec)
	if err != nil || lis == nil {
		fmt.Println("error:", lis, err)
		os.Exit(1)
	}
	var leaked []string
	for _, v := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		if _, ok := os.LookupEnv(v); ok {
			leaked = append(leaked, v)
		}
	}
	c, err := lis.Accept()
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Fprintf(c, "serving %s; env left: %q\n", lis.Addr(), leaked)
	c.Close()
	lis.Close()
	os.Exit(0)
}

// A socket passed as systemd passes it is served, LISTEN_* are gone from
// the environment, and closing it leaves the file to its owner. Passed
// descriptors that are not listening stream sockets (a datagram socket, a
// connected one) are not taken for the CRI socket.
func TestInheritedListenerFromServiceManager(t *testing.T) {
	for _, tc := range []struct {
		listen string
		junk   bool // pass a datagram and a connected socket first
	}{
		{listen: "unix:///run/netshim/netshim.sock"},
		{listen: "fd://"},
		{listen: "fd://netshim.socket"},
		{listen: "fd://", junk: true},
		{listen: "unix:///run/netshim/netshim.sock", junk: true},
	} {
		name := tc.listen
		if tc.junk {
			name += " after junk"
		}
		t.Run(name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "nsh")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			path := dir + "/netshim.sock"
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			l.SetUnlinkOnClose(false)
			f, err := l.File()
			l.Close()
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()

			// From fd 3, SD_LISTEN_FDS_START.
			files, names := []*os.File{f}, "netshim.socket"
			if tc.junk {
				files, names = append(junkSockets(t), f), "dgram:conn:netshim.socket"
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestInheritHelperProcess$", "-test.v")
			cmd.Env = append(os.Environ(), inheritHelperEnv+"="+tc.listen, "LISTEN_FDS="+strconv.Itoa(len(files)), "LISTEN_FDNAMES="+names)
			cmd.ExtraFiles = files
			out := &strings.Builder{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// The helper holds the only copy now: if it fails, the socket
			// closes and the read below ends at once.
			f.Close()
			c, err := net.DialTimeout("unix", path, 10*time.Second)
			if err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("dial: %v\n%s", err, out)
			}
			c.SetDeadline(time.Now().Add(30 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			if want := "serving " + path + "; env left: []\n"; err != nil || line != want {
				t.Errorf("helper said %q (%v), want %q\n%s", line, err, want, out)
			}
			if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
				t.Errorf("the passed socket's file after netshim closed it: %v, %v; want it left to its owner", fi, err)
			}
		})
	}
}

// junkSockets are a datagram socket and a connected stream socket: what a
// misconfigured socket unit could pass besides the CRI socket.
func junkSockets(t *testing.T) []*os.File {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fds[1])
	dgram := os.NewFile(uintptr(fds[0]), "dgram")
	fds, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fds[1])
	conn := os.NewFile(uintptr(fds[0]), "conn")
	t.Cleanup(func() { dgram.Close(); conn.Close() })
	return []*os.File{dgram, conn}
}
