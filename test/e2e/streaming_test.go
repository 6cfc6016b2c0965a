//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/netshim/netshim/test/harness"
)

// streamDeadline bounds every wait on a streaming session.
const streamDeadline = 30 * time.Second

// TestStreamingPortForwardToSandbox runs `crictl port-forward` to a pod
// and fetches a page through the forwarded local port. It needs no
// workload container: the page is served by a busybox httpd the test
// starts in the pause container's network namespace (with nsenter, in the
// test only), bound to the pod's 127.0.0.1, which only a dial made inside
// the pod's netns reaches.
func TestStreamingPortForwardToSandbox(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start()
	podID, _ := e.runPod("pf-sandbox")
	netns := e.podNetNS(podID)

	token := "netshim-pf-sandbox-" + e.namespace
	docroot := filepath.Join(e.dir, "www")
	if err := os.MkdirAll(docroot, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(docroot, "index.html"), []byte(token+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.startHelperProcess("nsenter", "--net="+netns, "busybox", "httpd", "-f", "-p", "127.0.0.1:8080", "-h", docroot)
	e.requireListening(netns, 8080)

	served := int(e.hostPort(7))
	e.startPortForward(podID, fmt.Sprintf("%d:8080", served))
	for i := range 3 { // several connections through the same session
		if body := e.curl(served); strings.TrimSpace(body) != token {
			t.Fatalf("fetch %d through the forward: %q, want %q", i, body, token)
		}
	}
	// A port nothing listens on in the pod: the connection fails (and
	// crictl, like kubectl, then ends its session).
	closed := int(e.hostPort(8))
	e.startPortForward(podID, fmt.Sprintf("%d:9", closed))
	if out, err := runCmd("curl", "-sS", "--max-time", "10", fmt.Sprintf("http://127.0.0.1:%d/", closed)); err == nil {
		t.Fatalf("fetching through a forward to a closed port succeeded: %q", out)
	}

	// A stopped pod cannot be forwarded to.
	ctx, cancel := e.rpcCtx()
	defer cancel()
	if _, err := e.client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	_, err := e.client.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{8080}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("PortForward to a stopped pod: %v, want FailedPrecondition", err)
	}
	if _, err := e.client.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: strings.Repeat("f", 64)}); status.Code(err) != codes.NotFound {
		t.Fatalf("PortForward to an unknown pod: %v, want NotFound", err)
	}
}

// TestStreamingExec runs `crictl exec` (output, exit codes, stdin) and a
// tty exec with a resize through a SPDY client, in a busybox container.
// (crictl's --transport websocket needs the v5 websocket protocol, which
// k8s.io/cri-streaming does not serve; kubelet relays SPDY.) It skips itself while CreateContainer
// is not implemented.
func TestStreamingExec(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start()
	podID, podCfg := e.runPod("exec")
	cid := e.startContainer(podID, podCfg, "sleeper", harness.WithCommand("sh", "-c", "exec sleep 3600"))

	// Output, exactly (critest's tty=false case compares it exactly).
	so, se, err := e.crictl("exec", cid, "echo", "hello")
	if err != nil || so != "hello\n" {
		t.Fatalf("crictl exec echo hello: %v, stdout %q stderr %q; want \"hello\\n\"", err, so, se)
	}
	// A non-zero exit code reaches the client, with both streams.
	so, se, err = e.crictl("exec", cid, "sh", "-c", "echo out; echo err >&2; exit 3")
	if err == nil {
		t.Fatalf("crictl exec of a command exiting 3 succeeded (stdout %q stderr %q)", so, se)
	}
	if so != "out\n" || !strings.Contains(se, "err\n") || !strings.Contains(se, "command terminated with exit code 3") {
		t.Fatalf("crictl exec exiting 3: stdout %q stderr %q; want \"out\\n\", and \"err\" and the exit code on stderr", so, se)
	}
	// stdin without a tty (-i), to EOF.
	so, se, err = e.crictlIn("piped data\n", "exec", "-i", cid, "tr", "a-z", "A-Z")
	if err != nil || so != "PIPED DATA\n" {
		t.Fatalf("crictl exec -i tr: %v, stdout %q stderr %q", err, so, se)
	}
	// A command that does not exist: Docker's error, and its exit code
	// (126 on Docker 20.10).
	so, se, err = e.crictl("exec", cid, "/no/such/binary")
	if err == nil || !strings.Contains(se, "command terminated with exit code") {
		t.Fatalf("crictl exec of a missing binary: %v, stdout %q stderr %q; want a non-zero exit code", err, so, se)
	}

	// A tty exec, as kubectl exec -it does: the terminal size follows the
	// resize stream, stdin reaches the command, the exit code comes back,
	// and the session ends with the command while stdin stays open.
	url := e.execURL(&runtimeapi.ExecRequest{
		ContainerId: cid, Tty: true, Stdin: true, Stdout: true,
		Cmd: []string{"sh", "-c", `while [ "$(stty size)" != "45 123" ]; do sleep 0.1; done; read line; echo "size $(stty size) line $line"; exit 5`},
	})
	res := spdyExecTTY(t, url, remotecommand.TerminalSize{Width: 123, Height: 45}, "hello\n")
	if !strings.Contains(res.stdout, "size 45 123 line hello") {
		t.Fatalf("tty exec printed %q, want it to hold \"size 45 123 line hello\"", res.stdout)
	}
	if res.status.Reason != remotecommand.NonZeroExitCodeReason || len(res.status.Details.Causes) != 1 || res.status.Details.Causes[0].Message != "5" {
		t.Fatalf("tty exec status %+v, want NonZeroExitCode 5", res.status)
	}

	// The container's own process is untouched by all this.
	if st := e.containerState(cid); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container %s is %s after the execs, want running", cid, st)
	}
	// Exec in a container that is not running is refused up front.
	ctx, cancel := e.rpcCtx()
	defer cancel()
	if _, err := e.client.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cid, Timeout: 1}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if _, err := e.client.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: cid, Cmd: []string{"true"}, Stdout: true}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Exec in a stopped container: %v, want FailedPrecondition", err)
	}
}

