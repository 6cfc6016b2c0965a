//go:build cluster

package e2ecluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/netshim/netshim/test/harness"
)

// streamTimeout bounds one interactive exchange (a command's answer, a
// line of a followed log).
const streamTimeout = 30 * time.Second

// sleeper starts a pod whose container app sleeps, and waits for it.
func sleeper(t *testing.T, ns, name string) *pod {
	t.Helper()
	apply(t, ns, podSpec(name, "exec sleep 3600"))
	return waitReady(t, ns, name)
}

// run runs kubectl with stdin and returns stdout, stderr and the exit code
// (-1 when it did not run to an exit).
func run(t *testing.T, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), harness.CommandDeadline)
	defer cancel()
	cmd := w.cp.KubectlCmd(ctx, args...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return out.String(), errb.String(), ee.ExitCode()
	default:
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, errb.String())
		return "", "", -1
	}
}

// TestKubectlExec: kubectl exec without a terminal: stdout and stderr
// apart, the exit code, stdin, and a large output whole.
func TestKubectlExec(t *testing.T) {
	ns := namespace(t)
	sleeper(t, ns, "exec")

	out, errOut, code := run(t, nil, "exec", "-n", ns, "exec", "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 7")
	if out != "to-stdout\n" || !strings.Contains(errOut, "to-stderr") || code != 7 {
		t.Errorf("exec: stdout %q, stderr %q, exit %d; want to-stdout, to-stderr, 7", out, errOut, code)
	}

	out, errOut, code = run(t, strings.NewReader("line one\nline two\n"), "exec", "-i", "-n", ns, "exec", "--", "sh", "-c", "cat; echo stdin-closed")
	if out != "line one\nline two\nstdin-closed\n" || code != 0 {
		t.Errorf("exec -i: stdout %q, exit %d (stderr %q)", out, code, errOut)
	}

	const big = 4 << 20
	out, errOut, code = run(t, nil, "exec", "-n", ns, "exec", "--", "sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", big))
	if len(out) != big || strings.Trim(out, "x") != "" || code != 0 {
		t.Errorf("exec of a %d-byte output: got %d bytes, exit %d (stderr %q)", big, len(out), code, errOut)
	}

	// A command that does not exist is an error, not a hang.
	_, errOut, code = run(t, nil, "exec", "-n", ns, "exec", "--", "/no/such/binary")
	if code == 0 {
		t.Errorf("exec of a missing binary exited 0 (stderr %q)", errOut)
	}
}

// ptyBuffer collects what kubectl writes to its terminal.
type ptyBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *ptyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *ptyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestKubectlExecTTY: kubectl exec -it, run on a pseudo-terminal: the
// remote shell has a terminal of the local size, follows a resize, echoes,
// and its exit code comes back.
func TestKubectlExecTTY(t *testing.T) {
	ns := namespace(t)
	sleeper(t, ns, "tty")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := w.cp.KubectlCmd(ctx, "exec", "-it", "-n", ns, "tty", "--", "sh")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 33, Cols: 101})
	if err != nil {
		t.Fatalf("starting kubectl exec -it on a pty: %v", err)
	}
	defer ptmx.Close()
	var screen ptyBuffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&screen, ptmx) // ends with EIO when kubectl exits
		close(copied)
	}()
	expect := func(what, want string) {
		t.Helper()
		if !harness.Eventually(streamTimeout, func() bool { return strings.Contains(screen.String(), want) }) {
			t.Fatalf("%s: %q never appeared on the terminal:\n%q", what, want, screen.String())
		}
	}
	// Markers split by the shell, so the echo of the typed line does not
	// match: only the command's output does.
	send := func(line string) {
		t.Helper()
		if _, err := ptmx.Write([]byte(line + "\r")); err != nil {
			t.Fatalf("writing to the terminal: %v", err)
		}
	}
	// The shell's prompt first: a line typed before the shell runs is
	// echoed by the terminal and read later, in a state under load where
	// busybox's stty once failed ("No child processes", CI 2026-12-02).
	expect("the shell's prompt", "# ")
	send(`tty; echo "si""ze:$(stty size)"`)
	expect("the remote terminal's size", "size:33 101")
	expect("a terminal in the container", "/dev/pts/")

	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 47, Cols: 131}); err != nil {
		t.Fatal(err)
	}
	// kubectl sends the new size when it sees SIGWINCH; the shell reads
	// it at the next command.
	if !harness.Eventually(streamTimeout, func() bool {
		send(`echo "re""size:$(stty size)"`)
		return harness.Eventually(2*time.Second, func() bool { return strings.Contains(screen.String(), "resize:47 131") })
	}) {
		t.Fatalf("the remote terminal never took the new size 47x131:\n%q", screen.String())
	}
	send(`echo "ca""lc:$((6*7))"`)
	expect("a command's output", "calc:42")

	send("exit 5")
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Errorf("kubectl exec -it exited with %v, want exit status 5 (the shell's)", err)
	}
	select {
	case <-copied:
	case <-time.After(streamTimeout):
		t.Error("the terminal stayed open after kubectl exited")
	}
}

