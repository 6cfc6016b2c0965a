package streaming

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/internal/testutil"
)

func startServer(t *testing.T, docker DockerAPI, netnsOf NetNSFunc) *Server {
	t.Helper()
	s, err := New(Config{Addr: "127.0.0.1:0"}, docker, netnsOf)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// spdyConnect opens a session URL the way kubelet's proxy and crictl do:
// an HTTP upgrade to SPDY/3.1 negotiating protocol.
func spdyConnect(t *testing.T, rawURL, protocol string) httpstream.Connection {
	t.Helper()
	rt, err := spdy.NewRoundTripper(nil)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(httpstream.HeaderProtocolVersion, protocol)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("upgrading %s: %v", rawURL, err)
	}
	conn, err := rt.NewConnection(resp)
	if err != nil {
		t.Fatalf("SPDY connection to %s: %v", rawURL, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func createStream(t *testing.T, conn httpstream.Connection, kv ...string) httpstream.Stream {
	t.Helper()
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	s, err := conn.CreateStream(h)
	if err != nil {
		t.Fatalf("creating stream %v: %v", h, err)
	}
	return s
}

func readAllWithin(t *testing.T, r io.Reader, what string) string {
	t.Helper()
	type res struct {
		b   []byte
		err error
	}
	c := make(chan res, 1)
	go func() {
		b, err := io.ReadAll(r)
		c <- res{b, err}
	}()
	select {
	case r := <-c:
		return string(r.b)
	case <-time.After(10 * time.Second):
		t.Fatalf("reading %s did not end", what)
		return ""
	}
}

func TestServerRefusesRequestsUntilStarted(t *testing.T) {
	s, err := New(Config{}, newFakeDocker(t), noNetNS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"ls"}, Stdout: true}); status.Code(err) != codes.Unavailable {
		t.Errorf("GetExec before Start: %v, want Unavailable", err)
	}
	s.Stop() // stopping a server never started is fine
	if err := s.Start(); err == nil {
		t.Error("Start after Stop succeeded")
	}
	if _, err := New(Config{Addr: "no-port"}, newFakeDocker(t), noNetNS); err == nil {
		t.Error("New accepted an address without a port")
	}
}

func TestServerURLsNameTheBoundAddress(t *testing.T) {
	s := startServer(t, newFakeDocker(t), noNetNS)
	base, err := url.Parse(s.URL())
	if err != nil || base.Scheme != "http" || base.Hostname() != "127.0.0.1" || base.Port() == "" || base.Port() == "0" {
		t.Fatalf("base URL %q (%v), want http://127.0.0.1:<bound port>", s.URL(), err)
	}
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"ls"}, Stdout: true})
	if err != nil {
		t.Fatalf("GetExec: %v", err)
	}
	if !strings.HasPrefix(resp.Url, s.URL()+"/exec/") {
		t.Errorf("exec URL %q, want it under %s/exec/", resp.Url, s.URL())
	}
	pf, err := s.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "p"})
	if err != nil || !strings.HasPrefix(pf.Url, s.URL()+"/portforward/") {
		t.Errorf("port-forward URL %v (%v)", pf, err)
	}
	at, err := s.GetAttach(&runtimeapi.AttachRequest{ContainerId: "c", Stdout: true})
	if err != nil || !strings.HasPrefix(at.Url, s.URL()+"/attach/") {
		t.Errorf("attach URL %v (%v)", at, err)
	}
	// The library validates too: tty with a separate stderr is refused.
	if _, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"ls"}, Tty: true, Stderr: true}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetExec tty+stderr: %v, want InvalidArgument", err)
	}
	// An unknown token is a 404.
	r, err := http.Get(s.URL() + "/exec/bogus")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound {
		t.Errorf("GET of an unknown token: %s, want 404", r.Status)
	}
	s.Stop()
	if _, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"ls"}, Stdout: true}); status.Code(err) != codes.Unavailable {
		t.Errorf("GetExec after Stop: %v, want Unavailable", err)
	}
	if c, err := net.DialTimeout("tcp", base.Host, time.Second); err == nil {
		c.Close()
		t.Errorf("the server still accepts connections on %s after Stop", base.Host)
	}
}

func TestServerUnspecifiedHostGetsLoopbackURLs(t *testing.T) {
	for addr, want := range map[string]string{"0.0.0.0:0": "127.0.0.1", ":0": "127.0.0.1", "[::]:0": "::1", "localhost:0": "127.0.0.1"} {
		s, err := New(Config{Addr: addr}, newFakeDocker(t), noNetNS)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			if addr == "[::]:0" {
				t.Logf("no IPv6 here: %v", err)
				continue
			}
			t.Fatal(err)
		}
		if u, _ := url.Parse(s.URL()); u == nil || u.Hostname() != want || u.Port() == "0" {
			t.Errorf("URL %q for %s, want one on %s", s.URL(), addr, want)
		}
		s.Stop()
	}
}

