package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Dockerd is a dockerd of the test's own, with its own data root, exec root
// and socket, so that the test may stop and restart it without touching
// the host's engine. It has no bridge and no iptables rules of its own:
// pods get their network from CNI anyway.
type Dockerd struct {
	Dir  string
	Sock string

	images   []string
	args     []string
	runtimes []extraRuntime
	// wrapperRunc is the runc the OCI wrapper execs (WithOCIWrapperRunc).
	wrapperRunc string

	mu   sync.Mutex
	proc *proc
}

// DockerdOption configures a private dockerd.
type DockerdOption func(*Dockerd)

// WithImages loads these images from the host's engine into the private
// one once it runs (it cannot pull: there is no registry).
func WithImages(refs ...string) DockerdOption {
	return func(d *Dockerd) { d.images = append(d.images, refs...) }
}

// WithDockerdArgs appends flags to dockerd's command line.
func WithDockerdArgs(args ...string) DockerdOption {
	return func(d *Dockerd) { d.args = append(d.args, args...) }
}

// AltRuntime is the name under which the test engines register runc a
// second time (WithRuntime here; hack/dockerd.sh and hack/docker29.sh for
// the engines `make e2e` uses), so that a test can run a pod with a
// runtime handler other than the default.
const AltRuntime = "netshim-alt"

// OCIWrapperRuntime is the runtime name netshim's OCI runtime wrapper
// (cmd/netshim-oci) has in an engine: with it, netshim's default
// --sandbox-netns=auto runs pods in the pause-less mode (pinned if they
// share a PID namespace).
const OCIWrapperRuntime = "netshim-oci"

