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
	// timeouts counts the passes in a row whose plugins' GC ran out of
	// time: one is retried soon (a plugin slowed down by the pod starts
	// after a boot), more wait for the next period, so that a plugin that
	// always hangs is not run back to back.
	timeouts := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		err := p.GC(ctx)
		if !errors.Is(err, errGCTimeout) {
			timeouts = 0
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errNoLister):
			klog.InfoS("CNI GC disabled: the runtime cannot list its sandboxes")
			return
		case errors.Is(err, errNoLedger):
			klog.InfoS("CNI GC disabled", "reason", err)
			return
		case errors.Is(err, errGCPreempted):
			// Checked before errHostNotReady: a preempted listing of the
			// sandboxes is not a host that is not ready.
			klog.V(2).InfoS("CNI GC gave way to a pod's network setup; retrying soon", "retryIn", gcRetryPeriod, "err", err)
			delay = gcRetryPeriod
		case errors.Is(err, errGCTimeout):
			timeouts++
			delay = gcRetryPeriod
			if timeouts > 1 {
				delay = p.opts.GCPeriod
			}
			klog.ErrorS(err, "CNI GC: the plugins' GC was killed at its deadline", "deadline", p.opts.gcTimeout, "retryIn", delay)
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
	// errGCTimeout is the cause of the end of a plugins' GC call that ran
	// past Options.gcTimeout.
	errGCTimeout = errors.New("the plugins' CNI GC ran out of time")
)

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

