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
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
	"k8s.io/klog/v2"

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

	defaultSyncPeriod = 5 * time.Second

	// defaultOperationTimeout bounds one CNI ADD or DEL when the caller's
	// context has no deadline of its own: a plugin waiting for an
	// unreachable datastore would otherwise block the pod forever. The
	// value is dockershim's.
	defaultOperationTimeout = 220 * time.Second
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
	// Exec runs plugins; nil means running the binaries. Tests inject a
	// fake.
	Exec invoke.Exec
	// SyncPeriod is how often ConfDir is re-read; 0 means 5s.
	SyncPeriod time.Duration
}

// Plugin is the CNI network plugin. Create it with NewPlugin.
type Plugin struct {
	opts      Options
	cni       libcni.CNI
	loNetwork *libcni.NetworkConfigList

	stopOnce sync.Once
	stopCh   chan struct{}
	done     chan struct{}

	mu             sync.RWMutex
	host           network.Host
	cfg            network.PluginConfig
	initialized    bool
	started        bool // the resync goroutine runs and will close done
	defaultNetwork *confFile
	loadErr        error
	lastLoadReport string   // what was last logged about the conf dir, to log changes only
	podCIDRs       []string // from the pod-cidr-change event; v4 and/or v6
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
	exec := opts.Exec
	if exec == nil {
		// libcni would build this same executor lazily, but it does so by
		// assigning a field on every call, which is a data race when pods
		// are set up in parallel. Building it once here avoids that.
		exec = &invoke.DefaultExec{
			RawExec:       &invoke.RawExec{Stderr: os.Stderr},
			PluginDecoder: version.PluginDecoder{},
		}
	}
	lo, err := libcni.ConfListFromBytes([]byte(loConfList))
	if err != nil {
		// The text is a constant: failing to parse it is a programming error.
		panic(fmt.Sprintf("cni: parsing built-in loopback config: %v", err))
	}
	return &Plugin{
		opts:      opts,
		cni:       libcni.NewCNIConfigWithCacheDir(opts.BinDirs, opts.CacheDir, exec),
		loNetwork: lo,
		stopCh:    make(chan struct{}),
		done:      make(chan struct{}),
	}
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
// starts re-reading ConfDir every SyncPeriod, so that a network installed
// after the daemon started (the usual case: the CNI provider runs as a
// DaemonSet) is picked up without a restart.
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

	p.syncNetworkConfig()
	go p.syncLoop()
	klog.InfoS("CNI network plugin initialised", "confDir", p.opts.ConfDir, "binDirs", p.opts.BinDirs, "cacheDir", p.opts.CacheDir)
	return nil
}

// Stop ends the resync goroutine and waits for it. It is idempotent and
// may be called without Init.
func (p *Plugin) Stop() {
	p.stopOnce.Do(func() { close(p.stopCh) })
	p.mu.RLock()
	started := p.started
	p.mu.RUnlock()
	if started {
		<-p.done
	}
}

func (p *Plugin) syncLoop() {
	defer close(p.done)
	t := time.NewTicker(p.opts.SyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-p.stopCh:
			return
		case <-t.C:
			p.syncNetworkConfig()
		}
	}
}

// Status implements network.NetworkPlugin: nil once a default network is
// loaded. The error text is what kubelet shows as the NetworkReady reason,
// so it says what to fix.
func (p *Plugin) Status() error {
	_, err := p.getDefaultNetwork()
	return err
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
// being used (Status turns not-ready), as in kubelet.
func (p *Plugin) syncNetworkConfig() {
	loaded, skipped, err := loadDefaultNetwork(p.opts.ConfDir)

	// Log only what changed: this runs every few seconds.
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
	p.defaultNetwork = loaded
	p.loadErr = err
	if !changed {
		return
	}
	for _, s := range skipped {
		klog.ErrorS(s, "Skipping unusable CNI network config", "confDir", p.opts.ConfDir)
	}
	if err != nil {
		klog.ErrorS(err, "No usable CNI network config", "confDir", p.opts.ConfDir)
		return
	}
	klog.InfoS("Using CNI network config", "path", loaded.path, "network", loaded.list.Name,
		"cniVersion", loaded.list.CNIVersion, "plugins", pluginTypes(loaded.list))
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

// withTimeout applies defaultOperationTimeout when ctx has no deadline.
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultOperationTimeout)
}
