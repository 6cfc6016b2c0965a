package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// DefaultKubeletPort and DefaultKubeletHealthzPort are kubelet's own
	// defaults; a second kubelet on the host needs others.
	DefaultKubeletPort        = 10250
	DefaultKubeletHealthzPort = 10248
	// DefaultPodLogsDir is kubelet's pod logs dir. kubelet removes the
	// entries of pods it does not know from it.
	DefaultPodLogsDir = "/var/log/pods"
	// KubeletContainerLogsDir holds kubelet's legacy log symlinks; it is
	// not configurable.
	KubeletContainerLogsDir = "/var/log/containers"
	// KubeletDevicePluginDir is where kubelet serves its device plugin
	// socket, whatever its root dir.
	KubeletDevicePluginDir = "/var/lib/kubelet/device-plugins"
	// KubeletStartTimeout bounds the wait for kubelet's healthz.
	KubeletStartTimeout = 60 * time.Second
	// KubeletStopTimeout bounds the wait for kubelet to exit on SIGTERM.
	KubeletStopTimeout = 30 * time.Second
)

// kubeletConfig is what the KubeletOptions set.
type kubeletConfig struct {
	bin           string
	endpoint      string
	staticPodPath string
	kubeconfig    string
	nodeName      string
	// nodeIP is --node-ip; "" leaves it out (nodeip.go).
	nodeIP       string
	port         int
	healthzPort  int
	gates        map[string]bool
	podLogsDir   string
	cfgFuncs     []func(map[string]any)
	args         []string
	dir          string
	logPath      string
	verbosity    int
	startTimeout time.Duration
	stopTimeout  time.Duration
	guard        *HostGuard
	statePath    string
	noPreflight  bool
	// Host paths kubelet uses whatever its options; unit tests move them.
	devicePluginDir, containerLogsDir string
	guardOpts                         []HostGuardOption
}

// KubeletOption configures a Kubelet.
type KubeletOption func(*kubeletConfig)

// WithKubeletBinary runs bin (default: $KUBELET_BIN).
func WithKubeletBinary(path string) KubeletOption { return func(c *kubeletConfig) { c.bin = path } }

// WithRuntimeEndpoint is the CRI socket (a path or unix:// URL) kubelet
// uses for both runtime and image service.
func WithRuntimeEndpoint(sock string) KubeletOption {
	return func(c *kubeletConfig) { c.endpoint = sock }
}

// WithStaticPodPath sets staticPodPath (default: RootDir/manifests).
func WithStaticPodPath(dir string) KubeletOption {
	return func(c *kubeletConfig) { c.staticPodPath = dir }
}

// WithKubeconfig connects kubelet to an API server; empty (the default)
// runs it standalone.
func WithKubeconfig(path string) KubeletOption { return func(c *kubeletConfig) { c.kubeconfig = path } }

// WithNodeName sets --hostname-override (default netshim-e2e-node).
func WithNodeName(name string) KubeletOption { return func(c *kubeletConfig) { c.nodeName = name } }

// WithNodeIP sets --node-ip (default DefaultNodeIP(), left out when the
// host has no default route); "" leaves it out.
func WithNodeIP(ip string) KubeletOption { return func(c *kubeletConfig) { c.nodeIP = ip } }

// WithKubeletPorts sets the API port and the healthz port (default 10250
// and 10248), both on 127.0.0.1.
func WithKubeletPorts(port, healthzPort int) KubeletOption {
	return func(c *kubeletConfig) { c.port, c.healthzPort = port, healthzPort }
}

// WithFeatureGates sets featureGates (merged over earlier calls).
func WithFeatureGates(gates map[string]bool) KubeletOption {
	return func(c *kubeletConfig) {
		if c.gates == nil {
			c.gates = map[string]bool{}
		}
		maps.Copy(c.gates, gates)
	}
}

// WithPodLogsDir sets podLogsDir (default /var/log/pods).
func WithPodLogsDir(dir string) KubeletOption { return func(c *kubeletConfig) { c.podLogsDir = dir } }

// WithKubeletConfig edits the generated KubeletConfiguration (a JSON
// object) after the harness filled it in: for any other key (podCIDR,
// clusterDNS, authentication, ...). Funcs run in the order given.
func WithKubeletConfig(edit func(cfg map[string]any)) KubeletOption {
	return func(c *kubeletConfig) { c.cfgFuncs = append(c.cfgFuncs, edit) }
}