// OCIWrapperBin is netshim's OCI runtime wrapper: $NETSHIM_OCI_BIN, else
// netshim-oci next to $NETSHIM_BIN (make build puts both in _output), or
// "" when neither exists.
func OCIWrapperBin() string {
	p := os.Getenv("NETSHIM_OCI_BIN")
	if p == "" {
		bin := os.Getenv("NETSHIM_BIN")
		if bin == "" {
			return ""
		}
		p = filepath.Join(filepath.Dir(bin), OCIWrapperRuntime)
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		return ""
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	return abs
}

// WithoutOCIWrapper leaves netshim's OCI wrapper out of the engine, which
// NewDockerd registers (as OCIWrapperRuntime) whenever OCIWrapperBin finds
// it: netshim then runs its pods in the docker netns mode there.
func WithoutOCIWrapper() DockerdOption {
	return func(d *Dockerd) {
		d.runtimes = slices.DeleteFunc(d.runtimes, func(rt extraRuntime) bool { return rt.name == OCIWrapperRuntime })
	}
}

// WithOCIWrapperRunc has netshim's OCI wrapper exec the runc at path
// (runtimeArgs ["--netshim-runc=PATH"] in the engine's config file, which
// --add-runtime cannot carry), as an operator gives pods with hostUsers:
// false a runc that makes idmapped mounts (1.2 or later) on an engine whose
// own is older (Debian's Docker 20.10 has runc 1.1.5). The engine's other
// containers keep its runc.
func WithOCIWrapperRunc(path string) DockerdOption {
	return func(d *Dockerd) { d.wrapperRunc = path }
}

// extraRuntime is a runtime registered with --add-runtime NAME=PATH.
type extraRuntime struct{ name, path string }

// WithRuntime registers an OCI runtime under name (dockerd --add-runtime,
// which Docker 20.10 and 29 both take). An empty path is the runc the
// engine runs by default: the one next to $E2E_DOCKERD when that is set
// (Docker 29 needs its own runc), else runc on PATH.
func WithRuntime(name, path string) DockerdOption {
	return func(d *Dockerd) { d.runtimes = append(d.runtimes, extraRuntime{name, path}) }
}

// EngineRunc is the runc a private engine runs by default: see WithRuntime.
func EngineRunc() (string, error) {
	if bin := os.Getenv("E2E_DOCKERD"); bin != "" {
		p := filepath.Join(filepath.Dir(bin), "runc")
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("E2E_DOCKERD is %s but there is no runc next to it: %w", bin, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("runc")
	if err != nil {
		return "", fmt.Errorf("no runc on PATH: %w", err)
	}
	return filepath.Abs(p)
}

// runtimeArgs are the --add-runtime flags of the registered runtimes.
func (d *Dockerd) runtimeArgs() ([]string, error) {
	var args []string
	for _, rt := range d.runtimes {
		if rt.name == OCIWrapperRuntime && d.wrapperRunc != "" {
			cfg, err := json.Marshal(map[string]any{"runtimes": map[string]any{
				OCIWrapperRuntime: map[string]any{"path": rt.path, "runtimeArgs": []string{"--netshim-runc=" + d.wrapperRunc}},
			}})
			if err != nil {
				return nil, err
			}
			file := filepath.Join(d.Dir, "daemon.json")
			if err := os.WriteFile(file, cfg, 0o644); err != nil {
				return nil, err
			}
			args = append(args, "--config-file", file)
			continue
		}
		path := rt.path
		if path == "" {
			var err error
			if path, err = EngineRunc(); err != nil {
				return nil, fmt.Errorf("runtime %s: %w", rt.name, err)
			}
		}
		if rt.name == "" || strings.ContainsAny(rt.name, "= ") || !filepath.IsAbs(path) {
			return nil, fmt.Errorf("runtime %q=%q: want a name without '=' or spaces and an absolute path", rt.name, path)
		}
		args = append(args, "--add-runtime", rt.name+"="+path)
	}
	return args, nil
}

// StartPrivateDockerd starts a private engine, loads the images, and
// registers its removal (containers, engine, mounts, directory).
func StartPrivateDockerd(t testing.TB, opts ...DockerdOption) *Dockerd {
	t.Helper()
	dir, err := os.MkdirTemp("", "nsdkr")
	if err != nil {
		t.Fatal(err)
	}
	d := NewDockerd(dir, opts...)
	t.Cleanup(func() { d.remove(t) })
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if err := d.LoadImages(); err != nil {
		t.Fatal(err)
	}
	return d
}

// NewDockerd makes, without starting it, a private engine whose socket,
// data, exec root and log are in dir (Remove deletes dir). It is the form
// for callers that are not tests; start it with Start, then LoadImages.
func NewDockerd(dir string, opts ...DockerdOption) *Dockerd {
	d := &Dockerd{Dir: dir, Sock: filepath.Join(dir, "docker.sock")}
	// As on the engines hack/dockerd.sh and hack/docker29.sh start: the
	// wrapper execs the runc on the engine's PATH (privateDockerdBin).
	if w := OCIWrapperBin(); w != "" {
		d.runtimes = append(d.runtimes, extraRuntime{OCIWrapperRuntime, w})
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

// LoadImages loads the WithImages images from the host's engine.
func (d *Dockerd) LoadImages() error {
	for _, ref := range d.images {
		if err := d.load(ref); err != nil {
			return err
		}
	}
	return nil
}

// LogPath is dockerd's log, in Dir.
func (d *Dockerd) LogPath() string { return d.logPath() }

// Endpoint is the engine's address for --docker-endpoint and docker -H.
func (d *Dockerd) Endpoint() string { return "unix://" + d.Sock }

func (d *Dockerd) logPath() string { return filepath.Join(d.Dir, "dockerd.log") }

// load copies an image from the host's engine (docker save | docker load).
func (d *Dockerd) load(ref string) error {
	ctx, cancel := context.WithTimeout(context.Background(), CommandDeadline)
	defer cancel()
	save := exec.CommandContext(ctx, "docker", "save", ref)
	load := exec.CommandContext(ctx, "docker", "-H", d.Endpoint(), "load")
	pipe, err := save.StdoutPipe()
	if err != nil {
		return err
	}
	load.Stdin = pipe
	if err := save.Start(); err != nil {
		return fmt.Errorf("docker save %s: %w", ref, err)
	}
	out, lerr := load.CombinedOutput()
	serr := save.Wait()
	if lerr != nil {
		return fmt.Errorf("loading %s into the private dockerd: %w\n%s", ref, lerr, out)
	}
	if serr != nil {
		return fmt.Errorf("docker save %s: %w", ref, serr)
	}
	return nil
}

// privateDockerdBin is the dockerd a private engine runs: $E2E_DOCKERD when
// set (`make e2e ENGINE=docker29` sets the Docker 29 build there, so a
// private engine is the same Docker as the one under test), else dockerd on
// PATH. An $E2E_DOCKERD's directory comes first on its PATH: Docker 29
// starts its own containerd from PATH, whose shim finds runc there, and the
// system's runc is too old for it.
func privateDockerdBin() (string, []string) {
	bin := os.Getenv("E2E_DOCKERD")
	if bin == "" {
		return "dockerd", nil
	}
	return bin, append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// Start runs dockerd and waits (at most StartTimeout) until it answers.
func (d *Dockerd) Start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proc != nil && !d.proc.exited() {
		return errors.New("private dockerd is already running")
	}
	rtArgs, err := d.runtimeArgs()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(d.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := append([]string{
		"--data-root", filepath.Join(d.Dir, "data"),
		"--exec-root", filepath.Join(d.Dir, "exec"),
		"--pidfile", filepath.Join(d.Dir, "docker.pid"),
		"--host", d.Endpoint(),
		"--bridge", "none",
		"--iptables=false",
		"--ip-masq=false",
	}, append(rtArgs, d.args...)...)
	bin, env := privateDockerdBin()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	p, err := startProc(cmd, logf)
	if err != nil {
		return err
	}
	d.proc = p
	if !Eventually(StartTimeout, func() bool {
		_, err := d.Docker("version", "--format", "{{.Server.Version}}")
		return err == nil
	}) {
		return fmt.Errorf("private dockerd did not answer within %s\n%s", StartTimeout, tail(d.logPath(), 30))
	}
	return nil
}

// running says whether the engine started last has not exited.
func (d *Dockerd) running() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.proc != nil && !d.proc.exited()
}

// Stop stops the engine with SIGTERM, by its PID, and waits for it
// (SIGKILL after StopTimeout). A stopped engine is left alone.
func (d *Dockerd) Stop() error {
	d.mu.Lock()
	p := d.proc
	d.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop("private dockerd", syscall.SIGTERM, StopTimeout)
}

// Kill is SIGKILL to the engine, as in a crash or an OOM kill: it gets no
// chance to stop its containers. The containerd it started dies with it
// (dockerd gives it a parent-death signal); the shims and containers live
// on, and Start runs a new dockerd on the same directories, which starts a
// containerd that finds them. A stopped engine is left alone.
//
// PID 1 on the development and CI machines does not reap orphans, so the
// dead containerd stays a zombie, and a new dockerd that finds its pid
// file takes it for running and waits for its socket in vain: Kill waits
// for it to die and removes its pid file, as a reaping init would have
// made moot.
func (d *Dockerd) Kill() error {
	d.mu.Lock()
	p := d.proc
	d.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.stop("private dockerd", syscall.SIGKILL, StopTimeout); err != nil {
		return err
	}
	pidFile := filepath.Join(d.Dir, "exec", "containerd", "containerd.pid")
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return nil // none was started, or it cleaned up
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("private dockerd's containerd pid file %s: %w", pidFile, err)
	}
	if !Eventually(StopTimeout, func() bool { return !procRunning("/proc", pid) }) {
		return nil // it outlives dockerd: the new one reuses it
	}
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Docker runs the docker CLI against this engine.
func (d *Dockerd) Docker(args ...string) (string, error) {
	return RunCmd("docker", append([]string{"-H", d.Endpoint()}, args...)...)
}

// MustDocker is Docker for a test.
func (d *Dockerd) MustDocker(t testing.TB, args ...string) string {
	t.Helper()
	return MustRun(t, "docker", append([]string{"-H", d.Endpoint()}, args...)...)
}

// LogTail returns the last lines of dockerd's log.
func (d *Dockerd) LogTail(n int) string { return tail(d.logPath(), n) }

// remove is Remove for a test; what fails is logged.
func (d *Dockerd) remove(t testing.TB) {
	if err := d.Remove(); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// Remove removes the containers first, so that nothing stays mounted,
// stops the engine (an error if it needed SIGKILL), kills the shims and
// containers it left, and deletes its directory. It goes on after a
// failure and reports them all.
func (d *Dockerd) Remove() error {
	var errs []error
	if d.running() {
		if out, err := d.Docker("ps", "-aq"); err == nil && strings.TrimSpace(out) != "" {
			if out, err := d.Docker(append([]string{"rm", "-f"}, strings.Fields(out)...)...); err != nil {
				errs = append(errs, fmt.Errorf("removing the containers: %w\n%s", err, out))
			}
		}
		if err := d.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if n := killStrays("/proc", d.Dir); n > 0 {
		errs = append(errs, fmt.Errorf("killed %d container process(es) and shim(s) the private dockerd left running", n))
	}
	// dockerd unmounts what it mounted on a clean stop; anything left is
	// unmounted lazily so the directory can go.
	if out, err := RunCmd("sh", "-c", fmt.Sprintf("grep -o ' %s[^ ]*' /proc/self/mounts | sort -r | xargs -r umount -l", d.Dir)); err != nil {
		errs = append(errs, fmt.Errorf("unmounting under %s: %w\n%s", d.Dir, err, out))
	}
	if err := os.RemoveAll(d.Dir); err != nil {
		errs = append(errs, fmt.Errorf("removing %s: %w", d.Dir, err))
	}
	return errors.Join(errs...)
}
