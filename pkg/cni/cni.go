// Package cni is the network plugin that attaches pod sandboxes to the
// network described by the first CNI configuration in a directory, the way
// dockershim's cniNetworkPlugin did, on top of libcni.
//
// Every pod gets two attachments: the loopback plugin (so that "lo" is up
// inside the sandbox, which Docker does not do for a container started with
// network mode "none") and the default network on eth0.
package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/metrics"
	"github.com/netshim/netshim/pkg/network"
)

const (
	// PluginName is the name selected with --network-plugin.
	PluginName = "cni"

	// podInterfaceName is the pod's interface for the default network.
	podInterfaceName = "eth0"

	// loNetworkName and loInterfaceName identify the loopback attachment.
	// The loopback plugin ignores CNI_IFNAME, but giving it "lo" keeps
	// its libcni cache entry apart from the default network's.
	loNetworkName   = "cni-loopback"
	loInterfaceName = "lo"
	// loDelAttempts is how many times a pod's loopback DEL is tried
	// before its cache entry is left to GC.
	loDelAttempts = 2

	// defaultSyncPeriod is the safety re-read of the conf dir; changes are
	// seen at once through fsnotify, this only covers a lost event.
	defaultSyncPeriod = time.Minute
	// defaultDebounce is how long the conf dir must stay quiet after an
	// event before it is re-read: a burst of writes (an editor's save, a
	// ConfigMap's symlink swap) becomes one reload.
	defaultDebounce = 100 * time.Millisecond
	// defaultStatusPeriod is how often CNI STATUS is asked again of a
	// cniVersion >= 1.1.0 network. kubelet polls Status every few seconds;
	// it is answered from the last STATUS, never by forking plugins.
	defaultStatusPeriod = 15 * time.Second
	// defaultGCPeriod is how often CNI GC runs after the one at start-up.
	defaultGCPeriod = 5 * time.Minute
	// gcRetryPeriod is how often the start-up GC is retried while the
	// runtime cannot list its sandboxes yet (before its first sync).
	gcRetryPeriod = time.Second
	// firewallRecheckPeriod bounds how often the host's FORWARD policy is
	// looked at again for an unchanged config (dockerd may start, and set
	// it to DROP, after netshim).
	firewallRecheckPeriod = time.Minute

	// DefaultTimeout bounds every CNI call (ADD, DEL, CHECK, GC, STATUS;
	// the plugins' GC also has a shorter one, defaultGCTimeout), also
	// when the caller's context has a later deadline or none: a
	// plugin waiting for an unreachable datastore must not hold a pod, a
	// retry or the GC forever. It is generous on purpose: longer than
	// kubelet's default 2m runtime-request-timeout, so for RPCs kubelet's
	// own cancellation normally decides, and long enough for the slowest
	// legitimate plugins (DHCP IPAM waiting for a lease, a busy IPAM
	// datastore).
	DefaultTimeout = 3 * time.Minute

	// defaultGCTimeout bounds the plugins' CNI GC call of a GC pass. Their
	// GC is a scan of their own state (IPAM files, iptables chains), a
	// second or so, a few with thousands of rules and the xtables lock
	// contended by the pod starts after a boot: a minute is a wide margin
	// over that. It does not protect the pod starts (an ADD preempts GC,
	// gcgate.go); it keeps a hung plugin from lingering for
	// --cni-timeout's three minutes, which are sized for an ADD waiting
	// for a DHCP lease, and gets the pass retried soon (gcLoop).
	defaultGCTimeout = time.Minute
)

// confExtensions are the file name extensions of network configurations,
// as understood by kubelet and the container runtimes.
var confExtensions = []string{".conf", ".conflist", ".json"}