// TestStreamingAttach runs `crictl attach`: to a shell with stdin (as
// critest does: stdin_once, so the shell exits at the client's EOF) and,
// without stdin, to a container that keeps printing.
func TestStreamingAttach(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start()
	podID, podCfg := e.runPod("attach")
	shell := e.startContainer(podID, podCfg, "shell", harness.WithCommand("sh"), harness.WithStdin(true))
	so, se, err := e.crictlIn("echo attached-hello\n", "attach", "--stdin", shell)
	if err != nil || so != "attached-hello\n" || se != "" {
		t.Fatalf("crictl attach --stdin: %v, stdout %q stderr %q; want \"attached-hello\\n\" and nothing on stderr", err, so, se)
	}
	if !poll(stopDeadline, func() bool { return e.containerState(shell) == runtimeapi.ContainerState_CONTAINER_EXITED }) {
		t.Fatalf("the attached shell did not exit after its stdin closed (stdin_once)")
	}

	ticker := e.startContainer(podID, podCfg, "ticker", harness.WithCommand("sh", "-c", "i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.2; done"))
	cmd, lines := e.startCrictl("attach", ticker)
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "tick ") {
			t.Fatalf("crictl attach printed %q, want tick lines", line)
		}
	case <-time.After(streamDeadline):
		t.Fatalf("crictl attach printed nothing within %s", streamDeadline)
	}
	// The client goes away abruptly (crictl ignores a first SIGTERM
	// once its RPC is done): the container must not notice.
	_ = cmd.Process.Kill()
	if st := e.containerState(ticker); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container is %s after the client detached, want running", st)
	}
}

// TestStreamingPortForwardToContainer runs `crictl port-forward` to a
// busybox httpd container listening on the pod's loopback.
func TestStreamingPortForwardToContainer(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.start()
	podID, podCfg := e.runPod("pf-web")
	token := "netshim-pf-container-" + e.namespace
	e.startContainer(podID, podCfg, "web",
		harness.WithCommand("sh", "-c", fmt.Sprintf("mkdir -p /www && echo %s > /www/index.html && exec httpd -f -p 127.0.0.1:8081 -h /www", token)))
	e.requireListening(e.podNetNS(podID), 8081)
	local := int(e.hostPort(9))
	e.startPortForward(podID, fmt.Sprintf("%d:8081", local))
	if body := e.curl(local); strings.TrimSpace(body) != token {
		t.Fatalf("fetch through the forward: %q, want %q", body, token)
	}
}

// ---- helpers ----

// runPod starts a pod through the CRI and returns its ID and config.
func (e *env) runPod(name string) (string, *runtimeapi.PodSandboxConfig) {
	e.t.Helper()
	return e.runPodWith(name)
}