// WithKubeletArgs appends flags to kubelet's command line, after the
// harness's own.
func WithKubeletArgs(args ...string) KubeletOption {
	return func(c *kubeletConfig) { c.args = append(c.args, args...) }
}

// WithKubeletDir is kubelet's --root-dir, which also holds the config
// file and, by default, the log (default: root/ in a new temp dir, all of
// it removed at Stop; a dir given here is the caller's to remove).
func WithKubeletDir(dir string) KubeletOption { return func(c *kubeletConfig) { c.dir = dir } }

// WithKubeletLog sends kubelet's output to path (default: kubelet.log in
// the kubelet's dir, which Stop removes when it is the Kubelet's own temp
// dir: pass a path to keep the log).
func WithKubeletLog(path string) KubeletOption { return func(c *kubeletConfig) { c.logPath = path } }

// WithKubeletVerbosity sets -v (default 2).
func WithKubeletVerbosity(v int) KubeletOption { return func(c *kubeletConfig) { c.verbosity = v } }

// WithKubeletStartTimeout bounds the wait for healthz (default
// KubeletStartTimeout).
func WithKubeletStartTimeout(d time.Duration) KubeletOption {
	return func(c *kubeletConfig) { c.startTimeout = d }
}

// WithKubeletStopTimeout bounds the wait for the exit on SIGTERM before
// SIGKILL (default KubeletStopTimeout).
func WithKubeletStopTimeout(d time.Duration) KubeletOption {
	return func(c *kubeletConfig) { c.stopTimeout = d }
}

// WithHostGuard records the host state kubelet changes in g, whose owner
// restores it after stopping everything else (netshim, dockerd: pod
// cgroups empty only once the pods are gone). Without it the Kubelet
// keeps a guard of its own and restores at Stop.
func WithHostGuard(g *HostGuard) KubeletOption { return func(c *kubeletConfig) { c.guard = g } }

// WithKubeletStateFile is the state file of the Kubelet's own guard
// (ignored with WithHostGuard): a run killed before Stop is cleaned up by
// the next NewKubelet with the same file.
func WithKubeletStateFile(path string) KubeletOption {
	return func(c *kubeletConfig) { c.statePath = path }
}

// WithoutKubeletPreflight skips the checks Start makes before it runs
// kubelet (ports free, device plugin socket not served, pod logs dir
// holding no other pods' entries).
func WithoutKubeletPreflight() KubeletOption { return func(c *kubeletConfig) { c.noPreflight = true } }

// Kubelet is a real kubelet binary run as a child process, its
// KubeletConfiguration generated from the options.
type Kubelet struct {
	cfg      kubeletConfig
	ownDir   bool
	guard    *HostGuard
	ownGuard bool

	// Where things are; fixed for the life of the Kubelet.
	Dir, RootDirPath, ConfigPath, LogPath, StaticPodPath, Endpoint string

	mu   sync.Mutex
	proc *proc
}

var featureGateName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)

// validate checks the options, before anything is created.
func (c *kubeletConfig) validate() error {
	var errs []error
	if c.bin == "" {
		errs = append(errs, errors.New("no kubelet binary: set KUBELET_BIN or pass WithKubeletBinary"))
	}
	if c.endpoint == "" {
		errs = append(errs, errors.New("no runtime endpoint: pass WithRuntimeEndpoint"))
	}
	for _, p := range []int{c.port, c.healthzPort} {
		if p <= 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("port %d is out of range", p))
		}
	}
	if c.port == c.healthzPort {
		errs = append(errs, fmt.Errorf("port and healthz port are both %d", c.port))
	}
	for name, p := range map[string]string{"root dir": c.dir, "static pod path": c.staticPodPath,
		"pod logs dir": c.podLogsDir, "kubeconfig": c.kubeconfig, "log": c.logPath, "state file": c.statePath} {
		if p != "" && !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute path", name, p))
		}
	}
	for g := range c.gates {
		if !featureGateName.MatchString(g) {
			errs = append(errs, fmt.Errorf("bad feature gate name %q", g))
		}
	}
	if c.nodeName == "" || strings.ContainsAny(c.nodeName, " /") {
		errs = append(errs, fmt.Errorf("bad node name %q", c.nodeName))
	}
	if c.startTimeout <= 0 || c.stopTimeout <= 0 {
		errs = append(errs, errors.New("start and stop timeouts must be positive"))
	}
	return errors.Join(errs...)
}

