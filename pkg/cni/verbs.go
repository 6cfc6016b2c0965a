package cni

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/network"
)

// CNI 1.1 verbs (STATUS, GC) and CHECK (0.4.0), each gated on the
// network's cniVersion: a plugin that speaks an older version would refuse
// them, which must not be reported as a broken network.

var _ network.PodChecker = (*Plugin)(nil)
var _ network.WarningReporter = (*Plugin)(nil)

func versionAtLeast(list *libcni.NetworkConfigList, min string) bool {
	ok, err := version.GreaterThanOrEqualTo(list.CNIVersion, min)
	return err == nil && ok
}

// supportsStatus says whether CNI STATUS (and GC) exist for list.
func supportsStatus(list *libcni.NetworkConfigList) bool { return versionAtLeast(list, "1.1.0") }

// supportsCheck says whether CNI CHECK exists for list.
func supportsCheck(list *libcni.NetworkConfigList) bool { return versionAtLeast(list, "0.4.0") }

// refreshStatus asks the default network's plugins CNI STATUS and keeps
// the answer for Status; it also looks at the host firewall when the
// network changed or the last look is old. It runs in the background, one
// at a time, never for a kubelet poll.
func (p *Plugin) refreshStatus(ctx context.Context, changed bool) {
	def, _ := p.getDefaultNetwork()
	if def == nil {
		return
	}
	p.refreshFirewall(ctx, def, changed)
	if !supportsStatus(def.list) {
		return
	}
	cctx, cancel := p.withTimeout(ctx)
	err := p.cni.GetStatusNetworkList(cctx, def.list)
	cancel()
	if ctx.Err() != nil {
		return // superseded by a newer network, or stopping
	}
	if err != nil {
		err = errors.New(oneLine(err.Error()))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.defaultNetwork != def {
		return
	}
	prev := p.status
	p.status = statusState{conf: def, err: err}
	switch {
	case err != nil && (prev.conf != def || prev.err == nil || prev.err.Error() != err.Error()):
		klog.ErrorS(err, "CNI STATUS: the network is not ready", "network", def.list.Name, "path", def.path)
	case err == nil && (prev.conf != def || prev.err != nil):
		klog.InfoS("CNI STATUS: the network is ready", "network", def.list.Name, "path", def.path)
	}
}

// oneLine folds a multi-line message (errors.Join, a plugin's stderr) into
// one line: it ends up in the node's NetworkReady condition.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// gcLoop runs GC once the runtime can list its sandboxes (right after its
// first sync with the engine), then every GCPeriod.
func (p *Plugin) gcLoop(ctx context.Context) {
	if p.opts.GCPeriod < 0 {
		return
	}
	delay := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		err := p.GC(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errNoLister):
			klog.InfoS("CNI GC disabled: the runtime cannot list its sandboxes")
			return
		case errors.Is(err, errHostNotReady):
			klog.V(4).InfoS("CNI GC postponed: the runtime does not know its sandboxes yet", "err", err)
			delay = gcRetryPeriod
		case err != nil:
			klog.ErrorS(err, "CNI GC failed; retrying at the next pass", "period", p.opts.GCPeriod)
			delay = p.opts.GCPeriod
		default:
			delay = p.opts.GCPeriod
		}
	}
}

var (
	errNoLister     = errors.New("the network host cannot list sandboxes")
	errHostNotReady = errors.New("the runtime cannot list its sandboxes yet")
	errGCBusy       = errors.New("network setups kept running; GC postponed")
)

// gcLockWait bounds how long GC waits for the ADDs in flight to finish.
// It never blocks new ADDs while it waits (it only tries the lock): a
// hung ADD postpones GC, never the other pods.
const gcLockWait = 30 * time.Second

