// Package kubenet is the built-in default pod network, selected with
// --network-plugin=kubenet: a bridge (cbr0) with host-local addresses from
// the node's pod CIDR, built in memory (no config file) and run through
// libcni with the installed CNI plugins, as kubelet's kubenet did.
//
// The pod CIDR comes from --pod-cidr or from kubelet's
// UpdateRuntimeConfig; until one is known the network is not ready. The
// first CIDR known is kept for the life of the process (see Event).
//
// Setup, teardown and status are those of the cni plugin (pkg/cni), fed
// with the built-in network: teardown uses libcni's cached config of the
// pod's ADD, status reads the pod's addresses through netlink.
package kubenet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/cni"
	"github.com/netshim/netshim/pkg/metrics"
	"github.com/netshim/netshim/pkg/network"
)

const (
	// PluginName is the name selected with --network-plugin.
	PluginName = "kubenet"
	// DefaultBridge is the bridge the pods are attached to.
	DefaultBridge = "cbr0"
	// DefaultNonMasqueradeCIDR is kubelet's default --non-masquerade-cidr.
	DefaultNonMasqueradeCIDR = "10.0.0.0/8"

	// defaultIPAMDataDir is host-local's default store.
	defaultIPAMDataDir = "/var/lib/cni/networks"

	// retryPeriod bounds how often Status retries a failed set-up.
	retryPeriod = 5 * time.Second
)

// errNoPodCIDR is the not-ready reason until a pod CIDR is known.
var errNoPodCIDR = errors.New("pod CIDR not set; pass --pod-cidr or let kubelet send it through UpdateRuntimeConfig")

// Options configure a Plugin.
type Options struct {
	// BinDirs are searched, in order, for the CNI plugin binaries.
	BinDirs []string
	// CacheDir is libcni's cache directory ("" : /var/lib/cni).
	CacheDir string
	// PodCIDR is --pod-cidr: one CIDR or a comma-separated dual-stack
	// pair. "" waits for UpdateRuntimeConfig.
	PodCIDR string
	// Bridge is the bridge's name; "" means cbr0.
	Bridge string
	// IPAMDataDir is host-local's store ("" : /var/lib/cni/networks).
	IPAMDataDir string
	// Timeout bounds every CNI call (--cni-timeout); 0 is the cni
	// plugin's default.
	Timeout time.Duration
	// StateDir is netshim's directory for the CNI attachment ledger (see
	// cni.Options.StateDir); "" disables it.
	StateDir string
	// Exec runs the plugins; nil runs the binaries. Tests inject a fake.
	Exec invoke.Exec
	// Metrics is handed to the CNI plugin underneath (cni.Options).
	Metrics *metrics.Metrics
}

// Plugin is the kubenet network plugin. Create it with NewPlugin.
type Plugin struct {
	opts  Options
	inner *cni.Plugin

	// Hooks, replaced by tests.
	ipt              iptables
	detectMTU        func() (int, error)
	clearBridgeAddrs func(bridge string, podCIDRs []*net.IPNet) error
	findPlugin       func(name string, dirs []string) error
	now              func() time.Time

	mu          sync.Mutex
	initialized bool
	hairpin     network.HairpinMode
	mtu         int
	nonMasq     []*net.IPNet
	fromFlag    bool         // podCIDRs came from --pod-cidr
	podCIDRs    []*net.IPNet // nil until known; then fixed
	ready       bool         // the network for podCIDRs is in place
	setupErr    error        // why not, when podCIDRs is known
	lastTry     time.Time
	lastIgnored string // the last differing CIDR logged as ignored
}

var _ network.NetworkPlugin = (*Plugin)(nil)

// NewPlugin returns a plugin configured by opts. It does nothing until
// Init.
func NewPlugin(opts Options) *Plugin {
	if opts.Bridge == "" {
		opts.Bridge = DefaultBridge
	}
	return &Plugin{
		opts: opts,
		inner: cni.NewPlugin(cni.Options{
			BinDirs:  opts.BinDirs,
			CacheDir: opts.CacheDir,
			StateDir: opts.StateDir,
			Timeout:  opts.Timeout,
			Exec:     opts.Exec,
			Metrics:  opts.Metrics,
		}),
		ipt:              execIPTables{},
		detectMTU:        defaultRouteMTU,
		clearBridgeAddrs: clearStaleBridgeAddrs,
		findPlugin: func(name string, dirs []string) error {
			_, err := invoke.FindInPath(name, dirs)
			return err
		},
		now: time.Now,
	}
}

// Name implements network.NetworkPlugin.
func (p *Plugin) Name() string { return PluginName }

// Capabilities implements network.NetworkPlugin: hostPorts (portmap) and
// shaping (bandwidth) are in the built-in chain.
func (p *Plugin) Capabilities() network.Capabilities {
	return network.CapHostPorts | network.CapShaping
}