// ParseFeatureGates parses kubelet's --feature-gates syntax
// ("A=true,B=false"; "" is none).
func ParseFeatureGates(s string) (map[string]bool, error) {
	gates := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		b, err := strconv.ParseBool(v)
		if !ok || err != nil || !featureGateName.MatchString(k) {
			return nil, fmt.Errorf("bad feature gate %q: want Name=true or Name=false", kv)
		}
		gates[k] = b
	}
	return gates, nil
}

// NewKubelet resolves and checks the options, recovers what an earlier
// run with the same state file left, creates the directories and writes
// the config; it does not start kubelet.
func NewKubelet(opts ...KubeletOption) (*Kubelet, error) {
	c := kubeletConfig{
		bin:          os.Getenv("KUBELET_BIN"),
		nodeName:     "netshim-e2e-node",
		port:         DefaultKubeletPort,
		healthzPort:  DefaultKubeletHealthzPort,
		podLogsDir:   DefaultPodLogsDir,
		verbosity:    2,
		startTimeout: KubeletStartTimeout,
		stopTimeout:  KubeletStopTimeout,

		devicePluginDir:  KubeletDevicePluginDir,
		containerLogsDir: KubeletContainerLogsDir,
	}
	c.nodeIP, _ = DefaultNodeIP()
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	k := &Kubelet{cfg: c, guard: c.guard}
	if k.guard == nil {
		g, err := NewHostGuard(c.statePath, c.guardOpts...)
		if err != nil {
			return nil, err
		}
		k.guard, k.ownGuard = g, true
	}
	if c.dir == "" {
		dir, err := os.MkdirTemp("", "nskubelet")
		if err != nil {
			return nil, err
		}
		k.ownDir = true
		k.Dir, c.dir = dir, filepath.Join(dir, "root")
	} else {
		k.Dir = c.dir
	}
	k.cfg = c
	k.RootDirPath = c.dir
	k.ConfigPath = filepath.Join(k.Dir, "kubelet-config.json")
	k.LogPath = c.logPath
	if k.LogPath == "" {
		k.LogPath = filepath.Join(k.Dir, "kubelet.log")
	}
	k.StaticPodPath = c.staticPodPath
	if k.StaticPodPath == "" {
		k.StaticPodPath = filepath.Join(c.dir, "manifests")
	}
	k.Endpoint = c.endpoint
	if !strings.Contains(k.Endpoint, "://") {
		k.Endpoint = "unix://" + k.Endpoint
	}
	if k.ownDir {
		// The whole temp dir goes at Restore, mounts under it first.
		if err := k.guard.RecordTempDir(k.Dir); err != nil {
			os.RemoveAll(k.Dir)
			return nil, err
		}
	}
	for _, d := range []string{c.dir, k.StaticPodPath} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			k.undoNew()
			return nil, err
		}
	}
	data, err := k.ConfigJSON()
	if err != nil {
		k.undoNew()
		return nil, err
	}
	if err := os.WriteFile(k.ConfigPath, data, 0o644); err != nil {
		k.undoNew()
		return nil, fmt.Errorf("writing kubelet's config: %w", err)
	}
	return k, nil
}

func (k *Kubelet) undoNew() {
	if k.ownGuard {
		_ = k.guard.Restore()
	} else if k.ownDir {
		os.RemoveAll(k.Dir)
	}
}

// Config is the KubeletConfiguration the options make.
func (k *Kubelet) Config() map[string]any {
	c := k.cfg
	gates := map[string]any{}
	for g, v := range c.gates {
		gates[g] = v
	}
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"containerRuntimeEndpoint": k.Endpoint,
		"imageServiceEndpoint":     k.Endpoint,
		"staticPodPath":            k.StaticPodPath,
		"fileCheckFrequency":       "2s",
		"syncFrequency":            "10s",
		// The hosts here run cgroup v1 with Docker's cgroupfs driver.
		"cgroupDriver":       "cgroupfs",
		"failCgroupV1":       false,
		"failSwapOn":         false,
		"address":            "127.0.0.1",
		"port":               c.port,
		"healthzBindAddress": "127.0.0.1",
		"healthzPort":        c.healthzPort,
		"readOnlyPort":       0,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": true},
			"webhook":   map[string]any{"enabled": false},
		},
		"authorization":          map[string]any{"mode": "AlwaysAllow"},
		"makeIPTablesUtilChains": false,
		// Image GC must not remove the test's images, which no registry
		// could give back.
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		// runc cannot set a negative oom_score_adj without
		// CAP_SYS_RESOURCE, which CI machines lack.
		"oomScoreAdj":     0,
		"podLogsDir":      c.podLogsDir,
		"volumePluginDir": filepath.Join(c.dir, "volume-plugins"),
		"featureGates":    gates,
		// A nearly full disk must not evict the test pods.
		"evictionHard": map[string]any{
			"memory.available":  "1Mi",
			"nodefs.available":  "1%",
			"imagefs.available": "1%",
		},
	}
	for _, f := range c.cfgFuncs {
		f(cfg)
	}
	return cfg
}