func (p *Plugin) lockForGC(ctx context.Context) error {
	deadline := time.Now().Add(gcLockWait)
	for !p.gcMu.TryLock() {
		if time.Now().After(deadline) {
			return errGCBusy
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// liveSandboxes asks the host for the sandboxes that exist.
func (p *Plugin) liveSandboxes(ctx context.Context) (map[string]bool, error) {
	host, err := p.getHost()
	if err != nil {
		return nil, err
	}
	lister, ok := host.(network.SandboxLister)
	if !ok {
		return nil, errNoLister
	}
	ids, err := lister.ListSandboxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errHostNotReady, err)
	}
	live := make(map[string]bool, len(ids))
	for _, id := range ids {
		live[id] = true
	}
	return live, nil
}

// GC frees what the network holds for sandboxes that no longer exist:
//
//  1. every attachment in libcni's cache whose sandbox the runtime does not
//     know gets a DEL with the config and arguments of its ADD (whatever
//     the cniVersion: this is what frees an address whose teardown was
//     never run, e.g. a sandbox removed behind netshim's back);
//  2. for a default network of cniVersion >= 1.1.0, CNI GC is called with
//     the live attachments, so that the plugins free what they hold for any
//     other attachment, including ones libcni never cached.
//
// Attachments whose DEL failed are passed as live in step 2, to be retried
// at the next pass with their own config rather than the current one.
func (p *Plugin) GC(ctx context.Context) error {
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()

	// The cache and the live set are read together, with no ADD in
	// flight: an attachment made after the list was taken would look stale.
	if err := p.lockForGC(ctx); err != nil {
		return err
	}
	live, err := p.liveSandboxes(ctx)
	if err != nil {
		p.gcMu.Unlock()
		return err
	}
	cached, err := p.cni.GetCachedAttachments("")
	p.gcMu.Unlock()
	if err != nil {
		return fmt.Errorf("reading libcni's cache: %w", err)
	}

	var errs []error
	failed := map[string]bool{}
	for _, a := range cached {
		if live[a.ContainerID] {
			continue
		}
		if err := p.delStale(ctx, a); err != nil {
			failed[a.ContainerID] = true
			errs = append(errs, err)
		}
	}

	def, _ := p.getDefaultNetwork()
	if def != nil && supportsStatus(def.list) && !def.list.DisableGC {
		if err := p.gcNetwork(ctx, def.list, failed); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		klog.V(2).InfoS("CNI GC done", "liveSandboxes", len(live), "cachedAttachments", len(cached))
	}
	return errors.Join(errs...)
}

// delStale runs DEL for a cached attachment whose sandbox is gone, with
// the config and arguments of its ADD, and no netns: the path cached with
// it named a process that is gone and may have been reused.
func (p *Plugin) delStale(ctx context.Context, a *libcni.NetworkAttachment) error {
	list, err := libcni.ConfListFromBytes(a.Config)
	if err != nil {
		return fmt.Errorf("GC of sandbox %s on network %q: parsing its cached config: %w", a.ContainerID, a.Network, err)
	}
	list.Name = a.Network
	rt := &libcni.RuntimeConf{
		ContainerID:    a.ContainerID,
		IfName:         a.IfName,
		Args:           a.CniArgs,
		CapabilityArgs: a.CapabilityArgs,
		CacheDir:       p.opts.CacheDir,
	}
	klog.InfoS("CNI GC: releasing the network of a sandbox that no longer exists", "podSandboxID", a.ContainerID, "network", a.Network, "ifName", a.IfName)
	if err := p.cni.DelNetworkList(ctx, list, rt); err != nil {
		if perr := p.delEachPlugin(ctx, list, rt, true); perr != nil {
			return fmt.Errorf("GC of sandbox %s on network %q: %w", a.ContainerID, a.Network, errors.Join(err, perr))
		}
	}
	return nil
}

// gcNetwork calls CNI GC on list with the live sandboxes' attachments (and
// those in keep). It holds gcMu so that no ADD runs meanwhile.
func (p *Plugin) gcNetwork(ctx context.Context, list *libcni.NetworkConfigList, keep map[string]bool) error {
	if err := p.lockForGC(ctx); err != nil {
		return err
	}
	defer p.gcMu.Unlock()
	live, err := p.liveSandboxes(ctx)
	if err != nil {
		return err
	}
	for id := range keep {
		live[id] = true
	}
	ids := make([]string, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	valid := make([]types.GCAttachment, 0, len(ids))
	for _, id := range ids {
		valid = append(valid, types.GCAttachment{ContainerID: id, IfName: podInterfaceName})
	}
	if err := p.cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		return fmt.Errorf("CNI GC of network %q: %w", list.Name, err)
	}
	return nil
}

// CheckPod implements network.PodChecker with CNI CHECK of the pod's
// default-network attachment, using the config and arguments of its ADD
// (from libcni's cache) and the sandbox's current netns.
func (p *Plugin) CheckPod(ctx context.Context, pod network.PodRef) network.CheckResult {
	unsupported := func(format string, args ...any) network.CheckResult {
		return network.CheckResult{Status: network.CheckUnsupported, Message: fmt.Sprintf(format, args...)}
	}
	host, err := p.getHost()
	if err != nil {
		return network.CheckResult{Status: network.CheckFailed, Message: err.Error()}
	}
	netnsPath, err := host.GetNetNS(ctx, pod.SandboxID)
	if err != nil {
		return network.CheckResult{Status: network.CheckFailed, Message: fmt.Sprintf("getting the network namespace: %v", err)}
	}
	if netnsPath == "" {
		return unsupported("the sandbox is not running: no network namespace to check")
	}
	var defName string
	if def, _ := p.getDefaultNetwork(); def != nil {
		defName = def.list.Name
	}
	list, err := p.cachedNetwork(pod.SandboxID, defName)
	if err != nil {
		return network.CheckResult{Status: network.CheckFailed, Message: err.Error()}
	}
	if list == nil {
		return unsupported("no cached CNI attachment for the sandbox")
	}
	if !supportsCheck(list) {
		return unsupported("network %q has cniVersion %s; CNI CHECK exists from 0.4.0", list.Name, list.CNIVersion)
	}
	if list.DisableCheck {
		return unsupported("network %q sets disableCheck", list.Name)
	}
	rt := &libcni.RuntimeConf{ContainerID: pod.SandboxID, IfName: podInterfaceName, CacheDir: p.opts.CacheDir}
	_, cachedRt, err := p.cni.GetNetworkListCachedConfig(list, rt)
	if err != nil || cachedRt == nil {
		return network.CheckResult{Status: network.CheckFailed, Message: fmt.Sprintf("reading the cached config of network %q: %v", list.Name, err)}
	}
	cachedRt.NetNS = netnsPath
	cachedRt.CacheDir = p.opts.CacheDir

	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	if err := p.cni.CheckNetworkList(ctx, list, cachedRt); err != nil {
		if errors.Is(err, libcni.ErrorCheckNotSupp) {
			return unsupported("%v", err)
		}
		return network.CheckResult{Status: network.CheckFailed, Message: fmt.Sprintf("CNI CHECK of network %q: %s", list.Name, oneLine(err.Error()))}
	}
	return network.CheckResult{Status: network.CheckOK}
}
