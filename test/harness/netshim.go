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

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// DefaultPauseImage is the pod infra image hack/images.sh builds.
	DefaultPauseImage = "registry.k8s.io/pause:3.10"
	// StartTimeout bounds the wait for a started netshim to answer.
	StartTimeout = 30 * time.Second
	// StopTimeout bounds the wait for netshim to exit after a signal,
	// after which it is killed.
	StopTimeout = 20 * time.Second
	// RPCTimeout bounds one CRI call made by the harness itself.
	RPCTimeout = 2 * time.Minute
	// maxSockPath leaves room under the 108 bytes of a unix socket address.
	maxSockPath = 100
)

// netshimConfig is what the NetshimOptions set.
type netshimConfig struct {
	bin            string
	dir            string
	sock           string
	rootDir        string
	confDir        string
	cacheDir       string
	logPath        string
	cniBinDirs     string
	dockerEndpoint string
	pauseImage     string
	verbosity      int
	conflist       []ConflistOption
	network        []string
	args           []string
	processGroup   bool
	startTimeout   time.Duration
	cleanupNS      string
	netnsDir       string
	sandboxNetNS   string
}

// NetshimOption configures a Netshim.
type NetshimOption func(*netshimConfig)

// WithBinary runs bin (default: $NETSHIM_BIN).
func WithBinary(bin string) NetshimOption { return func(c *netshimConfig) { c.bin = bin } }

// WithDir puts the socket, root dir, conf dir, cache dir and log in dir
// (default: a new temp dir, removed at cleanup). The caller owns dir.
func WithDir(dir string) NetshimOption { return func(c *netshimConfig) { c.dir = dir } }

// WithSocket serves on this unix socket path.
func WithSocket(path string) NetshimOption { return func(c *netshimConfig) { c.sock = path } }

// WithRootDir sets --root-dir.
func WithRootDir(dir string) NetshimOption { return func(c *netshimConfig) { c.rootDir = dir } }

// WithCNIConfDir sets --cni-conf-dir.
func WithCNIConfDir(dir string) NetshimOption { return func(c *netshimConfig) { c.confDir = dir } }

// WithNetNSDir sets --netns-dir (default: netns in the netshim's directory).
func WithNetNSDir(dir string) NetshimOption { return func(c *netshimConfig) { c.netnsDir = dir } }

// WithSandboxNetNS sets --sandbox-netns (default: $NETSHIM_SANDBOX_NETNS,
// else netshim's own default, auto).
func WithSandboxNetNS(mode string) NetshimOption {
	return func(c *netshimConfig) { c.sandboxNetNS = mode }
}

// WithCNICacheDir sets --cni-cache-dir.
func WithCNICacheDir(dir string) NetshimOption { return func(c *netshimConfig) { c.cacheDir = dir } }

// WithLogFile sends netshim's output to path.
func WithLogFile(path string) NetshimOption { return func(c *netshimConfig) { c.logPath = path } }

// WithCNIBinDir sets --cni-bin-dir (default: $CNI_BIN_DIR, else
// /usr/lib/cni).
func WithCNIBinDir(dirs string) NetshimOption { return func(c *netshimConfig) { c.cniBinDirs = dirs } }

// WithCNIConfig writes a conflist built from opts into the conf dir before
// the first start.
func WithCNIConfig(opts ...ConflistOption) NetshimOption {
	return func(c *netshimConfig) { c.conflist = append(c.conflist, opts...) }
}

// WithKubenet selects the built-in kubenet network over podCIDR (one, or
// an IPv4,IPv6 pair); bridge and ipamDir, when not empty, keep it off the
// host's cbr0 and /var/lib/cni/networks.
func WithKubenet(podCIDR, bridge, ipamDir string) NetshimOption {
	return func(c *netshimConfig) {
		c.network = []string{"--network-plugin=kubenet"}
		if podCIDR != "" {
			c.network = append(c.network, "--pod-cidr="+podCIDR)
		}
		if bridge != "" {
			c.network = append(c.network, "--kubenet-bridge="+bridge)
		}
		if ipamDir != "" {
			c.network = append(c.network, "--kubenet-ipam-dir="+ipamDir)
		}
	}
}

