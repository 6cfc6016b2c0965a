package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
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

	"github.com/distribution/reference"
)

const (
	// DefaultRegistryAddr is where a Registry listens unless told
	// otherwise: loopback only, so that nothing outside the machine can
	// push to it, and a port Docker trusts without TLS (127.0.0.0/8 is an
	// insecure registry range by default).
	DefaultRegistryAddr = "127.0.0.1:5000"
	// PackageRegistryPidFile is where the service that Debian's
	// docker-registry package starts keeps its PID.
	PackageRegistryPidFile = "/var/run/docker-registry.pid"
	// RegistryStopTimeout bounds the wait for docker-registry to exit
	// after SIGTERM, after which it is killed.
	RegistryStopTimeout = 10 * time.Second
	registryComm        = "docker-registry"
)

// registryConfig is what the RegistryOptions set.
type registryConfig struct {
	bin          string
	addr         string
	dir          string
	logPath      string
	startTimeout time.Duration
	// lanAddr is a Lan's host address the registry may listen on
	// (WithRegistryOnLan), besides loopback.
	lanAddr string
}

// RegistryOption configures a Registry.
type RegistryOption func(*registryConfig)

// WithRegistryBinary runs bin (default: docker-registry on PATH, Debian's
// package).
func WithRegistryBinary(bin string) RegistryOption {
	return func(c *registryConfig) { c.bin = bin }
}

// WithRegistryAddr listens on addr, an IPv4 loopback address and port
// (default DefaultRegistryAddr).
func WithRegistryAddr(addr string) RegistryOption {
	return func(c *registryConfig) { c.addr = addr }
}

// WithRegistryOnLan listens on the host's address on lan, port: the nodes
// of a Lan reach it there (127.0.0.1 is each node's own loopback). The
// address is reachable from the lan's namespaces only, which the test made.
func WithRegistryOnLan(lan *Lan, port int) RegistryOption {
	return func(c *registryConfig) {
		c.lanAddr = lan.HostIP().String()
		c.addr = net.JoinHostPort(c.lanAddr, strconv.Itoa(port))
	}
}