// Options configure a Plugin.
type Options struct {
	// ConfDir is searched for the default network configuration.
	ConfDir string
	// BinDirs are searched, in order, for plugin binaries.
	BinDirs []string
	// CacheDir is libcni's cache directory (results of ADD, used by DEL
	// and status). "" means libcni's default, /var/lib/cni.
	CacheDir string
	// StateDir is netshim's own directory for this plugin (under
	// --root-dir). It holds the ledger of the attachments netshim ADDed,
	// which is how GC tells netshim's attachments from those of the other
	// CNI users sharing libcni's cache, and how teardown knows whether
	// anything was ever added. "" disables the ledger: GC is then off (it
	// could not tell whose a cached attachment is) and teardown falls back
	// to a DEL with the current network when nothing is cached.
	StateDir string
	// Exec runs plugins; nil means running the binaries. Tests inject a
	// fake.
	Exec invoke.Exec
	// SyncPeriod is how often ConfDir is re-read as a safety net beside
	// fsnotify; 0 means a minute.
	SyncPeriod time.Duration
	// Debounce is the quiet time after a conf dir event before the
	// re-read; 0 means 100ms.
	Debounce time.Duration
	// Timeout bounds every CNI call; 0 means DefaultTimeout. The plugins'
	// GC call has a shorter deadline of its own (defaultGCTimeout).
	Timeout time.Duration
	// StatusPeriod is how often CNI STATUS is refreshed; 0 means 15s.
	StatusPeriod time.Duration
	// GCPeriod is how often CNI GC runs after the start-up one; 0 means
	// 5 minutes, negative disables GC.
	GCPeriod time.Duration
	// Metrics, if set, times every CNI verb by verb and network
	// (metrics.go) and counts the attachments GC releases.
	Metrics *metrics.Metrics

	// probeFirewall reads the host's packet filter; nil means the real
	// one. Tests inject a fake.
	probeFirewall func(ctx context.Context) (hostFirewall, error)
	// forgetNeighbors deletes the host's neighbour entries of a new pod's
	// IPs (neigh_linux.go); nil means the real one. Tests inject a fake.
	forgetNeighbors func(ips []net.IP) error
	// gcTimeout bounds the plugins' GC call; 0 means defaultGCTimeout.
	// Tests shorten it.
	gcTimeout time.Duration
}

// Plugin is the CNI network plugin. Create it with NewPlugin.
type Plugin struct {
	opts      Options
	cni       libcni.CNI
	loNetwork *libcni.NetworkConfigList
	// ledger records the attachments netshim ADDed; nil without StateDir.
	ledger *ledger
	// gcCNI runs the plugins' CNI GC. It is libcni over a cache directory
	// that never holds anything, because libcni's GCNetworkList first DELs
	// every cached attachment of the network that is not in the valid
	// list, whoever made it, with the *current* config and the netns path
	// cached at ADD (which may name another process's namespace by now).
	// netshim does that step itself, for its own attachments only, with
	// each one's cached config and no netns (GC in verbs.go).
	gcCNI libcni.CNI

	stopOnce sync.Once
	stopCh   chan struct{}
	loops    sync.WaitGroup // the goroutines Init started
	// gate keeps GC from running while an ADD is in flight (an address
	// allocated after GC listed the live sandboxes would look stale), and
	// lets an ADD that arrives during GC preempt it.
	gate gcGate
	// reloads counts conf dir reads, for tests.
	reloads atomic.Int64

	mu             sync.RWMutex
	host           network.Host
	cfg            network.PluginConfig
	initialized    bool
	started        bool // the resync goroutine runs and will close done
	defaultNetwork *confFile
	loadErr        error
	lastLoadReport string   // what was last logged about the conf dir, to log changes only
	podCIDRs       []string // from the pod-cidr-change event; v4 and/or v6
	// skippedWarn lists the invalid files skipped before the one in use.
	skippedWarn []string
	// status is the last CNI STATUS answer, valid for the network it was
	// asked of only.
	status statusState
	// firewallWarn is the FORWARD DROP warning for defaultNetwork, or "".
	firewallWarn    string
	firewallChecked time.Time
}

// statusState is the answer to CNI STATUS for one loaded network.
type statusState struct {
	conf *confFile // nil: never asked
	err  error
}