// WithDockerEndpoint points netshim at another engine than the host's
// (default: $DOCKER_HOST if set, else netshim's own default).
func WithDockerEndpoint(ep string) NetshimOption {
	return func(c *netshimConfig) { c.dockerEndpoint = ep }
}

// WithPauseImage sets --pod-infra-container-image.
func WithPauseImage(ref string) NetshimOption { return func(c *netshimConfig) { c.pauseImage = ref } }

// WithVerbosity sets -v (default 4).
func WithVerbosity(v int) NetshimOption { return func(c *netshimConfig) { c.verbosity = v } }

// WithArgs appends flags to the command line, after the harness's own:
// for a flag given twice the later one wins.
func WithArgs(args ...string) NetshimOption {
	return func(c *netshimConfig) { c.args = append(c.args, args...) }
}

// WithOwnProcessGroup starts netshim in a process group of its own, so
// that a Ctrl-C meant for the caller reaches the caller only (which then
// cleans up through netshim), and has it get SIGTERM if the caller dies.
func WithOwnProcessGroup() NetshimOption { return func(c *netshimConfig) { c.processGroup = true } }

// WithStartTimeout bounds the wait for the CRI to answer (default
// StartTimeout).
func WithStartTimeout(d time.Duration) NetshimOption {
	return func(c *netshimConfig) { c.startTimeout = d }
}

// WithCleanupNamespace has the test cleanup stop and remove, through
// netshim, every sandbox of this pod namespace before stopping netshim.
func WithCleanupNamespace(ns string) NetshimOption {
	return func(c *netshimConfig) { c.cleanupNS = ns }
}

// Netshim is the netshim daemon run as a child process. It can be
// stopped, killed and started again on the same directories, as a node's
// netshim is across restarts.
type Netshim struct {
	cfg    netshimConfig
	ownDir bool

	// Where things are; fixed for the life of the Netshim. NetNSDir
	// holds its pinned pod network namespaces (--netns-dir).
	Dir, Sock, RootDir, ConfDir, CacheDir, LogPath, NetNSDir string

	// The process, its CRI client and Version answer (criserver.go).
	criServer
}

// NewNetshim resolves the options and creates the directories; it does
// not start the daemon.
func NewNetshim(opts ...NetshimOption) (*Netshim, error) {
	c := netshimConfig{
		bin:        os.Getenv("NETSHIM_BIN"),
		cniBinDirs: os.Getenv("CNI_BIN_DIR"),
		// The engine under test: `make e2e ENGINE=docker29` points
		// DOCKER_HOST (and so the docker CLI the tests run) at a private
		// engine, and netshim must talk to the same one.
		dockerEndpoint: os.Getenv("DOCKER_HOST"),
		pauseImage:     DefaultPauseImage,
		verbosity:      4,
		startTimeout:   StartTimeout,
		// `make test` runs the suites once per sandbox netns mode
		// (NETSHIM_SANDBOX_NETNS=docker|pinned|pauseless); unset leaves netshim's
		// default, auto.
		sandboxNetNS: os.Getenv("NETSHIM_SANDBOX_NETNS"),
	}
	if c.cniBinDirs == "" {
		c.cniBinDirs = "/usr/lib/cni"
	}
	for _, o := range opts {
		o(&c)
	}
	if c.bin == "" {
		return nil, errors.New("no netshim binary: set NETSHIM_BIN or pass WithBinary")
	}
	n := &Netshim{cfg: c}
	if c.dir == "" {
		// os.MkdirTemp rather than t.TempDir: the socket path must stay
		// well under the 108 bytes a unix socket address may hold.
		dir, err := os.MkdirTemp("", "nsh")
		if err != nil {
			return nil, err
		}
		// Searchable by others, as /run/netshim is: a pod with
		// hostUsers: false reaches its image under the netns dir in it.
		if err := os.Chmod(dir, 0o711); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.dir, n.ownDir = dir, true
	}
	pick := func(v, def string) string {
		if v != "" {
			return v
		}
		return filepath.Join(c.dir, def)
	}
	n.Dir = c.dir
	n.Sock = pick(c.sock, "netshim.sock")
	n.RootDir = pick(c.rootDir, "root")
	n.ConfDir = pick(c.confDir, "net.d")
	n.CacheDir = pick(c.cacheDir, "cnicache")
	n.LogPath = pick(c.logPath, "netshim.log")
	n.NetNSDir = pick(c.netnsDir, "netns")
	n.criServer = criServer{name: "netshim", sock: n.Sock, logPath: n.LogPath}
	if len(n.Sock) > maxSockPath {
		n.removeOwnDir()
		return nil, fmt.Errorf("socket path %s is too long for a unix socket: set TMPDIR to a shorter directory", n.Sock)
	}
	for _, d := range []string{n.RootDir, n.ConfDir, n.CacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			n.removeOwnDir()
			return nil, err
		}
	}
	if len(c.conflist) > 0 {
		if _, err := writeConflist(n.ConfDir, c.conflist); err != nil {
			n.removeOwnDir()
			return nil, err
		}
	}
	return n, nil
}

