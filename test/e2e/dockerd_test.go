//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// privateDockerd is a dockerd of the test's own, with its own data root,
// exec root and socket, so that the test may stop and restart it without
// touching the host's engine. It has no bridge and no iptables rules of
// its own: pods get their network from CNI anyway.
type privateDockerd struct {
	t    *testing.T
	dir  string
	sock string
	cmd  *exec.Cmd
	done chan struct{}
}

// startPrivateDockerd starts the engine, loads the pause image from the
// host's engine into it, and registers its removal.
func startPrivateDockerd(t *testing.T) *privateDockerd {
	t.Helper()
	dir, err := os.MkdirTemp("", "nsdkr")
	if err != nil {
		t.Fatal(err)
	}
	d := &privateDockerd{t: t, dir: dir, sock: filepath.Join(dir, "docker.sock")}
	t.Cleanup(d.remove)
	d.start()
	save := exec.Command("docker", "save", pauseImage)
	load := exec.Command("docker", "-H", d.endpoint(), "load")
	pipe, err := save.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	load.Stdin = pipe
	if err := save.Start(); err != nil {
		t.Fatal(err)
	}
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("loading %s into the private dockerd: %v\n%s", pauseImage, err, out)
	}
	if err := save.Wait(); err != nil {
		t.Fatalf("docker save %s: %v", pauseImage, err)
	}
	return d
}

func (d *privateDockerd) endpoint() string { return "unix://" + d.sock }

// start runs dockerd and waits until it answers.
func (d *privateDockerd) start() {
	d.t.Helper()
	logf, err := os.OpenFile(filepath.Join(d.dir, "dockerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	d.cmd = exec.Command("dockerd",
		"--data-root", filepath.Join(d.dir, "data"),
		"--exec-root", filepath.Join(d.dir, "exec"),
		"--pidfile", filepath.Join(d.dir, "docker.pid"),
		"--host", d.endpoint(),
		"--bridge", "none",
		"--iptables=false",
		"--ip-masq=false",
	)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		d.t.Fatalf("starting private dockerd: %v", err)
	}
	d.done = make(chan struct{})
	go func() {
		d.cmd.Wait()
		logf.Close()
		close(d.done)
	}()
	if !poll(startDeadline, func() bool {
		_, err := runCmd("docker", "-H", d.endpoint(), "version", "--format", "{{.Server.Version}}")
		return err == nil
	}) {
		d.t.Fatalf("private dockerd did not answer within %s\n%s", startDeadline, d.logTail())
	}
}

// stop stops the engine we started, by its PID, and waits for it.
func (d *privateDockerd) stop() {
	d.t.Helper()
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(stopDeadline):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// remove stops the engine, removes its containers first so that nothing
// stays mounted, and deletes its directory.
func (d *privateDockerd) remove() {
	select {
	case <-d.done:
	default:
		if out, err := runCmd("docker", "-H", d.endpoint(), "ps", "-aq"); err == nil && strings.TrimSpace(out) != "" {
			args := append([]string{"-H", d.endpoint(), "rm", "-f"}, strings.Fields(out)...)
			if out, err := runCmd("docker", args...); err != nil {
				d.t.Logf("cleanup: %v\n%s", err, out)
			}
		}
		d.stop()
	}
	// dockerd unmounts what it mounted on a clean stop; anything left is
	// unmounted lazily so the directory can go.
	if out, err := runCmd("sh", "-c", fmt.Sprintf("grep -o ' %s[^ ]*' /proc/self/mounts | sort -r | xargs -r umount -l", d.dir)); err != nil {
		d.t.Logf("cleanup: unmounting under %s: %v\n%s", d.dir, err, out)
	}
	if err := os.RemoveAll(d.dir); err != nil {
		d.t.Logf("cleanup: removing %s: %v", d.dir, err)
	}
}

func (d *privateDockerd) logTail() string {
	data, _ := os.ReadFile(filepath.Join(d.dir, "dockerd.log"))
	lines := strings.Split(string(data), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// docker runs the docker CLI against this engine.
func (d *privateDockerd) docker(args ...string) string {
	d.t.Helper()
	return mustRun(d.t, "docker", append([]string{"-H", d.endpoint()}, args...)...)
}