// confFile is a loaded network configuration and where it came from.
type confFile struct {
	path string
	list *libcni.NetworkConfigList
}

var _ network.NetworkPlugin = (*Plugin)(nil)

// NewPlugin returns a plugin configured by opts. It does nothing until
// Init.
func NewPlugin(opts Options) *Plugin {
	if opts.SyncPeriod <= 0 {
		opts.SyncPeriod = defaultSyncPeriod
	}
	if opts.Debounce <= 0 {
		opts.Debounce = defaultDebounce
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.StatusPeriod <= 0 {
		opts.StatusPeriod = defaultStatusPeriod
	}
	if opts.GCPeriod == 0 {
		opts.GCPeriod = defaultGCPeriod
	}
	if opts.gcTimeout <= 0 {
		opts.gcTimeout = defaultGCTimeout
	}
	if opts.forgetNeighbors == nil {
		opts.forgetNeighbors = forgetNeighbors
	}
	if opts.probeFirewall == nil {
		opts.probeFirewall = probeHostFirewall
	}
	exec := opts.Exec
	if exec == nil {
		// Built once: libcni would build its default executor lazily, by
		// assigning a field on every call, which is a data race when pods
		// are set up in parallel. Ours also kills a plugin's whole process
		// group at the deadline (exec.go).
		exec = &pluginExec{stderr: os.Stderr}
	}
	lo, err := libcni.ConfListFromBytes([]byte(loConfList))
	if err != nil {
		// The text is a constant: failing to parse it is a programming error.
		panic(fmt.Sprintf("cni: parsing built-in loopback config: %v", err))
	}
	p := &Plugin{
		opts:      opts,
		cni:       instrumentCNI(libcni.NewCNIConfigWithCacheDir(opts.BinDirs, opts.CacheDir, exec), opts.Metrics),
		loNetwork: lo,
		stopCh:    make(chan struct{}),
	}
	if opts.StateDir != "" {
		p.ledger = newLedger(filepath.Join(opts.StateDir, "attachments"))
		// Nothing ever ADDs through gcCNI, so its cache stays empty.
		p.gcCNI = instrumentCNI(libcni.NewCNIConfigWithCacheDir(opts.BinDirs, filepath.Join(opts.StateDir, "gc-empty-cache"), exec), opts.Metrics)
	}
	return p
}

const loConfList = `{
  "cniVersion": "0.3.1",
  "name": "` + loNetworkName + `",
  "plugins": [{"type": "loopback"}]
}`

// Name implements network.NetworkPlugin.
func (p *Plugin) Name() string { return PluginName }

// Capabilities implements network.NetworkPlugin. Host ports and shaping
// are handed to the CNI chain as capability arguments (portmap and
// bandwidth plugins), so the runtime must not do them itself.
func (p *Plugin) Capabilities() network.Capabilities {
	return network.CapHostPorts | network.CapShaping
}

// Init implements network.NetworkPlugin: it loads the configuration and
// starts watching ConfDir (fsnotify, plus a re-read every SyncPeriod as a
// safety net), so that a network installed after the daemon started (the
// usual case: the CNI provider runs as a DaemonSet) is picked up without a
// restart. It also starts the CNI STATUS refresh and the GC loop.
func (p *Plugin) Init(host network.Host, cfg network.PluginConfig) error {
	if host == nil {
		return errors.New("cni plugin needs a network host")
	}
	p.mu.Lock()
	if p.initialized {
		p.mu.Unlock()
		return errors.New("cni plugin initialised twice")
	}
	select {
	case <-p.stopCh:
		p.mu.Unlock()
		return errors.New("cni plugin already stopped")
	default:
	}
	p.initialized = true
	p.started = true
	p.host = host
	p.cfg = cfg
	p.mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-p.stopCh
		cancel()
	}()
	// The first load is synchronous: Status is right from the first RPC.
	p.syncNetworkConfig()
	p.loops.Add(2)
	go func() {
		defer p.loops.Done()
		p.confLoop(ctx)
	}()
	go func() {
		defer p.loops.Done()
		p.gcLoop(ctx)
	}()
	klog.InfoS("CNI network plugin initialised", "confDir", p.opts.ConfDir, "binDirs", p.opts.BinDirs, "cacheDir", p.opts.CacheDir,
		"stateDir", p.opts.StateDir, "timeout", p.opts.Timeout, "gcPeriod", p.opts.GCPeriod)
	return nil
}