// lineReader collects the lines a running kubectl prints.
type lineReader struct {
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func readLines(r io.Reader) *lineReader {
	l := &lineReader{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.lines = append(l.lines, sc.Text())
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *lineReader) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// waitLine waits for a line matching re and returns its submatches.
func (l *lineReader) waitLine(t *testing.T, what string, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	if !harness.Eventually(streamTimeout, func() bool {
		for _, line := range l.snapshot() {
			if m = re.FindStringSubmatch(line); m != nil {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("%s: no line matching %s; got %q", what, re, l.snapshot())
	}
	return m
}

// TestKubectlAttach: kubectl attach -i reaches a running container's
// stdin and shows what it prints from then on.
func TestKubectlAttach(t *testing.T) {
	ns := namespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: attach
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %s
    imagePullPolicy: Never
    stdin: true
    command: ["sh", "-c", "while read l; do echo \"got:$l\"; done"]
`, busybox))
	waitReady(t, ns, "attach")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := w.cp.KubectlCmd(ctx, "attach", "-i", "-n", ns, "attach", "-c", "app")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	lines := readLines(stdout)
	// kubectl connects in the background: send until the answer comes.
	if !harness.Eventually(streamTimeout, func() bool {
		if _, err := io.WriteString(stdin, "ping\n"); err != nil {
			return false
		}
		return harness.Eventually(time.Second, func() bool { return slicesContains(lines.snapshot(), "got:ping") })
	}) {
		t.Fatalf("no answer through kubectl attach: stdout %q, stderr %q", lines.snapshot(), stderr.String())
	}
	if _, err := io.WriteString(stdin, "second line\n"); err != nil {
		t.Fatal(err)
	}
	lines.waitLine(t, "the second line", regexp.MustCompile(`^got:second line$`))
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestKubectlLogsFollow: kubectl logs -f streams the lines a container
// prints after it started following, in order; --tail cuts.
func TestKubectlLogsFollow(t *testing.T) {
	ns := namespace(t)
	apply(t, ns, podSpec("ticker", `i=0; while true; do echo "tick $i"; i=$((i+1)); sleep 0.2; done`))
	waitReady(t, ns, "ticker")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := w.cp.KubectlCmd(ctx, "logs", "-f", "-n", ns, "ticker")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	lines := readLines(stdout)
	tick := regexp.MustCompile(`^tick (\d+)$`)
	first := lines.waitLine(t, "the first line", tick)
	n, _ := strconv.Atoi(first[1])
	// Lines printed well after kubectl started: it follows.
	lines.waitLine(t, "a line printed after following began", regexp.MustCompile(fmt.Sprintf(`^tick %d$`, n+10)))
	prev := -1
	for _, l := range lines.snapshot() {
		m := tick.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("unexpected line %q", l)
			continue
		}
		k, _ := strconv.Atoi(m[1])
		if prev >= 0 && k != prev+1 {
			t.Errorf("line %q follows tick %d: lines lost or repeated", l, prev)
		}
		prev = k
	}

	out := kubectl(t, "logs", "-n", ns, "ticker", "--tail=2")
	if got := strings.Split(strings.TrimSpace(out), "\n"); len(got) != 2 || !tick.MatchString(got[0]) || !tick.MatchString(got[1]) {
		t.Errorf("logs --tail=2: %q", out)
	}
	out = kubectl(t, "logs", "-n", ns, "ticker", "--timestamps", "--tail=1")
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z tick \d+\n$`).MatchString(out) {
		t.Errorf("logs --timestamps --tail=1: %q", out)
	}
}

// TestKubectlLogsPrevious: after a container crashed and was restarted,
// kubectl logs --previous shows the dead instance's output, and the
// current logs the new one's.
func TestKubectlLogsPrevious(t *testing.T) {
	ns := namespace(t)
	apply(t, ns, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: crasher
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; echo \"attempt $n\"; sleep 2; exit 3"]
    volumeMounts:
    - {name: data, mountPath: /data}
  volumes:
  - name: data
    emptyDir: {}
`, busybox))
	p := waitPod(t, ns, "crasher", "restarted after exiting 3", func(p *pod) bool {
		c := p.container("app")
		return c != nil && c.RestartCount >= 1 && c.LastState.Terminated != nil
	})
	if c := p.container("app"); c.LastState.Terminated.ExitCode != 3 {
		t.Errorf("last state: exit code %d, want 3", c.LastState.Terminated.ExitCode)
	}
	// The restart count may move on while we look: read it again after.
	var prevOut, curOut string
	var restarts int
	if !harness.Eventually(podTimeout, func() bool {
		before := getPod(t, ns, "crasher").container("app").RestartCount
		var err error
		if prevOut, err = w.cp.Kubectl("logs", "-n", ns, "crasher", "--previous"); err != nil {
			return false
		}
		curOut, _ = w.cp.Kubectl("logs", "-n", ns, "crasher")
		restarts = getPod(t, ns, "crasher").container("app").RestartCount
		return before == restarts
	}) {
		t.Fatal("the container never held still long enough to read its logs")
	}
	// Instance k (from 1) prints "attempt k"; after r restarts the previous
	// one is instance r, and the current one r+1 (or, backing off, none yet).
	if want := fmt.Sprintf("attempt %d\n", restarts); prevOut != want {
		t.Errorf("logs --previous after %d restarts: %q, want %q", restarts, prevOut, want)
	}
	if want := fmt.Sprintf("attempt %d\n", restarts+1); curOut != want && curOut != fmt.Sprintf("attempt %d\n", restarts) {
		t.Errorf("logs after %d restarts: %q, want %q", restarts, curOut, want)
	}
}

// TestKubectlPortForward: kubectl port-forward carries TCP to a pod's
// server, over several connections and with a large body intact, also to
// a server that listens on the pod's loopback only.
func TestKubectlPortForward(t *testing.T) {
	ns := namespace(t)
	apply(t, ns, podSpec("pf", `mkdir -p /www && echo pf-ok > /www/index.html && head -c 3000000 /dev/urandom > /www/big && `+
		`(httpd -f -p 127.0.0.1:8081 -h /www &) && exec httpd -f -p 8080 -h /www`))
	waitReady(t, ns, "pf")
	sum := strings.Fields(kubectl(t, "exec", "-n", ns, "pf", "--", "sha256sum", "/www/big"))[0]

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := w.cp.KubectlCmd(ctx, "port-forward", "-n", ns, "pod/pf", "--address", "127.0.0.1", ":8080", ":8081")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	lines := readLines(stdout)
	fwd := func(remote int) string {
		m := lines.waitLine(t, "kubectl's forwarding line", regexp.MustCompile(fmt.Sprintf(`^Forwarding from 127\.0\.0\.1:(\d+) -> %d$`, remote)))
		return m[1]
	}
	port, loopPort := fwd(8080), fwd(8081)
	for i := range 3 {
		body, err := httpGet("http://127.0.0.1:" + port + "/")
		if err != nil || body != "pf-ok\n" {
			t.Fatalf("GET %d through port-forward: %q %v (kubectl: %s)", i, body, err, stderr.String())
		}
	}
	body, err := httpGet("http://127.0.0.1:" + port + "/big")
	if err != nil {
		t.Fatalf("GET /big through port-forward: %v", err)
	}
	if got := sha256.Sum256([]byte(body)); hex.EncodeToString(got[:]) != sum {
		t.Errorf("the 3 MB body came through changed: %d bytes, sha256 %x, want %s", len(body), got, sum)
	}
	body, err = httpGet("http://127.0.0.1:" + loopPort + "/")
	if err != nil || body != "pf-ok\n" {
		t.Errorf("GET of the pod's loopback-only server: %q %v", body, err)
	}
}

// TestKubectlCp: kubectl cp copies a file into a container and a
// directory out of it, byte for byte.
func TestKubectlCp(t *testing.T) {
	ns := namespace(t)
	sleeper(t, ns, "cp")
	local := t.TempDir()

	data := make([]byte, 300_000)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	up := filepath.Join(local, "up.bin")
	if err := os.WriteFile(up, data, 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "cp", up, ns+"/cp:/tmp/up.bin", "-c", "app")
	want := sha256.Sum256(data)
	got := strings.Fields(kubectl(t, "exec", "-n", ns, "cp", "--", "sha256sum", "/tmp/up.bin"))
	if len(got) == 0 || got[0] != hex.EncodeToString(want[:]) {
		t.Errorf("the file copied in has sha256 %v, want %x", got, want)
	}

	kubectl(t, "exec", "-n", ns, "cp", "--", "sh", "-c", "mkdir -p /tmp/d/sub && echo one > /tmp/d/a && echo two > /tmp/d/sub/b")
	down := filepath.Join(local, "d")
	kubectl(t, "cp", ns+"/cp:/tmp/d", down, "-c", "app")
	for rel, want := range map[string]string{"a": "one\n", "sub/b": "two\n"} {
		got, err := os.ReadFile(filepath.Join(down, rel))
		if err != nil || string(got) != want {
			t.Errorf("copied out %s: %q %v, want %q", rel, got, err, want)
		}
	}
}

// TestKubectlDebug: kubectl debug adds an ephemeral container to a
// running pod that shares the target container's process namespace.
func TestKubectlDebug(t *testing.T) {
	ns := namespace(t)
	apply(t, ns, podSpec("target", "exec sleep 31337"))
	waitReady(t, ns, "target")

	kubectl(t, "debug", "-n", ns, "target", "-c", "dbg", "--image="+busybox, "--image-pull-policy=Never",
		"--target=app", "--profile=general", "--", "sh", "-c", "ps -o pid,args; exec sleep 3600")
	waitPod(t, ns, "target", "running its ephemeral container", func(p *pod) bool {
		c := p.container("dbg")
		return c != nil && c.State.Running != nil
	})
	// Process 1 of the shared namespace is the target's sleep.
	out := kubectl(t, "exec", "-n", ns, "target", "-c", "dbg", "--", "cat", "/proc/1/cmdline")
	if strings.ReplaceAll(out, "\x00", " ") != "sleep 31337 " {
		t.Errorf("in the debug container, process 1 is %q, want the target's sleep 31337", out)
	}
	var logs string
	if !harness.Eventually(streamTimeout, func() bool {
		logs, _ = w.cp.Kubectl("logs", "-n", ns, "target", "-c", "dbg")
		return strings.Contains(logs, "sleep 31337")
	}) {
		t.Errorf("the debug container's ps did not show the target's process:\n%s", logs)
	}
	// The target runs on, untouched.
	if c := getPod(t, ns, "target").container("app"); c == nil || c.RestartCount != 0 || c.State.Running == nil {
		t.Errorf("the target container after the debug container came: %+v", c)
	}
}