// ConfigJSON is Config as the file kubelet reads (JSON is YAML).
func (k *Kubelet) ConfigJSON() ([]byte, error) {
	data, err := json.MarshalIndent(k.Config(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding kubelet's config: %w", err)
	}
	return append(data, '\n'), nil
}

// Args is kubelet's command line (without the binary).
func (k *Kubelet) Args() []string {
	args := []string{
		"--config=" + k.ConfigPath,
		"--root-dir=" + k.RootDirPath,
		"--cert-dir=" + filepath.Join(k.RootDirPath, "pki"),
		"--hostname-override=" + k.cfg.nodeName,
		"-v=" + strconv.Itoa(k.cfg.verbosity),
	}
	if k.cfg.nodeIP != "" {
		args = append(args, "--node-ip="+k.cfg.nodeIP)
	}
	if k.cfg.kubeconfig != "" {
		args = append(args, "--kubeconfig="+k.cfg.kubeconfig)
	}
	return append(args, k.cfg.args...)
}

// StartKubelet starts kubelet for a test and registers Stop as a cleanup.
func StartKubelet(t testing.TB, opts ...KubeletOption) *Kubelet {
	t.Helper()
	k, err := NewKubelet(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Read first: Stop removes a log in the Kubelet's own temp dir.
		logTail := k.LogTail(40)
		if err := k.Stop(); err != nil {
			t.Errorf("stopping kubelet: %v", err)
		}
		if t.Failed() {
			t.Logf("kubelet log:\n%s", logTail)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), k.cfg.startTimeout+5*time.Second)
	defer cancel()
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return k
}

// Preflight checks what would make kubelet fail or harm the host: its
// ports in use, another kubelet serving the device plugin socket (this
// one would take it over), and other pods' entries in the pod logs dir
// (kubelet's log GC would delete them).
func (k *Kubelet) Preflight() error {
	var errs []error
	for _, p := range []int{k.cfg.port, k.cfg.healthzPort} {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			errs = append(errs, fmt.Errorf("port %d is in use (a kubelet still running?): %w", p, err))
			continue
		}
		l.Close()
	}
	sock := filepath.Join(k.cfg.devicePluginDir, "kubelet.sock")
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		c.Close()
		errs = append(errs, fmt.Errorf("a kubelet serves %s already; this one would take it over", sock))
	}
	if entries, err := os.ReadDir(k.cfg.podLogsDir); err == nil && len(entries) > 0 {
		var names []string
		for i, e := range entries {
			if i == 20 {
				names = append(names, "...")
				break
			}
			names = append(names, e.Name())
		}
		errs = append(errs, fmt.Errorf("%s holds entries of other pods, which kubelet's log GC would delete: %s; remove them or use another pod logs dir",
			k.cfg.podLogsDir, strings.Join(names, " ")))
	}
	return errors.Join(errs...)
}

// guardHost records what kubelet is about to change on the host.
func (k *Kubelet) guardHost() error {
	g := k.guard
	sock := filepath.Join(k.cfg.devicePluginDir, "kubelet.sock")
	// A dead kubelet's socket: kubelet would fail to listen on it.
	if _, err := os.Lstat(sock); err == nil {
		if err := os.Remove(sock); err != nil {
			return err
		}
	}
	return errors.Join(
		g.WatchDirs(k.cfg.devicePluginDir, k.cfg.podLogsDir, k.cfg.containerLogsDir),
		g.RemoveAtRestore(sock),
		g.WatchCgroups(KubeletCgroupNames...),
		g.SaveSysctls(KubeletSysctls...),
		// kubelet bind-mounts its root dir onto itself (to make it
		// shared) and mounts volumes under it.
		g.RecordMounts(k.RootDirPath),
	)
}

