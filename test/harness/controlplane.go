package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// DefaultServiceCIDR is the test cluster's --service-cluster-ip-range.
	// No kube-proxy runs, so no route or rule ever holds it: it only has to
	// stay clear of the cluster CIDR.
	DefaultServiceCIDR = "10.179.0.0/24"
	// ControlPlaneStartTimeout bounds the wait for each component's health.
	ControlPlaneStartTimeout = 2 * time.Minute
	// ControlPlaneStopTimeout bounds the wait for each component to exit
	// after SIGTERM, after which it is killed.
	ControlPlaneStopTimeout = 30 * time.Second
)

// The binaries a ControlPlane runs, looked up in its bin dir.
const (
	kubeAPIServer         = "kube-apiserver"
	kubeControllerManager = "kube-controller-manager"
	kubeScheduler         = "kube-scheduler"
	kubectlBin            = "kubectl"
)

// controlPlaneConfig is what the ControlPlaneOptions set.
type controlPlaneConfig struct {
	binDir       string
	etcdBin      string
	dir          string
	serviceCIDR  string
	clusterCIDR  string
	nodeMaskSize int
	verbosity    int
	apiArgs      []string
	cmArgs       []string
	schedArgs    []string
	startTimeout time.Duration
	stopTimeout  time.Duration
}

// ControlPlaneOption configures a ControlPlane.
type ControlPlaneOption func(*controlPlaneConfig)

// WithK8sBinDir is where kube-apiserver, kube-controller-manager,
// kube-scheduler and kubectl are (default: $K8S_BIN_DIR;
// hack/build-kubelet.sh cluster builds them into _output/k8s-<minor>).
func WithK8sBinDir(dir string) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.binDir = dir }
}

// WithEtcdBinary runs this etcd (default: $ETCD_BIN, else etcd on PATH).
func WithEtcdBinary(path string) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.etcdBin = path }
}

// WithControlPlaneDir keeps certificates, kubeconfigs, etcd's data and the
// logs in dir, which the caller owns (default: a new temp dir, removed at
// Stop).
func WithControlPlaneDir(dir string) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.dir = dir }
}

// WithServiceCIDR sets --service-cluster-ip-range (default
// DefaultServiceCIDR).
func WithServiceCIDR(cidr string) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.serviceCIDR = cidr }
}

// WithClusterCIDR has kube-controller-manager give each Node a podCIDR of
// maskSize bits out of cidr (--allocate-node-cidrs); without it Nodes get
// none.
func WithClusterCIDR(cidr string, maskSize int) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.clusterCIDR, c.nodeMaskSize = cidr, maskSize }
}

// WithControlPlaneVerbosity sets -v of the Kubernetes components (default 1).
func WithControlPlaneVerbosity(v int) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.verbosity = v }
}

// WithAPIServerArgs, WithControllerManagerArgs and WithSchedulerArgs append
// flags to a component's command line, after the harness's own.
func WithAPIServerArgs(args ...string) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.apiArgs = append(c.apiArgs, args...) }
}

// WithControllerManagerArgs: see WithAPIServerArgs.
func WithControllerManagerArgs(args ...string) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.cmArgs = append(c.cmArgs, args...) }
}

// WithSchedulerArgs: see WithAPIServerArgs.
func WithSchedulerArgs(args ...string) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.schedArgs = append(c.schedArgs, args...) }
}

// WithControlPlaneTimeouts bounds the wait for each component's health and
// for its exit after SIGTERM.
func WithControlPlaneTimeouts(start, stop time.Duration) ControlPlaneOption {
	return func(c *controlPlaneConfig) { c.startTimeout, c.stopTimeout = start, stop }
}

// component is one process of the control plane.
type component struct {
	name    string
	bin     string
	args    []string
	logPath string
	// health answers nil once the component serves.
	health func(ctx context.Context) error
	proc   *proc
}