func (n *Netshim) removeOwnDir() {
	if n.ownDir {
		os.RemoveAll(n.Dir)
	}
}

// StartNetshim starts netshim for a test and registers its cleanup: the
// sandboxes of WithCleanupNamespace are removed through it, it gets
// SIGTERM (and must exit 0 and remove its socket), and its log is shown if
// the test failed.
func StartNetshim(t testing.TB, opts ...NetshimOption) *Netshim {
	t.Helper()
	n, err := NewNetshim(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.cleanup(t) })
	n.MustStart(t)
	return n
}

// Args is netshim's command line (without the binary).
func (n *Netshim) Args() []string {
	c := n.cfg
	args := []string{
		"--listen", "unix://" + n.Sock,
		"--root-dir", n.RootDir,
		"--cni-conf-dir", n.ConfDir,
		"--cni-bin-dir", c.cniBinDirs,
		"--cni-cache-dir", n.CacheDir,
		"--netns-dir", n.NetNSDir,
		"--pod-infra-container-image", c.pauseImage,
		fmt.Sprintf("-v=%d", c.verbosity),
	}
	if c.sandboxNetNS != "" {
		args = append(args, "--sandbox-netns", c.sandboxNetNS)
	}
	if c.dockerEndpoint != "" {
		args = append(args, "--docker-endpoint", c.dockerEndpoint)
	}
	args = append(args, c.network...)
	return append(args, c.args...)
}

// MustStart is Start for a test: a failure fails it, with the log's tail.
func (n *Netshim) MustStart(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.startTimeout+5*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatalf("%v\n%s", err, n.LogTail(40))
	}
	v := n.Version()
	t.Logf("netshim %s (%s, CRI %s) serves on %s", v.GetRuntimeVersion(), v.GetRuntimeName(), v.GetRuntimeApiVersion(), n.Sock)
}

// Start runs netshim and waits until it answers CRI Version. The log is
// truncated at the first start and appended to by the later ones.
func (n *Netshim) Start(ctx context.Context) error {
	cmd := exec.Command(n.cfg.bin, n.Args()...)
	if n.cfg.processGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	}
	_, err := n.start(ctx, cmd, true, n.cfg.startTimeout)
	return err
}

// Stop sends sig and waits (at most StopTimeout, then SIGKILL) for netshim
// to exit. After SIGTERM it must have exited 0 and removed its socket. A
// netshim that is not running is left alone.
func (n *Netshim) Stop(sig syscall.Signal) error {
	p, err := n.stop(sig, StopTimeout)
	if err != nil || p == nil || sig != syscall.SIGTERM {
		return err
	}
	if err := p.exitErr(); err != nil {
		return fmt.Errorf("netshim exited with %v after SIGTERM", err)
	}
	if _, err := os.Stat(n.Sock); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netshim left its socket %s behind after SIGTERM (stat: %v)", n.Sock, err)
	}
	return nil
}

