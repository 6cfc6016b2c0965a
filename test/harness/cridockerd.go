package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// CRIDockerdStartTimeout bounds the wait for a started cri-dockerd to
	// answer CRI Version (it first waits for Docker and loads its CNI
	// config).
	CRIDockerdStartTimeout = 60 * time.Second
	// CRIDockerdStopTimeout bounds the wait for cri-dockerd to exit after
	// SIGTERM, after which it is killed.
	CRIDockerdStopTimeout = 20 * time.Second
)

// criDockerdConfig is what the CRIDockerdOptions set.
type criDockerdConfig struct {
	bin            string
	dir            string
	sock           string
	rootDir        string
	dockerEndpoint string
	confDir        string
	binDirs        string
	cacheDir       string
	pauseImage     string
	networkPlugin  string
	logPath        string
	logLevel       string
	args           []string
	startTimeout   time.Duration
	stopTimeout    time.Duration
}

// CRIDockerdOption configures a CRIDockerd.
type CRIDockerdOption func(*criDockerdConfig)

// WithCRIDockerdBinary runs bin (default: $CRI_DOCKERD_BIN).
func WithCRIDockerdBinary(bin string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.bin = bin }
}

// WithCRIDockerdDir puts the socket, root dir, CNI conf and cache dirs and
// the log in dir, unless set one by one (default: a new temp dir, removed
// by Remove). The caller owns dir.
func WithCRIDockerdDir(dir string) CRIDockerdOption { return func(c *criDockerdConfig) { c.dir = dir } }

// WithCRIDockerdSocket serves the CRI on this unix socket path
// (--container-runtime-endpoint).
func WithCRIDockerdSocket(path string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.sock = path }
}

// WithCRIDockerdRootDir sets --cri-dockerd-root-directory, where
// cri-dockerd keeps its sandbox checkpoints (ROOT/sandbox).
func WithCRIDockerdRootDir(dir string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.rootDir = dir }
}

// WithCRIDockerdDockerEndpoint sets --docker-endpoint (default:
// $DOCKER_HOST if set, else cri-dockerd's own default).
func WithCRIDockerdDockerEndpoint(ep string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.dockerEndpoint = ep }
}

// WithCRIDockerdCNIConfDir sets --cni-conf-dir.
func WithCRIDockerdCNIConfDir(dir string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.confDir = dir }
}

// WithCRIDockerdCNIBinDir sets --cni-bin-dir, a comma-separated list
// (default: $CNI_BIN_DIR, else /usr/lib/cni).
func WithCRIDockerdCNIBinDir(dirs string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.binDirs = dirs }
}

// WithCRIDockerdCNICacheDir sets --cni-cache-dir, libcni's cache of the
// results and configs of the ADDs it ran.
func WithCRIDockerdCNICacheDir(dir string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.cacheDir = dir }
}

// WithCRIDockerdPauseImage sets --pod-infra-container-image (default
// DefaultPauseImage).
func WithCRIDockerdPauseImage(ref string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.pauseImage = ref }
}

// WithCRIDockerdNetworkPlugin sets --network-plugin (default cni).
func WithCRIDockerdNetworkPlugin(name string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.networkPlugin = name }
}

// WithCRIDockerdLog sends cri-dockerd's output to path.
func WithCRIDockerdLog(path string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.logPath = path }
}

// WithCRIDockerdLogLevel sets --log-level, a logrus level: debug, info
// (the default), warn, error.
func WithCRIDockerdLogLevel(level string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.logLevel = level }
}

// WithCRIDockerdArgs appends flags to the command line, after the
// harness's own: for a flag given twice the later one wins.
func WithCRIDockerdArgs(args ...string) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.args = append(c.args, args...) }
}

// WithCRIDockerdTimeouts bounds the wait for the CRI to answer after a
// start and for the exit after SIGTERM (defaults CRIDockerdStartTimeout,
// CRIDockerdStopTimeout).
func WithCRIDockerdTimeouts(start, stop time.Duration) CRIDockerdOption {
	return func(c *criDockerdConfig) { c.startTimeout, c.stopTimeout = start, stop }
}

var logrusLevels = []string{"trace", "debug", "info", "warn", "warning", "error", "fatal", "panic"}