// execStatus is the v4 protocol's status on the error stream.
type execStatus struct {
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Details struct {
		Causes []struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"causes"`
	} `json:"details"`
}

func TestServerExecReportsTheExitCodeToTheClient(t *testing.T) {
	docker := newFakeDocker(t)
	docker.SetExecScript(func(p *fakedocker.Proc) int {
		p.Stdout("hi\n")
		return 7
	})
	s := startServer(t, docker, noNetNS)
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"sh", "-c", "echo hi; exit 7"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	conn := spdyConnect(t, resp.Url, remotecommand.StreamProtocolV4Name)
	errStream := createStream(t, conn, remotecommand.StreamType, remotecommand.StreamTypeError)
	stdout := createStream(t, conn, remotecommand.StreamType, remotecommand.StreamTypeStdout)
	if got := readAllWithin(t, stdout, "stdout"); got != "hi\n" {
		t.Errorf("stdout %q, want %q", got, "hi\n")
	}
	raw := readAllWithin(t, errStream, "the error stream")
	var st execStatus
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatalf("status %q: %v", raw, err)
	}
	if st.Status != "Failure" || st.Reason != remotecommand.NonZeroExitCodeReason || len(st.Details.Causes) != 1 ||
		st.Details.Causes[0].Reason != remotecommand.ExitCodeCauseType || st.Details.Causes[0].Message != "7" {
		t.Errorf("status %s, want a NonZeroExitCode failure with ExitCode cause 7", raw)
	}
}

func TestServerExecSuccessStatus(t *testing.T) {
	docker := newFakeDocker(t)
	docker.SetExecScript(func(p *fakedocker.Proc) int { p.Stderr("e\n"); return 0 })
	s := startServer(t, docker, noNetNS)
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"true"}, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	conn := spdyConnect(t, resp.Url, remotecommand.StreamProtocolV4Name)
	errStream := createStream(t, conn, remotecommand.StreamType, remotecommand.StreamTypeError)
	stderr := createStream(t, conn, remotecommand.StreamType, remotecommand.StreamTypeStderr)
	if got := readAllWithin(t, stderr, "stderr"); got != "e\n" {
		t.Errorf("stderr %q, want %q", got, "e\n")
	}
	var st execStatus
	raw := readAllWithin(t, errStream, "the error stream")
	if err := json.Unmarshal([]byte(raw), &st); err != nil || st.Status != "Success" {
		t.Errorf("status %q (%v), want Success", raw, err)
	}
	// A token is single-use.
	r, err := http.Get(resp.Url)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound {
		t.Errorf("second use of a token: %s, want 404", r.Status)
	}
}

func TestServerPortForwardOverSPDY(t *testing.T) {
	requireRoot(t)
	pod := podNetNS(t)
	port := listenIn(t, pod, 0, greeter("pod"))
	s := startServer(t, newFakeDocker(t), netnsIs(pod))
	resp, err := s.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "pod1", Port: []int32{int32(port)}})
	if err != nil {
		t.Fatal(err)
	}
	conn := spdyConnect(t, resp.Url, portforward.ProtocolV1Name)
	// Two forwarded connections over one session, as kubectl makes for
	// two local connections.
	for i := range 2 {
		p, id := fmt.Sprint(port), fmt.Sprint(i)
		errStream := createStream(t, conn, portforward.StreamType, portforward.StreamTypeError, portforward.PortHeader, p, portforward.PortForwardRequestIDHeader, id)
		errStream.Close() // the client never writes to it
		data := createStream(t, conn, portforward.StreamType, portforward.StreamTypeData, portforward.PortHeader, p, portforward.PortForwardRequestIDHeader, id)
		if _, err := fmt.Fprintf(data, "hello %d\n", i); err != nil {
			t.Fatal(err)
		}
		data.Close() // half-close: the pod sees EOF, answers, closes
		if got, want := readAllWithin(t, data, "the data stream"), fmt.Sprintf("pod hello %d\n", i); got != want {
			t.Errorf("connection %d: got %q, want %q", i, got, want)
		}
		if msg := readAllWithin(t, errStream, "the error stream"); msg != "" {
			t.Errorf("connection %d: error stream says %q", i, msg)
		}
		conn.RemoveStreams(errStream, data)
	}
}

func TestServerStopEndsOpenSessions(t *testing.T) {
	docker := newFakeDocker(t)
	started := make(chan struct{})
	docker.SetExecScript(func(p *fakedocker.Proc) int {
		close(started)
		_, _ = p.ReadAll() // runs until detached
		return 0
	})
	s, err := New(Config{Addr: "127.0.0.1:0"}, docker, noNetNS)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"sleep"}, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	conn := spdyConnect(t, resp.Url, remotecommand.StreamProtocolV4Name)
	createStream(t, conn, remotecommand.StreamType, remotecommand.StreamTypeError)
	createStream(t, conn, remotecommand.StreamType, remotecommand.StreamTypeStdin)
	createStream(t, conn, remotecommand.StreamType, remotecommand.StreamTypeStdout)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the exec did not start")
	}
	stopped := make(chan struct{})
	go func() {
		s.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return with a session open")
	}
	select {
	case <-conn.CloseChan():
	case <-time.After(10 * time.Second):
		t.Fatal("the client's connection stayed open after Stop")
	}
}

// A client that hangs up on an exec session (kubectl killed, connection
// dropped) takes the command with it, even one that neither reads stdin
// nor writes output, which the session's streams would never notice.
func TestServerExecKilledWhenTheClientHangsUp(t *testing.T) {
	docker := newFakeDocker(t)
	s := startServer(t, docker, noNetNS)
	p := realExec(t, s.runtime, docker, "0::/docker/c1\n")
	resp, err := s.GetExec(&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"sleep", "300"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	conn := spdyConnect(t, resp.Url, remotecommand.StreamProtocolV4Name)
	createStream(t, conn, remotecommand.StreamType, remotecommand.StreamTypeError)
	createStream(t, conn, remotecommand.StreamType, remotecommand.StreamTypeStdout)
	select {
	case <-p.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the exec did not start")
	}
	if p.killed(t, 50*time.Millisecond) {
		t.Fatal("the exec's process died while its client was still there")
	}
	conn.Close()
	if !p.killed(t, 10*time.Second) {
		t.Fatal("the exec's process was not killed after its client hung up")
	}
	testutil.Eventually(t, "Docker to see the exec end", func() bool { return !docker.Exec("exec-1").Running })
}