// ControlPlane is a single-node Kubernetes control plane on 127.0.0.1:
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler, each a
// child process in its own process group, with a CA and certificates of
// its own. Every port is picked free at Start, so it shares the host with
// anything else.
type ControlPlane struct {
	cfg    controlPlaneConfig
	ownDir bool

	// Dir holds everything; PKIDir the certificates and keys.
	Dir, PKIDir string
	// CA signs every certificate; CAFile is its certificate (a kubelet's
	// clientCAFile).
	CA     *CA
	CAFile string
	// AdminKubeconfig authenticates as a member of system:masters.
	AdminKubeconfig string
	// KubeletClientCert and KubeletClientKey are what kube-apiserver shows
	// kubelets (a system:masters member, so a kubelet's Webhook
	// authorization lets it do anything).
	KubeletClientCert, KubeletClientKey string

	mu         sync.Mutex
	started    bool
	server     string // https://127.0.0.1:PORT
	etcdURL    string
	components []*component // in start order
}

// NewControlPlane resolves and checks the options and creates the
// directory; it does not start anything.
func NewControlPlane(opts ...ControlPlaneOption) (*ControlPlane, error) {
	c := controlPlaneConfig{
		binDir:       os.Getenv("K8S_BIN_DIR"),
		etcdBin:      os.Getenv("ETCD_BIN"),
		serviceCIDR:  DefaultServiceCIDR,
		verbosity:    1,
		startTimeout: ControlPlaneStartTimeout,
		stopTimeout:  ControlPlaneStopTimeout,
	}
	for _, o := range opts {
		o(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	cp := &ControlPlane{cfg: c}
	if c.dir == "" {
		dir, err := os.MkdirTemp("", "nscp")
		if err != nil {
			return nil, err
		}
		c.dir, cp.ownDir = dir, true
		cp.cfg.dir = dir
	}
	cp.Dir = c.dir
	cp.PKIDir = filepath.Join(c.dir, "pki")
	if err := os.MkdirAll(cp.PKIDir, 0o700); err != nil {
		cp.removeOwnDir()
		return nil, err
	}
	return cp, nil
}

// validate checks the options, before anything is created.
func (c *controlPlaneConfig) validate() error {
	var errs []error
	if c.binDir == "" {
		errs = append(errs, errors.New("no Kubernetes bin dir: set K8S_BIN_DIR or pass WithK8sBinDir"))
	} else {
		for _, b := range []string{kubeAPIServer, kubeControllerManager, kubeScheduler, kubectlBin} {
			if err := executable(filepath.Join(c.binDir, b)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if c.etcdBin == "" {
		c.etcdBin = "etcd"
	}
	if p, err := exec.LookPath(c.etcdBin); err != nil {
		errs = append(errs, fmt.Errorf("no etcd binary (set ETCD_BIN or pass WithEtcdBinary): %w", err))
	} else {
		c.etcdBin = p
	}
	svc, err := netip.ParsePrefix(c.serviceCIDR)
	if err != nil {
		errs = append(errs, fmt.Errorf("service CIDR: %w", err))
	}
	if c.clusterCIDR != "" {
		cl, err := netip.ParsePrefix(c.clusterCIDR)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("cluster CIDR: %w", err))
		case c.nodeMaskSize <= cl.Bits() || c.nodeMaskSize > cl.Addr().BitLen():
			errs = append(errs, fmt.Errorf("node CIDR mask size %d does not fit in cluster CIDR %s", c.nodeMaskSize, cl))
		case svc.IsValid() && svc.Overlaps(cl):
			errs = append(errs, fmt.Errorf("service CIDR %s overlaps cluster CIDR %s", svc, cl))
		}
	}
	if c.dir != "" && !filepath.IsAbs(c.dir) {
		errs = append(errs, fmt.Errorf("control plane dir %q is not an absolute path", c.dir))
	}
	if c.startTimeout <= 0 || c.stopTimeout <= 0 {
		errs = append(errs, errors.New("start and stop timeouts must be positive"))
	}
	return errors.Join(errs...)
}

// executable says why path cannot be run, if it cannot.
func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("missing binary: %w", err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

func (cp *ControlPlane) removeOwnDir() {
	if cp.ownDir {
		os.RemoveAll(cp.Dir)
	}
}

// StartControlPlane starts a control plane for a test and registers its
// Stop (and the logs' tails if the test failed).
func StartControlPlane(t testing.TB, opts ...ControlPlaneOption) *ControlPlane {
	t.Helper()
	cp, err := NewControlPlane(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs:\n%s", cp.LogTails(20))
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*cp.cfg.startTimeout)
	defer cancel()
	if err := cp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return cp
}

// Server is kube-apiserver's URL (empty before Start).
func (cp *ControlPlane) Server() string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.server
}

// Bin is the path of one of the Kubernetes binaries (kubectl, ...).
func (cp *ControlPlane) Bin(name string) string { return filepath.Join(cp.cfg.binDir, name) }

// freeLoopbackPorts asks the kernel for n free TCP ports on 127.0.0.1. Another
// process could take one before the component binds it; Start then fails
// with the component's log saying so, which beats fixed ports that collide
// with every other test on the host.
func freeLoopbackPorts(n int) ([]int, error) {
	// Held open together, so that the n ports differ.
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// pkiFiles are the paths writePKI wrote.
type pkiFiles struct {
	caCert, caKey, apiCert, apiKey, kubeletClientCert, kubeletClientKey string
	saKey, saPub                                                        string
	adminKC, cmKC, schedKC                                              string
}

// apiServerServingNames are the names kube-apiserver's certificate is
// valid for: the loopback it listens on and the in-cluster names of the
// kubernetes Service.
var apiServerServingNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}

// firstServiceIP is the first address of the service CIDR, the ClusterIP
// kube-apiserver gives the kubernetes Service.
func firstServiceIP(cidr string) (net.IP, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, err
	}
	return net.IP(p.Masked().Addr().Next().AsSlice()), nil
}

// writePKI makes the CA and every certificate, key and kubeconfig.
func (cp *ControlPlane) writePKI(server string) (pkiFiles, error) {
	var f pkiFiles
	ca, err := NewCA("netshim-test-ca")
	if err != nil {
		return f, err
	}
	cp.CA = ca
	f.caCert = filepath.Join(cp.PKIDir, "ca.crt")
	if err := os.WriteFile(f.caCert, ca.CertPEM, 0o644); err != nil {
		return f, err
	}
	f.caKey = filepath.Join(cp.PKIDir, "ca.key")
	if err := os.WriteFile(f.caKey, ca.KeyPEM, 0o600); err != nil {
		return f, err
	}
	svcIP, err := firstServiceIP(cp.cfg.serviceCIDR)
	if err != nil {
		return f, err
	}
	api, err := ca.Issue(CertSpec{CommonName: kubeAPIServer, DNSNames: apiServerServingNames,
		IPs: []net.IP{net.IPv4(127, 0, 0, 1), svcIP}, Server: true})
	if err != nil {
		return f, err
	}
	if f.apiCert, f.apiKey, err = WriteKeyPair(cp.PKIDir, "apiserver", api); err != nil {
		return f, err
	}
	kc, err := ca.Issue(CertSpec{CommonName: "kube-apiserver-kubelet-client", Organizations: []string{"system:masters"}, Client: true})
	if err != nil {
		return f, err
	}
	if f.kubeletClientCert, f.kubeletClientKey, err = WriteKeyPair(cp.PKIDir, "apiserver-kubelet-client", kc); err != nil {
		return f, err
	}
	priv, pub, err := NewServiceAccountKey()
	if err != nil {
		return f, err
	}
	f.saKey, f.saPub = filepath.Join(cp.PKIDir, "sa.key"), filepath.Join(cp.PKIDir, "sa.pub")
	if err := os.WriteFile(f.saKey, priv, 0o600); err != nil {
		return f, err
	}
	if err := os.WriteFile(f.saPub, pub, 0o644); err != nil {
		return f, err
	}
	// The users RBAC's bootstrap policy binds for each component.
	for _, u := range []struct {
		path *string
		name string
		user string
		orgs []string
	}{
		{&f.adminKC, "admin", "kubernetes-admin", []string{"system:masters"}},
		{&f.cmKC, "controller-manager", "system:kube-controller-manager", nil},
		{&f.schedKC, "scheduler", "system:kube-scheduler", nil},
	} {
		if *u.path, err = cp.writeKubeconfig(server, u.name, u.user, u.orgs); err != nil {
			return f, err
		}
	}
	return f, nil
}

// writeKubeconfig issues a client certificate for user (in groups orgs)
// and writes a kubeconfig with it to Dir/name.kubeconfig.
func (cp *ControlPlane) writeKubeconfig(server, name, user string, orgs []string) (string, error) {
	kp, err := cp.CA.Issue(CertSpec{CommonName: user, Organizations: orgs, Client: true})
	if err != nil {
		return "", err
	}
	text, err := Kubeconfig(server, user, cp.CA.CertPEM, kp)
	if err != nil {
		return "", err
	}
	path := filepath.Join(cp.Dir, name+".kubeconfig")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// NodeKubeconfig writes a kubeconfig for the kubelet of node: user
// system:node:<node> in group system:nodes, which the Node authorizer and
// the NodeRestriction admission plugin know.
func (cp *ControlPlane) NodeKubeconfig(node string) (string, error) {
	server := cp.Server()
	if server == "" {
		return "", errors.New("the control plane is not started")
	}
	if node == "" || strings.ContainsAny(node, "/ ") {
		return "", fmt.Errorf("bad node name %q", node)
	}
	return cp.writeKubeconfig(server, "kubelet-"+node, "system:node:"+node, []string{"system:nodes"})
}

func (cp *ControlPlane) verbosityFlag() string { return "-v=" + strconv.Itoa(cp.cfg.verbosity) }

// buildComponents makes the command lines.
func (cp *ControlPlane) buildComponents(f pkiFiles, ports map[string]int, admin *http.Client) []*component {
	c := cp.cfg
	logPath := func(name string) string { return filepath.Join(cp.Dir, name+".log") }
	etcdClient := fmt.Sprintf("http://127.0.0.1:%d", ports["etcd"])
	etcdPeer := fmt.Sprintf("http://127.0.0.1:%d", ports["etcd-peer"])
	cp.etcdURL = etcdClient
	etcd := &component{
		name: "etcd",
		bin:  c.etcdBin,
		args: []string{
			"--name", "netshim-test",
			"--data-dir", filepath.Join(cp.Dir, "etcd"),
			"--listen-client-urls", etcdClient,
			"--advertise-client-urls", etcdClient,
			"--listen-peer-urls", etcdPeer,
			"--initial-advertise-peer-urls", etcdPeer,
			"--initial-cluster", "netshim-test=" + etcdPeer,
			"--logger", "zap", "--log-outputs", "stderr",
		},
		logPath: logPath("etcd"),
		health:  etcdHealth(etcdClient),
	}
	api := &component{
		name: kubeAPIServer,
		bin:  cp.Bin(kubeAPIServer),
		args: append([]string{
			"--etcd-servers", etcdClient,
			"--bind-address", "127.0.0.1",
			"--secure-port", strconv.Itoa(ports[kubeAPIServer]),
			"--cert-dir", filepath.Join(cp.Dir, "apiserver-certs"),
			"--tls-cert-file", f.apiCert,
			"--tls-private-key-file", f.apiKey,
			"--client-ca-file", f.caCert,
			"--service-cluster-ip-range", c.serviceCIDR,
			"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file", f.saPub,
			"--service-account-signing-key-file", f.saKey,
			"--authorization-mode", "Node,RBAC",
			"--enable-admission-plugins", "NodeRestriction",
			"--kubelet-client-certificate", f.kubeletClientCert,
			"--kubelet-client-key", f.kubeletClientKey,
			// A kubelet is reached at its Node's InternalIP. Mind
			// that a kubelet refuses a loopback --node-ip, and that
			// the node proxy (/api/v1/nodes/N/proxy) refuses any
			// address but a global unicast one.
			"--kubelet-preferred-address-types", "InternalIP",
			"--allow-privileged=true",
			"--profiling=false",
			cp.verbosityFlag(),
		}, c.apiArgs...),
		logPath: logPath(kubeAPIServer),
		health:  apiServerReady(admin, fmt.Sprintf("https://127.0.0.1:%d", ports[kubeAPIServer])),
	}
	cmArgs := []string{
		"--kubeconfig", f.cmKC,
		"--authentication-kubeconfig", f.cmKC,
		"--authorization-kubeconfig", f.cmKC,
		"--bind-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(ports[kubeControllerManager]),
		"--cert-dir", filepath.Join(cp.Dir, "controller-manager-certs"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file", f.saKey,
		"--root-ca-file", f.caCert,
		// No CSR is approved in a test cluster, but the signer wants
		// the files.
		"--cluster-signing-cert-file", f.caCert,
		"--cluster-signing-key-file", f.caKey,
		"--service-cluster-ip-range", c.serviceCIDR,
		"--profiling=false",
		cp.verbosityFlag(),
	}
	if c.clusterCIDR != "" {
		cmArgs = append(cmArgs,
			"--allocate-node-cidrs=true",
			"--cluster-cidr", c.clusterCIDR,
			"--node-cidr-mask-size", strconv.Itoa(c.nodeMaskSize))
	}
	cm := &component{
		name:    kubeControllerManager,
		bin:     cp.Bin(kubeControllerManager),
		args:    append(cmArgs, c.cmArgs...),
		logPath: logPath(kubeControllerManager),
		health:  componentHealth(ports[kubeControllerManager]),
	}
	sched := &component{
		name: kubeScheduler,
		bin:  cp.Bin(kubeScheduler),
		args: append([]string{
			"--kubeconfig", f.schedKC,
			"--authentication-kubeconfig", f.schedKC,
			"--authorization-kubeconfig", f.schedKC,
			"--bind-address", "127.0.0.1",
			"--secure-port", strconv.Itoa(ports[kubeScheduler]),
			"--leader-elect=false",
			"--profiling=false",
			cp.verbosityFlag(),
		}, c.schedArgs...),
		logPath: logPath(kubeScheduler),
		health:  componentHealth(ports[kubeScheduler]),
	}
	return []*component{etcd, api, cm, sched}
}

// etcdHealth is etcd's /health: {"health":"true"} once it serves.
func etcdHealth(url string) func(context.Context) error {
	client := &http.Client{Timeout: 5 * time.Second}
	return func(ctx context.Context) error {
		body, err := get(ctx, client, url+"/health")
		if err != nil {
			return err
		}
		if !strings.Contains(strings.ReplaceAll(body, " ", ""), `"health":"true"`) {
			return fmt.Errorf("etcd /health: %s", body)
		}
		return nil
	}
}

// apiServerReady is kube-apiserver's /readyz, asked as the admin (which
// also proves the client certificates work).
func apiServerReady(admin *http.Client, server string) func(context.Context) error {
	return func(ctx context.Context) error {
		body, err := get(ctx, admin, server+"/readyz")
		if err != nil {
			return err
		}
		if strings.TrimSpace(body) != "ok" {
			return fmt.Errorf("/readyz: %s", body)
		}
		return nil
	}
}

// componentHealth is /healthz of kube-controller-manager or kube-scheduler,
// served with a certificate they made themselves and open to anonymous
// requests.
func componentHealth(port int) func(context.Context) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed, loopback, health only
	}}
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	return func(ctx context.Context) error {
		body, err := get(ctx, client, url)
		if err != nil {
			return err
		}
		if strings.TrimSpace(body) != "ok" {
			return fmt.Errorf("%s: %s", url, body)
		}
		return nil
	}
}

// get returns the body of a 200 answer.
func get(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

// adminClient is an HTTP client of kube-apiserver as the admin user.
func (cp *ControlPlane) adminClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.CA.CertPEM)
	kp, err := cp.CA.Issue(CertSpec{CommonName: "netshim-harness", Organizations: []string{"system:masters"}, Client: true})
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}, nil
}