func (c *criDockerdConfig) validate() error {
	var errs []error
	if c.bin == "" {
		errs = append(errs, errors.New("no cri-dockerd binary: set CRI_DOCKERD_BIN or pass WithCRIDockerdBinary (hack/build-cri-dockerd.sh builds one)"))
	}
	for name, p := range map[string]string{"dir": c.dir, "socket": c.sock, "root dir": c.rootDir,
		"CNI conf dir": c.confDir, "CNI cache dir": c.cacheDir, "log": c.logPath} {
		if p != "" && !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("cri-dockerd %s %q is not an absolute path", name, p))
		}
	}
	for _, d := range strings.Split(c.binDirs, ",") {
		if !filepath.IsAbs(d) {
			errs = append(errs, fmt.Errorf("cri-dockerd CNI bin dir %q is not an absolute path", d))
		}
	}
	ok := false
	for _, l := range logrusLevels {
		ok = ok || c.logLevel == l
	}
	if !ok {
		errs = append(errs, fmt.Errorf("cri-dockerd log level %q: want one of %s", c.logLevel, strings.Join(logrusLevels, ", ")))
	}
	if c.networkPlugin == "" || strings.ContainsAny(c.networkPlugin, " =") {
		errs = append(errs, fmt.Errorf("bad cri-dockerd network plugin %q", c.networkPlugin))
	}
	if c.startTimeout <= 0 || c.stopTimeout <= 0 {
		errs = append(errs, errors.New("cri-dockerd start and stop timeouts must be positive"))
	}
	return errors.Join(errs...)
}

// CRIDockerd is Mirantis' cri-dockerd run as a child process: the runtime
// a node runs before it moves to netshim. It can be stopped and started
// again on the same directories; its root dir (the sandbox checkpoints)
// and CNI cache outlive Stop, as a node's do.
type CRIDockerd struct {
	cfg    criDockerdConfig
	ownDir bool

	// Where things are; fixed for the life of the CRIDockerd.
	Dir, Sock, RootDir, ConfDir, CacheDir, LogPath string

	// The process, its CRI client and Version answer (criserver.go).
	criServer
}

// NewCRIDockerd resolves and checks the options and creates the
// directories; it does not start cri-dockerd.
func NewCRIDockerd(opts ...CRIDockerdOption) (*CRIDockerd, error) {
	c := criDockerdConfig{
		bin:            os.Getenv("CRI_DOCKERD_BIN"),
		binDirs:        os.Getenv("CNI_BIN_DIR"),
		dockerEndpoint: os.Getenv("DOCKER_HOST"),
		pauseImage:     DefaultPauseImage,
		networkPlugin:  "cni",
		logLevel:       "info",
		startTimeout:   CRIDockerdStartTimeout,
		stopTimeout:    CRIDockerdStopTimeout,
	}
	if c.binDirs == "" {
		c.binDirs = "/usr/lib/cni"
	}
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	d := &CRIDockerd{cfg: c}
	if c.dir == "" {
		// Not t.TempDir: the socket path must stay well under the 108
		// bytes of a unix socket address.
		dir, err := os.MkdirTemp("", "nscrid")
		if err != nil {
			return nil, err
		}
		c.dir, d.ownDir = dir, true
	}
	pick := func(v, def string) string {
		if v != "" {
			return v
		}
		return filepath.Join(c.dir, def)
	}
	d.cfg = c
	d.Dir = c.dir
	d.Sock = pick(c.sock, "cri-dockerd.sock")
	d.RootDir = pick(c.rootDir, "root")
	d.ConfDir = pick(c.confDir, "net.d")
	d.CacheDir = pick(c.cacheDir, "cnicache")
	d.LogPath = pick(c.logPath, "cri-dockerd.log")
	d.criServer = criServer{name: "cri-dockerd", sock: d.Sock, logPath: d.LogPath}
	if len(d.Sock) > maxSockPath {
		d.removeOwnDir()
		return nil, fmt.Errorf("socket path %s is too long for a unix socket: set TMPDIR to a shorter directory", d.Sock)
	}
	for _, dir := range []string{d.RootDir, d.ConfDir, d.CacheDir, filepath.Dir(d.Sock), filepath.Dir(d.LogPath)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			d.removeOwnDir()
			return nil, err
		}
	}
	return d, nil
}