// startContainer creates and starts a container of the workload image,
// changed by opts, in a pod and waits until it runs; a failure fails the
// test.
func (e *env) startContainer(podID string, podCfg *runtimeapi.PodSandboxConfig, name string, opts ...harness.ContainerOption) string {
	e.t.Helper()
	cfg := harness.Container(name, workloadImage, opts...)
	ctx, cancel := e.rpcCtx()
	defer cancel()
	resp, err := e.client.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		e.t.Fatalf("CreateContainer %s: %v\n%s", name, err, e.logTail(30))
	}
	id := resp.ContainerId
	e.t.Cleanup(func() {
		ctx, cancel := e.rpcCtx()
		defer cancel()
		if e.client != nil {
			_, _ = e.client.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 1})
			_, _ = e.client.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		}
		_, _ = runCmd("docker", "rm", "-f", id)
	})
	if _, err := e.client.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		e.t.Fatalf("StartContainer %s: %v\n%s", name, err, e.logTail(30))
	}
	if !poll(startDeadline, func() bool { return e.containerState(id) == runtimeapi.ContainerState_CONTAINER_RUNNING }) {
		e.t.Fatalf("container %s (%s) is %s, not running, %s after StartContainer", name, id, e.containerState(id), startDeadline)
	}
	return id
}

func (e *env) containerState(id string) runtimeapi.ContainerState {
	e.t.Helper()
	ctx, cancel := e.rpcCtx()
	defer cancel()
	resp, err := e.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		e.t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	return resp.GetStatus().GetState()
}

// pausePid is the pid of a sandbox's pause container, from Docker.
func (e *env) pausePid(podID string) int {
	e.t.Helper()
	out := strings.TrimSpace(mustRun(e.t, "docker", "inspect", "--format", "{{.State.Pid}}", podID))
	pid, err := strconv.Atoi(out)
	if err != nil || pid <= 0 {
		e.t.Fatalf("pid of pause container %s: %q", podID, out)
	}
	return pid
}

// requireListening waits until a TCP socket listens on port in the netns
// at path (its /proc/net/tcp, read by a cat entered into it).
func (e *env) requireListening(netns string, port int) {
	e.t.Helper()
	want := fmt.Sprintf(":%04X", port)
	ok := poll(startDeadline, func() bool {
		data, err := runCmd("nsenter", "--net="+netns, "cat", "/proc/net/tcp")
		if err != nil {
			return false
		}
		for _, line := range strings.Split(data, "\n")[1:] {
			f := strings.Fields(line)
			// sl local_address rem_address st ...; st 0A is LISTEN.
			if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
				return true
			}
		}
		return false
	})
	if !ok {
		e.t.Fatalf("nothing listens on port %d in the netns %s within %s", port, netns, startDeadline)
	}
}

// podNetNS is the path of a pod's network namespace: the pinned one its
// checkpoint names (pinned and pause-less sandboxes), else its pause
// container's.
func (e *env) podNetNS(podID string) string {
	e.t.Helper()
	if ns := e.readCheckpoint(podID).Data.NetNS; ns != "" {
		return ns
	}
	return fmt.Sprintf("/proc/%d/ns/net", e.pausePid(podID))
}

// startHelperProcess starts a process the test stops at cleanup.
func (e *env) startHelperProcess(name string, args ...string) {
	e.t.Helper()
	cmd := exec.Command(name, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("starting %s: %v", name, err)
	}
	e.t.Cleanup(func() { stopProcess(e.t, cmd) })
}

// stopProcess ends a process this test started: SIGTERM, then SIGKILL.
func stopProcess(t *testing.T, cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Logf("pid %d ignored SIGTERM; killing it", cmd.Process.Pid)
		_ = cmd.Process.Kill()
		<-done
	}
}

func (e *env) crictlArgs(args ...string) []string {
	return append([]string{"--config", e.crictlCf, "-r", "unix://" + e.sock, "-i", "unix://" + e.sock, "--timeout", "60s"}, args...)
}

// crictlIn is e.crictl with stdin.
func (e *env) crictlIn(stdin string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.cfg.crictl, e.crictlArgs(args...)...)
	var so, se strings.Builder
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &so, &se
	err = cmd.Run()
	return so.String(), se.String(), err
}