// Start writes the certificates and kubeconfigs, then starts etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler in this
// order, each once the one before is healthy (kube-apiserver: /readyz). A
// failure stops what was started and reports the component's log tail.
func (cp *ControlPlane) Start(ctx context.Context) error {
	cp.mu.Lock()
	if cp.started {
		cp.mu.Unlock()
		return errors.New("the control plane was started already")
	}
	cp.started = true
	cp.mu.Unlock()

	names := []string{"etcd", "etcd-peer", kubeAPIServer, kubeControllerManager, kubeScheduler}
	list, err := freeLoopbackPorts(len(names))
	if err != nil {
		return err
	}
	ports := map[string]int{}
	for i, n := range names {
		ports[n] = list[i]
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", ports[kubeAPIServer])
	f, err := cp.writePKI(server)
	if err != nil {
		return fmt.Errorf("writing the control plane's certificates: %w", err)
	}
	client, err := cp.adminClient()
	if err != nil {
		return err
	}
	// Its connections are for the health checks only.
	defer client.CloseIdleConnections()
	comps := cp.buildComponents(f, ports, client)
	cp.mu.Lock()
	cp.server = server
	cp.AdminKubeconfig = f.adminKC
	cp.CAFile = f.caCert
	cp.KubeletClientCert, cp.KubeletClientKey = f.kubeletClientCert, f.kubeletClientKey
	cp.mu.Unlock()

	for _, c := range comps {
		if err := cp.startComponent(ctx, c); err != nil {
			return errors.Join(err, cp.stopComponents())
		}
	}
	return nil
}

// startComponent starts c in a process group of its own (a Ctrl-C meant
// for the test reaches the test only, which stops c by its PID; c gets
// SIGTERM if the test dies) and waits for its health.
func (cp *ControlPlane) startComponent(ctx context.Context, c *component) error {
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, c.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	p, err := startProc(cmd, logf)
	if err != nil {
		return err
	}
	c.proc = p
	cp.mu.Lock()
	cp.components = append(cp.components, c)
	cp.mu.Unlock()
	var last error
	ok := EventuallyCtx(ctx, cp.cfg.startTimeout, func() bool {
		if p.exited() {
			return true
		}
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		last = c.health(hctx)
		return last == nil
	})
	switch {
	case p.exited():
		return fmt.Errorf("%s exited during start-up: %v\n%s", c.name, p.exitErr(), tail(c.logPath, 30))
	case !ok:
		return fmt.Errorf("%s was not healthy within %s (%v; last: %v)\n%s", c.name, cp.cfg.startTimeout, ctx.Err(), last, tail(c.logPath, 30))
	}
	return nil
}

// Pids are the process IDs of the components started, in start order.
func (cp *ControlPlane) Pids() map[string]int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	m := map[string]int{}
	for _, c := range cp.components {
		m[c.name] = c.proc.pid()
	}
	return m
}