// Init implements network.NetworkPlugin.
func (p *Plugin) Init(host network.Host, cfg network.PluginConfig) error {
	hairpin := cfg.HairpinMode
	if hairpin == "" {
		hairpin = network.DefaultHairpinMode
	}
	switch hairpin {
	case network.HairpinVeth, network.PromiscuousBridge, network.HairpinNone:
	default:
		return fmt.Errorf("kubenet: unknown hairpin mode %q", hairpin)
	}
	nonMasq, err := ParseNonMasqCIDRs(cfg.NonMasqueradeCIDR)
	if err != nil {
		return fmt.Errorf("kubenet: non-masquerade CIDR: %w", err)
	}
	var flagCIDRs []*net.IPNet
	if strings.TrimSpace(p.opts.PodCIDR) != "" {
		if flagCIDRs, err = ParseCIDRs(p.opts.PodCIDR); err != nil {
			return fmt.Errorf("kubenet: --pod-cidr: %w", err)
		}
	}
	mtu := cfg.MTU
	if mtu <= 0 {
		detected, err := p.detectMTU()
		if err != nil {
			klog.ErrorS(err, "kubenet: cannot detect the MTU of the default route's link; using the bridge plugin's default")
		}
		mtu = detected
	}
	if err := p.inner.InitStatic(host, cfg); err != nil {
		return fmt.Errorf("kubenet: %w", err)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.initialized = true
	p.hairpin = hairpin
	p.mtu = mtu
	p.nonMasq = nonMasq
	p.inner.SetStaticNetwork(nil, errNoPodCIDR)
	klog.InfoS("kubenet network plugin initialised", "bridge", p.opts.Bridge, "mtu", mtu, "hairpinMode", hairpin,
		"nonMasqueradeCIDR", cidrStrings(nonMasq), "podCIDR", cidrStrings(flagCIDRs), "binDirs", p.opts.BinDirs)
	if flagCIDRs != nil {
		p.fromFlag = true
		p.setPodCIDRsLocked(flagCIDRs)
	} else {
		klog.InfoS("kubenet: waiting for the pod CIDR from UpdateRuntimeConfig (no --pod-cidr)")
	}
	return nil
}

// Stop implements the runtime's optional stopper. The masquerade rules
// and the bridge are left in place: running pods keep their network while
// netshim restarts.
func (p *Plugin) Stop() { p.inner.Stop() }

// Event implements network.NetworkPlugin. The first pod CIDR known (from
// --pod-cidr or the first UpdateRuntimeConfig) is kept for the life of the
// process: a different one later is refused with an error in the log, as
// kubelet's kubenet did. Kubernetes gives a node a new pod CIDR only when
// the node is re-registered; netshim then needs a restart (after the node
// is drained), which re-addresses the bridge.
func (p *Plugin) Event(name string, details map[string]any) {
	if name != network.NetPluginEventPodCIDRChange {
		return
	}
	raw, _ := details[network.NetPluginEventPodCIDRKey].(string)
	if strings.TrimSpace(raw) == "" {
		klog.ErrorS(nil, "kubenet: ignoring pod CIDR change event without a CIDR", "details", details)
		return
	}
	cidrs, err := ParseCIDRs(raw)
	if err != nil {
		klog.ErrorS(err, "kubenet: ignoring invalid pod CIDR", "podCIDR", raw)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.initialized {
		klog.ErrorS(nil, "kubenet: ignoring pod CIDR before Init", "podCIDR", raw)
		return
	}
	if p.podCIDRs == nil {
		p.setPodCIDRsLocked(cidrs)
		return
	}
	newS, curS := strings.Join(cidrStrings(cidrs), ","), strings.Join(cidrStrings(p.podCIDRs), ",")
	if newS == curS || newS == p.lastIgnored {
		return
	}
	p.lastIgnored = newS
	if p.fromFlag {
		klog.ErrorS(nil, "kubenet: ignoring the pod CIDR sent by kubelet: --pod-cidr is set and wins", "podCIDR", curS, "ignored", newS)
		return
	}
	klog.ErrorS(nil, "kubenet: ignoring a change of the pod CIDR: it is fixed once set; drain the node and restart netshim to use the new one",
		"podCIDR", curS, "ignored", newS)
}

// setPodCIDRsLocked records cidrs and sets up the network for them.
func (p *Plugin) setPodCIDRsLocked(cidrs []*net.IPNet) {
	p.podCIDRs = cidrs
	klog.InfoS("kubenet: pod CIDR set", "podCIDR", cidrStrings(cidrs))
	p.applyLocked()
}

// applyLocked puts the network for p.podCIDRs in place: plugins present,
// stale bridge addresses gone, masquerade rules, and the conflist handed
// to the cni plugin. A failure leaves the plugin not ready with the
// reason; Status retries.
func (p *Plugin) applyLocked() {
	p.lastTry = p.now()
	err := p.applyErrLocked()
	if err != nil {
		if p.setupErr == nil || p.setupErr.Error() != err.Error() {
			klog.ErrorS(err, "kubenet: cannot set up the pod network", "podCIDR", cidrStrings(p.podCIDRs))
		}
		p.ready, p.setupErr = false, err
		p.inner.SetStaticNetwork(nil, err)
		return
	}
	p.ready, p.setupErr = true, nil
}

func (p *Plugin) applyErrLocked() error {
	var missing []string
	for _, t := range pluginTypes {
		if err := p.findPlugin(t, p.opts.BinDirs); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("CNI plugin(s) %s not found in %s (install containernetworking-plugins or set --cni-bin-dir)",
			strings.Join(missing, ", "), strings.Join(p.opts.BinDirs, ","))
	}
	if err := p.clearBridgeAddrs(p.opts.Bridge, p.podCIDRs); err != nil {
		return err
	}
	if err := ensureMasq(p.ipt, masqChain(p.opts.Bridge), p.podCIDRs, p.nonMasq); err != nil {
		return fmt.Errorf("writing the masquerade rules: %w", err)
	}
	raw, err := confList(p.netConfigLocked())
	if err != nil {
		return err
	}
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		return fmt.Errorf("parsing the built-in network config: %w", err)
	}
	p.inner.SetStaticNetwork(list, nil)
	klog.InfoS("kubenet: pod network ready", "bridge", p.opts.Bridge, "podCIDR", cidrStrings(p.podCIDRs), "config", string(raw))
	return nil
}

func (p *Plugin) netConfigLocked() netConfig {
	return netConfig{
		Bridge:      p.opts.Bridge,
		PodCIDRs:    p.podCIDRs,
		MTU:         p.mtu,
		Hairpin:     p.hairpin,
		IPAMDataDir: p.opts.IPAMDataDir,
	}
}

// Status implements network.NetworkPlugin: ready once the network for a
// known pod CIDR is in place. A failed set-up (e.g. a plugin binary
// missing) is retried here, at most every few seconds.
func (p *Plugin) Status() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.initialized:
		return errors.New("kubenet network plugin not initialised")
	case p.podCIDRs == nil:
		return errNoPodCIDR
	case p.ready:
		return nil
	}
	if p.now().Sub(p.lastTry) >= retryPeriod {
		p.applyLocked()
		if p.ready {
			return nil
		}
	}
	return fmt.Errorf("setting up the network for pod CIDR %s: %w", strings.Join(cidrStrings(p.podCIDRs), ","), p.setupErr)
}