// startCrictl starts a long-running crictl command (stopped at cleanup)
// and returns its stdout lines.
func (e *env) startCrictl(args ...string) (*exec.Cmd, <-chan string) {
	e.t.Helper()
	cmd := exec.Command(e.cfg.crictl, e.crictlArgs(args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("starting crictl %s: %v", strings.Join(args, " "), err)
	}
	e.t.Cleanup(func() {
		stopProcess(e.t, cmd)
		if e.t.Failed() {
			e.t.Logf("crictl %s stderr:\n%s", strings.Join(args, " "), stderr.String())
		}
	})
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody is reading any more
			}
		}
	}()
	return cmd, lines
}

// startPortForward runs `crictl port-forward POD LOCAL:REMOTE...` until
// the test ends, once it says it is forwarding every mapping.
func (e *env) startPortForward(podID string, mappings ...string) {
	e.t.Helper()
	_, lines := e.startCrictl(append([]string{"port-forward", podID}, mappings...)...)
	deadline := time.After(streamDeadline)
	for seen := 0; seen < len(mappings); {
		select {
		case line := <-lines:
			// "Forwarding from 127.0.0.1:18071 -> 8080" (and [::1]).
			if strings.HasPrefix(line, "Forwarding from 127.0.0.1:") {
				seen++
			}
		case <-deadline:
			e.t.Fatalf("crictl port-forward %s %v did not report forwarding within %s\n%s", podID, mappings, streamDeadline, e.logTail(30))
		}
	}
}

// curl fetches http://127.0.0.1:PORT/ and fails the test on error.
func (e *env) curl(port int) string {
	e.t.Helper()
	out, err := runCmd("curl", "-sS", "--fail", "--max-time", "10", fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		e.t.Fatalf("curl through port %d: %v\n%s\n%s", port, err, out, e.logTail(30))
	}
	return out
}

// execURL asks for an exec session's URL.
func (e *env) execURL(req *runtimeapi.ExecRequest) string {
	e.t.Helper()
	ctx, cancel := e.rpcCtx()
	defer cancel()
	resp, err := e.client.Exec(ctx, req)
	if err != nil {
		e.t.Fatalf("Exec: %v", err)
	}
	return resp.Url
}

// execStatus is the v4 remotecommand protocol's final status.
type execStatus struct {
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Details struct {
		Causes []struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"causes"`
	} `json:"details"`
}

type ttyResult struct {
	stdout string
	status execStatus
}

// spdyExecTTY runs a tty exec session the way kubelet's proxy relays
// kubectl exec -it: SPDY, protocol v4, stdin + stdout + resize streams.
// It sends one terminal size and stdin, keeps stdin open, and returns the
// output and the final status once the server ends the session.
func spdyExecTTY(t *testing.T, rawURL string, size remotecommand.TerminalSize, stdin string) ttyResult {
	t.Helper()
	rt, err := spdy.NewRoundTripper(nil)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(httpstream.HeaderProtocolVersion, remotecommand.StreamProtocolV4Name)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("upgrading %s: %v", rawURL, err)
	}
	conn, err := rt.NewConnection(resp)
	if err != nil {
		t.Fatalf("SPDY connection: %v", err)
	}
	defer conn.Close()
	stream := func(typ string) httpstream.Stream {
		h := http.Header{}
		h.Set(remotecommand.StreamType, typ)
		s, err := conn.CreateStream(h)
		if err != nil {
			t.Fatalf("creating the %s stream: %v", typ, err)
		}
		return s
	}
	errStream := stream(remotecommand.StreamTypeError)
	stdinStream := stream(remotecommand.StreamTypeStdin)
	stdoutStream := stream(remotecommand.StreamTypeStdout)
	resize := stream(remotecommand.StreamTypeResize)
	if err := json.NewEncoder(resize).Encode(size); err != nil {
		t.Fatalf("sending the terminal size: %v", err)
	}
	if _, err := io.WriteString(stdinStream, stdin); err != nil {
		t.Fatalf("writing stdin: %v", err)
	}
	var res ttyResult
	var wg sync.WaitGroup
	var out []byte
	var raw []byte
	wg.Go(func() { out, _ = io.ReadAll(stdoutStream) })
	wg.Go(func() { raw, _ = io.ReadAll(errStream) })
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(streamDeadline):
		conn.Close()
		<-done
		t.Fatalf("the tty exec session did not end within %s (stdout so far %q)", streamDeadline, out)
	}
	res.stdout = string(out)
	if err := json.Unmarshal(raw, &res.status); err != nil {
		t.Fatalf("status %q: %v", raw, err)
	}
	return res
}