// stopComponents stops the started components in reverse order: SIGTERM
// by PID, SIGKILL after the stop timeout. etcd goes last, so that
// kube-apiserver can finish its requests (with etcd gone first it retries
// for long).
func (cp *ControlPlane) stopComponents() error {
	cp.mu.Lock()
	comps := cp.components
	cp.components = nil
	cp.mu.Unlock()
	var errs []error
	for i := len(comps) - 1; i >= 0; i-- {
		c := comps[i]
		if err := c.proc.stop(c.name, syscall.SIGTERM, cp.cfg.stopTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stop stops every component (see stopComponents) and removes the
// directory if the ControlPlane made it. Stopping twice is harmless.
func (cp *ControlPlane) Stop() error {
	err := cp.stopComponents()
	cp.removeOwnDir()
	return err
}

// LogTails returns the last lines of every component's log.
func (cp *ControlPlane) LogTails(n int) string {
	var b strings.Builder
	for _, name := range []string{"etcd", kubeAPIServer, kubeControllerManager, kubeScheduler} {
		p := filepath.Join(cp.Dir, name+".log")
		fmt.Fprintf(&b, "---- last lines of %s ----\n%s\n", p, tail(p, n))
	}
	return b.String()
}

// KubectlCmd is kubectl with the admin kubeconfig and args, not started:
// for a caller that wires its input and output (exec -i, attach,
// port-forward, logs -f).
func (cp *ControlPlane) KubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, cp.Bin(kubectlBin), append([]string{"--kubeconfig", cp.AdminKubeconfig}, args...)...)
}

// Kubectl runs kubectl with the admin kubeconfig (at most CommandDeadline)
// and returns its standard output; a failure carries its standard error.
func (cp *ControlPlane) Kubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CommandDeadline)
	defer cancel()
	return cp.KubectlStdin(ctx, nil, args...)
}

// KubectlStdin is Kubectl with ctx and stdin.
func (cp *ControlPlane) KubectlStdin(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := cp.KubectlCmd(ctx, args...)
	cmd.Stdin = stdin
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// MustKubectl is Kubectl for a test.
func (cp *ControlPlane) MustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := cp.Kubectl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