// WithRegistryPort listens on 127.0.0.1:port: for when another program
// holds port 5000.
func WithRegistryPort(port int) RegistryOption {
	return func(c *registryConfig) { c.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
}

// WithRegistryDir keeps the config and the storage in dir (default: a new
// temp dir, removed at cleanup). The caller owns dir.
func WithRegistryDir(dir string) RegistryOption {
	return func(c *registryConfig) { c.dir = dir }
}

// WithRegistryLogFile sends docker-registry's output to path (default
// registry.log in the registry's dir).
func WithRegistryLogFile(path string) RegistryOption {
	return func(c *registryConfig) { c.logPath = path }
}

// WithRegistryStartTimeout bounds the wait for GET /v2/ to answer
// (default StartTimeout).
func WithRegistryStartTimeout(d time.Duration) RegistryOption {
	return func(c *registryConfig) { c.startTimeout = d }
}

// DockerCLI runs the docker CLI against one engine. *Dockerd is one;
// EngineCLI is the engine of DOCKER_HOST or any other address.
type DockerCLI interface {
	Docker(args ...string) (string, error)
}

// EngineCLI runs the docker CLI with -H set to its value, or, when empty,
// against the engine DOCKER_HOST (or the CLI's default) names.
type EngineCLI string

// Docker runs `docker [-H host] args...` with CommandDeadline.
func (h EngineCLI) Docker(args ...string) (string, error) {
	if h != "" {
		args = append([]string{"-H", string(h)}, args...)
	}
	return RunCmd("docker", args...)
}

// taggedName is a name Push gave a local image, and the engine it is in.
type taggedName struct {
	cli  DockerCLI
	name string
}

// Registry is Debian's docker-registry run as a child process, serving on
// a loopback address with its storage in a directory of its own: images
// pushed to it can be pulled by name with no internet.
type Registry struct {
	cfg    registryConfig
	ownDir bool

	// Where things are; fixed for the life of the Registry.
	Dir, ConfigPath, StorageDir, LogPath string

	mu     sync.Mutex
	proc   *proc
	tagged []taggedName
}

// NewRegistry checks the options, creates the directories and writes the
// config; it does not start docker-registry.
func NewRegistry(opts ...RegistryOption) (*Registry, error) {
	c := registryConfig{bin: registryComm, addr: DefaultRegistryAddr, startTimeout: StartTimeout}
	for _, o := range opts {
		o(&c)
	}
	if err := checkRegistryAddr(c.addr, c.lanAddr); err != nil {
		return nil, err
	}
	r := &Registry{cfg: c}
	if c.dir == "" {
		dir, err := os.MkdirTemp("", "nsreg")
		if err != nil {
			return nil, err
		}
		c.dir, r.ownDir = dir, true
	}
	r.Dir = c.dir
	r.ConfigPath = filepath.Join(c.dir, "registry.yml")
	r.StorageDir = filepath.Join(c.dir, "storage")
	r.LogPath = c.logPath
	if r.LogPath == "" {
		r.LogPath = filepath.Join(c.dir, "registry.log")
	}
	if err := os.MkdirAll(r.StorageDir, 0o755); err != nil {
		r.removeOwnDir()
		return nil, err
	}
	if err := os.WriteFile(r.ConfigPath, []byte(r.Config()), 0o644); err != nil {
		r.removeOwnDir()
		return nil, fmt.Errorf("writing %s: %w", r.ConfigPath, err)
	}
	return r, nil
}

// checkRegistryAddr accepts an IPv4 loopback address with a port, or the
// host's address on a test's Lan (lanAddr, when not empty): the registry
// has no TLS and no auth, so it must not be reachable from elsewhere.
// Docker pushes to it without TLS only on 127.0.0.0/8 (or where
// --insecure-registry says).
func checkRegistryAddr(addr, lanAddr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("registry address %q: %w (want 127.0.0.1:PORT)", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() == nil || !ip.IsLoopback() && (lanAddr == "" || host != lanAddr) {
		return fmt.Errorf("registry address %q: want an IPv4 loopback address such as 127.0.0.1:5000 (no TLS, no auth: it must not be reachable from other hosts)", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("registry address %q: port %q is not in 1-65535", addr, port)
	}
	return nil
}

func (r *Registry) removeOwnDir() {
	if r.ownDir {
		os.RemoveAll(r.Dir)
	}
}

// StartRegistry starts a registry for a test and registers its cleanup:
// the local names Push made are removed, docker-registry is stopped and
// its temp dir removed; its log is shown if the test failed.
func StartRegistry(t testing.TB, opts ...RegistryOption) *Registry {
	t.Helper()
	r, err := NewRegistry(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("docker-registry log:\n%s", r.LogTail(40))
		}
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.startTimeout+5*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// Addr is the address docker-registry listens on.
func (r *Registry) Addr() string { return r.cfg.addr }

// Prefix is the registry's name in image references ("localhost:5000"):
// what critest's -registry-prefix takes. 127.0.0.1 is named localhost,
// the name Docker knows as a registry on this machine.
func (r *Registry) Prefix() string {
	host, port, _ := net.SplitHostPort(r.cfg.addr)
	if host == "127.0.0.1" {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// URL is the registry's HTTP base URL.
func (r *Registry) URL() string { return "http://" + r.cfg.addr }

// Config is the YAML config docker-registry serves with: storage in
// StorageDir with deletes allowed, the address, warnings only, no access
// log (every layer request would be a line).
func (r *Registry) Config() string {
	return fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, strconv.Quote(r.StorageDir), strconv.Quote(r.cfg.addr))
}

// Args is docker-registry's command line (without the binary).
func (r *Registry) Args() []string { return []string{"serve", r.ConfigPath} }

// Start checks that the address is free, runs docker-registry in a
// session of its own (a Ctrl-C meant for the caller does not reach it; it
// gets SIGTERM if the caller dies) and waits until GET /v2/ answers 200.
// On failure nothing is left running.
func (r *Registry) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.proc != nil && !r.proc.exited() {
		r.mu.Unlock()
		return errors.New("docker-registry is already running")
	}
	// A clear error beats docker-registry's own exit with "address in
	// use", which would only show in its log.
	l, err := net.Listen("tcp", r.cfg.addr)
	if err != nil {
		r.mu.Unlock()
		return fmt.Errorf("registry address %s is not free (pick another port): %w", r.cfg.addr, err)
	}
	l.Close()
	logf, err := os.OpenFile(r.LogPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	cmd := exec.Command(r.cfg.bin, r.Args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
	p, err := startProc(cmd, logf)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	r.proc = p
	r.mu.Unlock()
	client := &http.Client{Timeout: time.Second}
	ready := EventuallyCtx(ctx, r.cfg.startTimeout, func() bool {
		return p.exited() || r.answers(ctx, client)
	})
	if p.exited() {
		return fmt.Errorf("docker-registry exited during start-up: %v\n%s", p.exitErr(), r.LogTail(20))
	}
	if !ready {
		_ = p.stop(registryComm, syscall.SIGTERM, RegistryStopTimeout)
		return fmt.Errorf("docker-registry did not answer GET %s/v2/ within %s (%v)\n%s",
			r.URL(), r.cfg.startTimeout, ctx.Err(), r.LogTail(20))
	}
	return nil
}

// answers says whether GET /v2/ answers 200, which the registry does once
// it serves (the API version check every client makes first).
func (r *Registry) answers(ctx context.Context, client *http.Client) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL()+"/v2/", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Pid is docker-registry's process ID (0 before any start).
func (r *Registry) Pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return 0
	}
	return r.proc.pid()
}

// Running says whether docker-registry runs.
func (r *Registry) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc != nil && !r.proc.exited()
}

// Stop stops docker-registry by its PID: SIGTERM, then SIGKILL after
// RegistryStopTimeout (which is then an error). A registry that does not
// run is left alone.
func (r *Registry) Stop() error {
	r.mu.Lock()
	p := r.proc
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop(registryComm, syscall.SIGTERM, RegistryStopTimeout)
}

// Close removes the local names Push made, stops docker-registry and
// removes its temp dir (not a WithRegistryDir one). It may be called
// again.
func (r *Registry) Close(ctx context.Context) error {
	errs := []error{r.Untag(ctx), r.Stop()}
	r.removeOwnDir()
	return errors.Join(errs...)
}

// LogTail returns the last lines of docker-registry's log.
func (r *Registry) LogTail(lines int) string {
	return "---- last lines of " + r.LogPath + " ----\n" + tail(r.LogPath, lines)
}

// Name is the name ref has in this registry: its repository path (without
// the registry it came from) and tag under Prefix(), e.g.
// registry.k8s.io/e2e-test-images/busybox:1.29-2 ->
// localhost:5000/e2e-test-images/busybox:1.29-2. A ref without a tag gets
// "latest"; one with a digest is refused (a push cannot keep it).
func (r *Registry) Name(ref string) (string, error) {
	return r.NameWithTag(ref, "")
}

// NameWithTag is Name with another tag (empty: ref's own).
func (r *Registry) NameWithTag(ref, tag string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	if _, ok := named.(reference.Digested); ok {
		return "", fmt.Errorf("image reference %q has a digest, which a push to another registry cannot keep: name it by tag", ref)
	}
	if tag == "" {
		tag = "latest"
		if t, ok := named.(reference.Tagged); ok {
			tag = t.Tag()
		}
	}
	name := r.Prefix() + "/" + reference.Path(named) + ":" + tag
	if _, err := reference.ParseNormalizedNamed(name); err != nil {
		return "", fmt.Errorf("tag %q for %q: %w", tag, ref, err)
	}
	return name, nil
}

// Push tags each local image ref with its Name in this registry and
// pushes it, and returns those names. The names stay in the engine until
// Untag (or Close) removes them.
func (r *Registry) Push(ctx context.Context, cli DockerCLI, refs ...string) ([]string, error) {
	var names []string
	for _, ref := range refs {
		name, err := r.Name(ref)
		if err != nil {
			return names, err
		}
		if err := r.PushAs(ctx, cli, ref, name); err != nil {
			return names, err
		}
		names = append(names, name)
	}
	return names, nil
}

// PushAs tags the local image ref as name, which must be in this registry
// (Prefix()/...), and pushes it. The name is remembered for Untag even
// when the push fails, so that no tag of the run is left behind.
func (r *Registry) PushAs(ctx context.Context, cli DockerCLI, ref, name string) error {
	if !strings.HasPrefix(name, r.Prefix()+"/") {
		return fmt.Errorf("push %s as %s: the name is not in the registry %s", ref, name, r.Prefix())
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if out, err := cli.Docker("tag", ref, name); err != nil {
		return fmt.Errorf("docker tag %s %s: %w\n%s", ref, name, err, strings.TrimSpace(out))
	}
	r.mu.Lock()
	r.tagged = append(r.tagged, taggedName{cli, name})
	r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if out, err := cli.Docker("push", name); err != nil {
		return fmt.Errorf("docker push %s: %w\n%s", name, err, lastLines(out, 20))
	}
	return nil
}

// Untag removes from the engines the names Push and PushAs gave local
// images (the images keep their other names); a name already gone is
// fine. The registry's own copies go with its storage.
func (r *Registry) Untag(ctx context.Context) error {
	r.mu.Lock()
	tagged := r.tagged
	r.tagged = nil
	r.mu.Unlock()
	var errs []error
	for i, tn := range tagged {
		if err := ctx.Err(); err != nil {
			r.mu.Lock()
			r.tagged = append(r.tagged, tagged[i:]...)
			r.mu.Unlock()
			return errors.Join(append(errs, err)...)
		}
		if out, err := tn.cli.Docker("image", "rm", tn.name); err != nil && !isNoSuchImage(out) {
			errs = append(errs, fmt.Errorf("docker image rm %s: %w\n%s", tn.name, err, strings.TrimSpace(out)))
		}
	}
	return errors.Join(errs...)
}

// isNoSuchImage says whether docker's output reports a missing image
// (the wording differs between Docker 20.10 and 29).
func isNoSuchImage(out string) bool {
	out = strings.ToLower(out)
	return strings.Contains(out, "no such image") || strings.Contains(out, "not found")
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// StopPackageRegistry stops the docker-registry service Debian's package
// starts on install (it listens on :5000 on every address, in the way of
// a Registry on 127.0.0.1:5000): the process pidFile names, if it is a
// live docker-registry. It returns the PID it stopped, 0 if none. A PID
// that now belongs to another program is left alone.
func StopPackageRegistry(pidFile string) (int, error) {
	data, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s holds no PID: %q", pidFile, data)
	}
	if !procAlive("/proc", pid, registryComm) {
		return 0, nil
	}
	if err := stopPID("/proc", pid, registryComm, RegistryStopTimeout); err != nil {
		return pid, err
	}
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return pid, err
	}
	return pid, nil
}

// procAlive says whether pid is a live (not zombie: PID 1 here does not
// reap orphans) process whose command name is comm.
func procAlive(proc string, pid int, comm string) bool {
	dir := filepath.Join(proc, strconv.Itoa(pid))
	name, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil || strings.TrimSpace(string(name)) != comm {
		return false
	}
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(stat[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// stopPID stops a process that is not our child: SIGTERM, then SIGKILL
// after timeout (which is then an error).
func stopPID(proc string, pid int, comm string, timeout time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("signalling %s (pid %d): %w", comm, pid, err)
	}
	if Eventually(timeout, func() bool { return !procAlive(proc, pid, comm) }) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return fmt.Errorf("%s (pid %d) did not exit within %s of SIGTERM; killed", comm, pid, timeout)
}