// GC frees what netshim's attachments hold for sandboxes that no longer
// exist, and nothing else. libcni's cache is shared with every other CNI
// user on the host (containerd, CRI-O, podman, nerdctl), possibly on the
// same network name, so "cached and not a live netshim sandbox" is not
// "stale": it may be another runtime's live pod. Hence:
//
//  1. a cached attachment gets a DEL only if netshim's ledger records it
//     (same container ID, network and interface) and its sandbox is not
//     live; the DEL uses the config and arguments cached with it, and no
//     netns (the cached path named a process that is gone and whose PID
//     may be reused). An attachment the ledger records but the cache
//     lacks (an ADD that failed halfway and was never torn down) gets a
//     DEL with the recorded config. Every other cached attachment is left
//     alone;
//  2. for a default network of cniVersion >= 1.1.0, the plugins' CNI GC
//     is called with cni.dev/valid-attachments = the live sandboxes' pod
//     interfaces plus every attachment still cached or recorded after
//     step 1: other runtimes' attachments (so that a plugin never frees
//     their addresses), and netshim's whose DEL failed (to be retried at
//     the next pass with their own config). Everything else the plugins
//     hold for the network is a leak that no one's cache knows of; the
//     call has a deadline of its own, Options.gcTimeout (errGCTimeout).
//
// The reads of the snapshot, and step 2, run with no netshim ADD in
// flight (gcGate): an ADD that arrives meanwhile preempts the pass, which
// then fails with errGCPreempted, and the GC loop retries it soon.
//
// One hazard remains with a network shared with another runtime: an ADD
// of that runtime in flight during step 2 is not cached yet, and a plugin
// may free its address. Nothing a runtime can do fixes that (the other
// runtime's GC does the same to netshim); a network meant to be shared
// can set "disableGC" in its config.
func (p *Plugin) GC(ctx context.Context) error {
	if p.ledger == nil {
		return errNoLedger
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()

	// The cache, the ledger and the live set are read together, with no
	// ADD in flight: an attachment made after the list was taken would
	// look stale.
	gcCtx, leave, err := p.gate.enterGC(ctx)
	if err != nil {
		return err
	}
	live, err := p.liveSandboxes(gcCtx)
	if err != nil {
		err = gcStopped(gcCtx, err)
		leave()
		return err
	}
	cached, cerr := p.cni.GetCachedAttachments("")
	owned, lerr := p.ledger.all()
	leave()
	if cerr != nil {
		return fmt.Errorf("reading libcni's cache: %w", cerr)
	}
	if lerr != nil {
		// The unreadable records' attachments are not provably netshim's:
		// left alone (and passed as valid) this pass.
		klog.ErrorS(lerr, "CNI GC: some ledger records are unreadable; their attachments are left alone")
	}

	plan := planGC(cached, owned, live)
	var errs []error
	for _, a := range plan.staleCached {
		if err := p.delStale(ctx, a); err != nil {
			errs = append(errs, err)
			continue
		}
		p.forget(a.ContainerID, a.Network, a.IfName)
		p.opts.Metrics.GCAttachmentReleased()
	}
	for _, r := range plan.staleRecorded {
		if err := p.delRecorded(ctx, r.id, r.entry); err != nil {
			errs = append(errs, err)
			continue
		}
		p.forget(r.id, r.entry.Network, r.entry.IfName)
		p.opts.Metrics.GCAttachmentReleased()
	}

	def, _ := p.getDefaultNetwork()
	if def != nil && supportsStatus(def.list) && !def.list.DisableGC {
		if err := p.gcNetwork(ctx, def.list); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		klog.V(2).InfoS("CNI GC done", "liveSandboxes", len(live), "cachedAttachments", len(cached),
			"deleted", len(plan.staleCached)+len(plan.staleRecorded), "notNetshims", plan.foreign)
	}
	return errors.Join(errs...)
}

var errNoLedger = errors.New("no state directory: netshim cannot tell its own CNI attachments from other runtimes'")

// recordedAttachment is a ledger entry with its container ID.
type recordedAttachment struct {
	id    string
	entry ledgerEntry
}

// gcPlan is what one GC pass deletes.
type gcPlan struct {
	// staleCached are netshim's cached attachments of gone sandboxes.
	staleCached []*libcni.NetworkAttachment
	// staleRecorded are netshim's recorded attachments of gone sandboxes
	// that libcni did not cache (ADD failed halfway).
	staleRecorded []recordedAttachment
	// foreign counts the cached attachments that are not netshim's.
	foreign int
}

// planGC decides, from one consistent snapshot, which attachments are
// netshim's and stale. An attachment is netshim's only if the ledger
// records the same container ID, network and interface: neither the
// network name (another runtime may load the same conf dir) nor the
// container ID's shape (everyone's are hex) nor CNI_ARGS (every
// Kubernetes runtime sets K8S_POD_*) proves it.
func planGC(cached []*libcni.NetworkAttachment, owned map[string][]ledgerEntry, live map[string]bool) gcPlan {
	var plan gcPlan
	inCache := map[[3]string]bool{}
	for _, a := range cached {
		inCache[[3]string{a.ContainerID, a.Network, a.IfName}] = true
		if findEntry(owned[a.ContainerID], a.Network, a.IfName) == nil {
			plan.foreign++
			continue
		}
		if !live[a.ContainerID] {
			plan.staleCached = append(plan.staleCached, a)
		}
	}
	ids := make([]string, 0, len(owned))
	for id := range owned {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if live[id] {
			continue
		}
		for _, e := range owned[id] {
			if !inCache[[3]string{id, e.Network, e.IfName}] {
				plan.staleRecorded = append(plan.staleRecorded, recordedAttachment{id: id, entry: e})
			}
		}
	}
	return plan
}

// validAttachments is cni.dev/valid-attachments for the plugins' GC: the
// live sandboxes' pod interfaces and every attachment cached (by anyone)
// or recorded by netshim, sorted and without duplicates.
func validAttachments(live map[string]bool, cached []*libcni.NetworkAttachment, owned map[string][]ledgerEntry) []types.GCAttachment {
	set := map[types.GCAttachment]bool{}
	for id := range live {
		set[types.GCAttachment{ContainerID: id, IfName: podInterfaceName}] = true
	}
	for _, a := range cached {
		set[types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName}] = true
	}
	for id, entries := range owned {
		for _, e := range entries {
			set[types.GCAttachment{ContainerID: id, IfName: e.IfName}] = true
		}
	}
	out := make([]types.GCAttachment, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ContainerID != out[j].ContainerID {
			return out[i].ContainerID < out[j].ContainerID
		}
		return out[i].IfName < out[j].IfName
	})
	return out
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
		// A complete ADD ran every plugin: a missing one is an error.
		if perr := p.delEachPlugin(ctx, list, rt, false); perr != nil {
			return fmt.Errorf("GC of sandbox %s on network %q: %w", a.ContainerID, a.Network, errors.Join(err, perr))
		}
	}
	return nil
}