// SetUpPod implements network.NetworkPlugin.
func (p *Plugin) SetUpPod(ctx context.Context, pod network.PodRef, annotations map[string]string, opts network.SetUpOptions) error {
	if err := p.Status(); err != nil {
		return fmt.Errorf("kubenet is not ready: %w", err)
	}
	return p.inner.SetUpPod(ctx, pod, annotations, opts)
}

// TearDownPod implements network.NetworkPlugin. Before the network is in
// place (no pod CIDR yet, e.g. just after a restart without --pod-cidr)
// a pod with no cached attachment cannot be torn down by the cni plugin;
// when host-local holds no address for it either, it never got one and
// there is nothing to undo.
func (p *Plugin) TearDownPod(ctx context.Context, pod network.PodRef) error {
	err := p.inner.TearDownPod(ctx, pod)
	if err == nil {
		return nil
	}
	p.mu.Lock()
	ready := p.ready
	p.mu.Unlock()
	if ready {
		return err
	}
	held, herr := p.heldIPs(pod.SandboxID)
	if herr != nil {
		return errors.Join(err, herr)
	}
	if len(held) > 0 {
		return fmt.Errorf("%w (host-local still holds %s for it)", err, strings.Join(held, ", "))
	}
	klog.V(2).InfoS("kubenet: network not set up and no address held for the pod; nothing to tear down",
		"pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID)
	return nil
}

// heldIPs lists the addresses host-local's store holds for containerID.
func (p *Plugin) heldIPs(containerID string) ([]string, error) {
	dataDir := p.opts.IPAMDataDir
	if dataDir == "" {
		dataDir = defaultIPAMDataDir
	}
	dir := filepath.Join(dataDir, networkName)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading host-local store %s: %w", dir, err)
	}
	var held []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // released meanwhile
		}
		first, _, _ := strings.Cut(string(data), "\n")
		if strings.TrimSpace(first) == containerID {
			held = append(held, e.Name())
		}
	}
	return held, nil
}

// GetPodNetworkStatus implements network.NetworkPlugin.
func (p *Plugin) GetPodNetworkStatus(ctx context.Context, pod network.PodRef) (*network.PodNetworkStatus, error) {
	return p.inner.GetPodNetworkStatus(ctx, pod)
}