// Stop ends the goroutines Init started (cancelling the CNI calls they
// have in flight) and waits for them. It is idempotent and may be called
// without Init.
func (p *Plugin) Stop() {
	p.stopOnce.Do(func() { close(p.stopCh) })
	p.loops.Wait()
}

// Status implements network.NetworkPlugin: nil once a default network is
// loaded and, for a cniVersion >= 1.1.0 network, its plugins answered CNI
// STATUS without an error. It answers from cached state. The error text
// is what kubelet shows as the NetworkReady reason, so it says what to
// fix.
func (p *Plugin) Status() error {
	def, err := p.getDefaultNetwork()
	if err != nil {
		return err
	}
	if !supportsStatus(def.list) {
		return nil
	}
	p.mu.RLock()
	st := p.status
	p.mu.RUnlock()
	if st.conf != def {
		return fmt.Errorf("waiting for the plugins of CNI network %q (%s) to answer CNI STATUS", def.list.Name, def.path)
	}
	if st.err != nil {
		return fmt.Errorf("CNI network %q (%s) is not ready: %w", def.list.Name, def.path, st.err)
	}
	return nil
}

// Warnings implements network.WarningReporter: what is wrong with the
// host or the conf dir without keeping pods from being set up.
func (p *Plugin) Warnings() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.defaultNetwork == nil {
		return nil
	}
	var out []string
	if p.firewallWarn != "" {
		out = append(out, p.firewallWarn)
	}
	return append(out, p.skippedWarn...)
}

func (p *Plugin) getDefaultNetwork() (*confFile, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.defaultNetwork != nil {
		return p.defaultNetwork, nil
	}
	if !p.initialized {
		return nil, errors.New("cni config uninitialized: network plugin not initialised")
	}
	return nil, fmt.Errorf("cni config uninitialized: %w", p.loadErr)
}