// delRecorded runs DEL for an attachment netshim recorded but libcni never
// cached (its ADD failed halfway), with the recorded config and
// arguments, and no netns.
func (p *Plugin) delRecorded(ctx context.Context, id string, e ledgerEntry) error {
	list, err := libcni.ConfListFromBytes(e.Config)
	if err != nil {
		return fmt.Errorf("GC of sandbox %s on network %q: parsing its recorded config: %w", id, e.Network, err)
	}
	list.Name = e.Network
	rt := &libcni.RuntimeConf{
		ContainerID:    id,
		IfName:         e.IfName,
		Args:           e.CniArgs,
		CapabilityArgs: e.CapabilityArgs,
		CacheDir:       p.opts.CacheDir,
	}
	klog.InfoS("CNI GC: releasing what a half-done setup of a sandbox that no longer exists may hold", "podSandboxID", id, "network", e.Network, "ifName", e.IfName)
	if err := p.cni.DelNetworkList(ctx, list, rt); err != nil {
		// The ADD stopped somewhere: a plugin that is not installed never ran.
		if perr := p.delEachPlugin(ctx, list, rt, true); perr != nil {
			return fmt.Errorf("GC of sandbox %s on network %q: %w", id, e.Network, errors.Join(err, perr))
		}
	}
	return nil
}

// gcNetwork calls the plugins' CNI GC on list (see GC, step 2). It does
// so in a critical section of the gate, so that no ADD of netshim runs
// meanwhile (an ADD that arrives preempts it), and reads the live set, the
// cache and the ledger again in it: what step 1 deleted is gone from both,
// what it failed to delete is still there and so stays valid.
func (p *Plugin) gcNetwork(ctx context.Context, list *libcni.NetworkConfigList) error {
	gcCtx, leave, err := p.gate.enterGC(ctx)
	if err != nil {
		return fmt.Errorf("CNI GC of network %q: %w", list.Name, err)
	}
	defer leave()
	live, err := p.liveSandboxes(gcCtx)
	if err != nil {
		return gcStopped(gcCtx, err)
	}
	cached, err := p.cni.GetCachedAttachments("")
	if err != nil {
		return fmt.Errorf("CNI GC of network %q: reading libcni's cache: %w", list.Name, err)
	}
	owned, err := p.ledger.all()
	if err != nil {
		// An unreadable record may be a live attachment of netshim's that
		// the plugins would free: skip this pass rather than risk it.
		return fmt.Errorf("CNI GC of network %q skipped: %w", list.Name, err)
	}
	valid := validAttachments(live, cached, owned)
	// A deadline of its own, not --cni-timeout's (sized for an ADD waiting
	// for a DHCP lease): see defaultGCTimeout.
	callCtx, cancel := context.WithTimeoutCause(gcCtx, p.opts.gcTimeout, errGCTimeout)
	defer cancel()
	if err := p.gcCNI.GCNetworkList(callCtx, list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		if errors.Is(context.Cause(callCtx), errGCTimeout) {
			return fmt.Errorf("CNI GC of network %q: %w after %s: %w", list.Name, errGCTimeout, p.opts.gcTimeout, err)
		}
		return fmt.Errorf("CNI GC of network %q: %w", list.Name, gcStopped(gcCtx, err))
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