// Kill is SIGKILL: netshim gets no chance to clean up, as in a crash or an
// OOM kill.
func (n *Netshim) Kill() error { return n.Stop(syscall.SIGKILL) }

// Restart stops netshim with SIGTERM and starts it again.
func (n *Netshim) Restart(ctx context.Context) error {
	if err := n.Stop(syscall.SIGTERM); err != nil {
		return err
	}
	return n.Start(ctx)
}

// MustStop is Stop for a test.
func (n *Netshim) MustStop(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := n.Stop(sig); err != nil {
		t.Fatalf("%v\n%s", err, n.LogTail(40))
	}
}

// UnmountNetNSDir unmounts the mount netshim makes of its --netns-dir at
// start-up (podns.EnsureUnbindable), and never unmounts itself, so that
// the directory can be removed: for a netshim that has stopped. Pinned
// namespaces still mounted in it keep it (EBUSY), and are reported: they
// are leaks, and stay for the leak audit to count. A directory that is no
// mount point (or is gone) is left as it is.
func (n *Netshim) UnmountNetNSDir() error {
	if n.Running() {
		return fmt.Errorf("not unmounting %s: netshim is running", n.NetNSDir)
	}
	// Once per start that found no mount there; one is all netshim makes.
	for range 10 {
		err := syscall.Unmount(n.NetNSDir, 0)
		switch {
		case err == nil:
			continue
		case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOENT):
			return nil
		case errors.Is(err, syscall.EBUSY):
			return fmt.Errorf("unmounting netshim's netns dir %s: %w (pinned namespaces are left mounted in it)", n.NetNSDir, err)
		default:
			return fmt.Errorf("unmounting netshim's netns dir %s: %w", n.NetNSDir, err)
		}
	}
	return fmt.Errorf("%s is still a mount point after 10 unmounts", n.NetNSDir)
}

// LogTail returns the last lines of netshim's log.
func (n *Netshim) LogTail(lines int) string {
	return "---- last lines of " + n.LogPath + " ----\n" + tail(n.LogPath, lines)
}

// RemovePods stops and removes, through netshim, every sandbox of the pod
// namespace ns, and returns what failed.
func (n *Netshim) RemovePods(ctx context.Context, ns string) error {
	cri := n.CRI()
	if cri == nil {
		return errors.New("netshim is not running")
	}
	resp, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("ListPodSandbox: %w", err)
	}
	var errs []error
	for _, p := range resp.Items {
		if p.GetMetadata().GetNamespace() != ns {
			continue
		}
		if _, err := cri.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, fmt.Errorf("StopPodSandbox %s: %w", p.Id, err))
		}
		if _, err := cri.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, fmt.Errorf("RemovePodSandbox %s: %w", p.Id, err))
		}
	}
	return errors.Join(errs...)
}

// cleanup is what StartNetshim registers.
func (n *Netshim) cleanup(t testing.TB) {
	if n.cfg.cleanupNS != "" && n.Running() {
		ctx, cancel := context.WithTimeout(context.Background(), RPCTimeout)
		if err := n.RemovePods(ctx, n.cfg.cleanupNS); err != nil {
			t.Logf("cleanup: %v", err)
		}
		cancel()
	}
	if err := n.Stop(syscall.SIGTERM); err != nil {
		t.Errorf("stopping netshim: %v", err)
	}
	// The netns dir is the harness's own (in n.Dir): its mount goes with
	// the netshim, or the directory cannot be removed. Pins left in it
	// keep it, for the leak audit to count.
	if strings.HasPrefix(n.NetNSDir, n.Dir+"/") {
		if err := n.UnmountNetNSDir(); err != nil {
			t.Logf("cleanup: %v", err)
		}
	}
	if t.Failed() {
		t.Logf("netshim log:\n%s", n.LogTail(80))
	}
	n.removeOwnDir()
}