// Event implements network.NetworkPlugin. The pod CIDR is handed to
// plugins that advertise the "ipRanges" capability (host-local IPAM with
// a node-specific range).
func (p *Plugin) Event(name string, details map[string]any) {
	if name != network.NetPluginEventPodCIDRChange {
		return
	}
	raw, ok := details[network.NetPluginEventPodCIDRKey].(string)
	if !ok || strings.TrimSpace(raw) == "" {
		klog.ErrorS(nil, "Ignoring pod CIDR change event without a CIDR", "details", details)
		return
	}
	cidrs, err := parsePodCIDRs(raw)
	if err != nil {
		klog.ErrorS(err, "Ignoring pod CIDR change event", "podCIDR", raw)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if slicesEqual(p.podCIDRs, cidrs) {
		return
	}
	klog.InfoS("Pod CIDR changed", "old", strings.Join(p.podCIDRs, ","), "new", strings.Join(cidrs, ","))
	p.podCIDRs = cidrs
}

func (p *Plugin) getPodCIDRs() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.podCIDRs
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// syncNetworkConfig re-reads ConfDir and swaps the default network. A
// failed load clears it: a network whose file was removed must stop
// being used (Status turns not-ready), as in kubelet. The error is kept
// for Status. It returns whether the default network changed (a re-read
// that finds the same file with the same bytes keeps the loaded one, and
// with it the STATUS answer and the firewall check).
func (p *Plugin) syncNetworkConfig() bool {
	p.reloads.Add(1)
	loaded, skipped, err := loadDefaultNetwork(p.opts.ConfDir)

	// Log only what changed: the safety re-read runs every minute.
	report := ""
	if err != nil {
		report = "error: " + err.Error()
	} else {
		report = "loaded " + loaded.path + " " + string(loaded.list.Bytes) + " skipped " + fmt.Sprint(skipped)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	changed := report != p.lastLoadReport
	p.lastLoadReport = report
	p.loadErr = err
	if !changed {
		return false
	}
	p.defaultNetwork = loaded
	p.skippedWarn = nil
	p.firewallWarn = ""
	p.firewallChecked = time.Time{}
	if err != nil {
		klog.ErrorS(err, "No usable CNI network config: pods cannot be set up until one is valid", "confDir", p.opts.ConfDir)
		return true
	}
	for _, s := range skipped {
		klog.ErrorS(s, "WARNING: invalid CNI network config skipped; a later file is used instead", "confDir", p.opts.ConfDir, "using", loaded.path)
		p.skippedWarn = append(p.skippedWarn, "invalid CNI config skipped: "+s.Error())
	}
	klog.InfoS("Using CNI network config", "path", loaded.path, "network", loaded.list.Name,
		"cniVersion", loaded.list.CNIVersion, "plugins", pluginTypes(loaded.list))
	return true
}

func pluginTypes(list *libcni.NetworkConfigList) []string {
	types := make([]string, 0, len(list.Plugins))
	for _, pl := range list.Plugins {
		types = append(types, pl.Network.Type)
	}
	return types
}

// loadDefaultNetwork returns the first file of dir, in lexical order, that
// parses as a network configuration, with the errors of the files skipped
// before it. Plugin binaries are deliberately not checked here: a network
// naming a missing plugin is still loaded, so that ADD fails with libcni's
// message naming the plugin, which the user can act on.
func loadDefaultNetwork(dir string) (*confFile, []error, error) {
	files, err := libcni.ConfFiles(dir, confExtensions)
	if err != nil {
		return nil, nil, fmt.Errorf("reading network config directory %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("no network config found in %s", dir)
	}
	sort.Strings(files)

	var skipped []error
	for _, f := range files {
		list, err := loadConfFile(f)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("%s: %w", f, err))
			continue
		}
		return &confFile{path: f, list: list}, skipped, nil
	}
	msgs := make([]string, len(skipped))
	for i, e := range skipped {
		msgs[i] = e.Error()
	}
	// One line, not errors.Join's newlines: the text ends up in the
	// node's NetworkReady condition.
	return nil, nil, fmt.Errorf("no valid network config in %s: %s", dir, strings.Join(msgs, "; "))
}

// loadConfFile parses one configuration file: a .conflist as a list, a
// .conf or .json as a single plugin wrapped into a list.
func loadConfFile(path string) (*libcni.NetworkConfigList, error) {
	var list *libcni.NetworkConfigList
	if filepath.Ext(path) == ".conflist" {
		l, err := libcni.ConfListFromFile(path)
		if err != nil {
			return nil, err
		}
		list = l
	} else {
		l, err := singleConfAsList(path)
		if err != nil {
			return nil, err
		}
		list = l
	}
	if len(list.Plugins) == 0 {
		return nil, errors.New("no plugins in network config")
	}
	return list, nil
}

// singleConfAsList reads a single-plugin .conf/.json file, still common
// on nodes, and wraps it into a one-plugin list, which is all libcni runs
// now (its own converter for this is deprecated).
func singleConfAsList(path string) (*libcni.NetworkConfigList, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("error reading %s: %w", path, err)
	}
	conf, err := libcni.NetworkPluginConfFromBytes(raw)
	if err != nil {
		return nil, err
	}
	wrapped, err := json.Marshal(map[string]any{
		"cniVersion": conf.Network.CNIVersion,
		"name":       conf.Network.Name,
		"plugins":    []json.RawMessage{raw},
	})
	if err != nil {
		return nil, fmt.Errorf("converting %s to a list: %w", path, err)
	}
	return libcni.NetworkConfFromBytes(wrapped)
}

// withTimeout bounds a CNI call by Options.Timeout on top of ctx's own
// deadline and cancellation (kubelet's, for an RPC): the earlier wins.
func (p *Plugin) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.opts.Timeout)
}