func (d *CRIDockerd) removeOwnDir() {
	if d.ownDir {
		os.RemoveAll(d.Dir)
	}
}

// Args is cri-dockerd's command line (without the binary).
func (d *CRIDockerd) Args() []string {
	c := d.cfg
	args := []string{
		"--container-runtime-endpoint", "unix://" + d.Sock,
		"--cri-dockerd-root-directory", d.RootDir,
		"--network-plugin", c.networkPlugin,
		"--cni-conf-dir", d.ConfDir,
		"--cni-bin-dir", c.binDirs,
		"--cni-cache-dir", d.CacheDir,
		"--pod-infra-container-image", c.pauseImage,
		// Its streaming server (exec, attach, port-forward) otherwise
		// listens on every address of the host.
		"--streaming-bind-addr", "127.0.0.1",
		"--log-level", c.logLevel,
	}
	if c.dockerEndpoint != "" {
		args = append(args, "--docker-endpoint", c.dockerEndpoint)
	}
	return append(args, c.args...)
}

// StartCRIDockerd starts cri-dockerd for a test and registers its
// cleanup: it is stopped (SIGTERM), its own temp dir removed, and its
// log's tail shown if the test failed.
func StartCRIDockerd(t testing.TB, opts ...CRIDockerdOption) *CRIDockerd {
	t.Helper()
	d, err := NewCRIDockerd(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logTail := d.LogTail(40)
		if err := d.Stop(); err != nil {
			t.Errorf("stopping cri-dockerd: %v", err)
		}
		if t.Failed() {
			t.Logf("cri-dockerd log (%s):\n%s", d.LogPath, logTail)
		}
		d.Remove()
	})
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.startTimeout+5*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatalf("%v\n%s", err, d.LogTail(40))
	}
	v := d.Version()
	t.Logf("cri-dockerd %s (%s, CRI %s) serves on %s", v.GetRuntimeVersion(), v.GetRuntimeName(), v.GetRuntimeApiVersion(), d.Sock)
	return d
}

// Start runs cri-dockerd and waits until it answers CRI Version; it fails
// fast when cri-dockerd exits meanwhile. The log is appended to.
func (d *CRIDockerd) Start(ctx context.Context) error {
	cmd := exec.Command(d.cfg.bin, d.Args()...)
	// Its own process group: a Ctrl-C meant for the test reaches the test
	// only, which then stops cri-dockerd; SIGTERM if the test dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	p, err := d.start(ctx, cmd, false, d.cfg.startTimeout)
	if err != nil && p != nil {
		// Not left running: a cri-dockerd that never answered is no use.
		return errors.Join(err, p.stop("cri-dockerd", syscall.SIGTERM, d.cfg.stopTimeout))
	}
	return err
}

// Stop sends SIGTERM and waits (at most the stop timeout, then SIGKILL,
// which is then an error) for cri-dockerd to exit, as
// `systemctl stop cri-docker` does; it must exit 0. Its pods keep running
// in Docker. A cri-dockerd that is not running is left alone, so Stop may
// be called again.
func (d *CRIDockerd) Stop() error {
	p, err := d.stop(syscall.SIGTERM, d.cfg.stopTimeout)
	if err != nil || p == nil {
		return err
	}
	if err := p.exitErr(); err != nil {
		return fmt.Errorf("cri-dockerd exited with %v after SIGTERM\n%s", err, tail(d.LogPath, 15))
	}
	return nil
}

// Remove stops cri-dockerd and removes its own temp dir (none with
// WithCRIDockerdDir).
func (d *CRIDockerd) Remove() error {
	err := d.Stop()
	d.removeOwnDir()
	return err
}

// CheckpointDir is where cri-dockerd keeps one checkpoint per sandbox.
func (d *CRIDockerd) CheckpointDir() string { return filepath.Join(d.RootDir, "sandbox") }

// LogTail returns the last lines of cri-dockerd's log.
func (d *CRIDockerd) LogTail(n int) string { return tail(d.LogPath, n) }