// Start runs kubelet and waits until its healthz answers ok; it fails
// fast, with the log's tail, when kubelet exits meanwhile.
func (k *Kubelet) Start(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc != nil && !k.proc.exited() {
		return errors.New("kubelet is already running")
	}
	if !k.cfg.noPreflight {
		if err := k.Preflight(); err != nil {
			return err
		}
	}
	if err := k.guardHost(); err != nil {
		return fmt.Errorf("recording the host state: %w", err)
	}
	f, err := os.OpenFile(k.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(k.cfg.bin, k.Args()...)
	// Its own session: a Ctrl-C meant for the test reaches the test only,
	// which then stops kubelet; SIGTERM if the test dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
	p, err := startProc(cmd, f)
	if err != nil {
		return err
	}
	k.proc = p
	if err := k.guard.RecordProcess("kubelet", p.pid(), k.ConfigPath); err != nil {
		return errors.Join(err, p.stop("kubelet", syscall.SIGTERM, k.cfg.stopTimeout))
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	healthy := EventuallyCtx(ctx, k.cfg.startTimeout, func() bool {
		if p.exited() {
			return true
		}
		resp, err := client.Get(k.HealthzURL())
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
		return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "ok"
	})
	if p.exited() {
		return fmt.Errorf("kubelet exited during start-up: %v\n%s", p.exitErr(), k.logTail(15))
	}
	if !healthy {
		err := fmt.Errorf("kubelet's healthz (%s) did not answer ok within %s (%v)\n%s",
			k.HealthzURL(), k.cfg.startTimeout, ctx.Err(), k.logTail(15))
		// Not left running: a kubelet that never got healthy is no use.
		return errors.Join(err, p.stop("kubelet", syscall.SIGTERM, k.cfg.stopTimeout))
	}
	return nil
}

// Stop sends SIGTERM and waits for kubelet to exit, killing it after the
// stop timeout, which is then an error. With its own guard it restores
// the host and removes its own temp dir. Stop may be called again.
func (k *Kubelet) Stop() error {
	k.mu.Lock()
	p := k.proc
	k.mu.Unlock()
	var errs []error
	if p != nil {
		if err := p.stop("kubelet", syscall.SIGTERM, k.cfg.stopTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	if k.ownGuard {
		if err := k.guard.Restore(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Running says whether kubelet runs.
func (k *Kubelet) Running() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.proc != nil && !k.proc.exited()
}

// Pid is kubelet's process ID (0 before Start).
func (k *Kubelet) Pid() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc == nil {
		return 0
	}
	return k.proc.pid()
}

// URL is kubelet's authenticated API (self-signed certificate).
func (k *Kubelet) URL() string { return fmt.Sprintf("https://127.0.0.1:%d", k.cfg.port) }

// HealthzURL is kubelet's healthz endpoint.
func (k *Kubelet) HealthzURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/healthz", k.cfg.healthzPort)
}

// RootDir is kubelet's --root-dir.
func (k *Kubelet) RootDir() string { return k.RootDirPath }

// PodLogsDir is kubelet's podLogsDir.
func (k *Kubelet) PodLogsDir() string { return k.cfg.podLogsDir }

// NodeName is the node name kubelet runs as.
func (k *Kubelet) NodeName() string { return k.cfg.nodeName }

// Guard is the host guard the Kubelet records into.
func (k *Kubelet) Guard() *HostGuard { return k.guard }

// LogTail returns kubelet's errors and then its last n lines (its first
// ~200 lines are flags, rarely what explains a failure).
func (k *Kubelet) LogTail(n int) string { return k.logTail(n) }

// kubeletErrorLine is a klog line at error or fatal level.
var kubeletErrorLine = regexp.MustCompile(`^[EF][0-9]{4} `)

func (k *Kubelet) logTail(n int) string {
	data, err := os.ReadFile(k.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log at %s: %v)", k.LogPath, err)
	}
	var errLines []string
	for _, l := range strings.Split(string(data), "\n") {
		if kubeletErrorLine.MatchString(l) {
			errLines = append(errLines, l)
		}
	}
	if len(errLines) > 10 {
		errLines = errLines[len(errLines)-10:]
	}
	return "---- kubelet's errors (" + k.LogPath + ") ----\n" + strings.Join(errLines, "\n") +
		"\n---- its last lines ----\n" + tail(k.LogPath, n)
}
