package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/network"
)

func (p *Plugin) getHost() (network.Host, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.host == nil {
		return nil, errors.New("cni network plugin not initialised")
	}
	return p.host, nil
}

// SetUpPod implements network.NetworkPlugin: ADD of the loopback network,
// then of the default network. On failure nothing is undone here: the
// caller tears the pod down, which also releases what a half-done ADD took.
func (p *Plugin) SetUpPod(ctx context.Context, pod network.PodRef, annotations map[string]string, opts network.SetUpOptions) error {
	host, err := p.getHost()
	if err != nil {
		return err
	}
	def, err := p.getDefaultNetwork()
	if err != nil {
		return err
	}
	netnsPath, err := host.GetNetNS(ctx, pod.SandboxID)
	if err != nil {
		return fmt.Errorf("getting network namespace of pod sandbox %s: %w", pod.SandboxID, err)
	}
	if netnsPath == "" {
		return fmt.Errorf("pod sandbox %s has no network namespace (is its infra container running?)", pod.SandboxID)
	}
	mappings, err := host.GetPodPortMappings(ctx, pod.SandboxID)
	if err != nil {
		return fmt.Errorf("getting port mappings of pod sandbox %s: %w", pod.SandboxID, err)
	}
	rt, err := buildRuntimeConf(runtimeConfInput{
		Pod:          pod,
		NetNS:        netnsPath,
		IfName:       podInterfaceName,
		CacheDir:     p.opts.CacheDir,
		PortMappings: mappings,
		Annotations:  annotations,
		DNS:          opts.DNS,
		PodCIDRs:     p.getPodCIDRs(),
	})
	if err != nil {
		return err
	}

	ctx, cancel := p.withTimeout(ctx)
	defer cancel()

	// GC must not run between an ADD's allocation and the moment the
	// runtime lists the sandbox (its checkpoint exists before SetUpPod).
	// A GC under way is preempted rather than waited for: its plugins may
	// be slow or hung, and kubelet's deadline for the pod is running.
	release, err := p.gate.enterAdd(ctx)
	if err != nil {
		return fmt.Errorf("setting up pod %s: %w", klog.KRef(pod.Namespace, pod.Name), err)
	}
	defer release()

	// Recorded before the first plugin runs: an ADD that fails halfway
	// (or a crash during it) leaves no libcni cache entry, and this record
	// is then all that says an address may be held, and how to free it.
	lo := loopbackConf(rt)
	if err := p.ledger.record(pod.SandboxID, entryFor(p.loNetwork, lo), entryFor(def.list, rt)); err != nil {
		return fmt.Errorf("setting up pod %s: recording its CNI attachments in %s before adding them: %w", klog.KRef(pod.Namespace, pod.Name), p.opts.StateDir, err)
	}

	// Loopback and the pod network touch different interfaces, so their
	// ADDs run side by side: the loopback exec costs nothing on the way.
	loErr := make(chan error, 1)
	go func() {
		_, err := p.cni.AddNetworkList(ctx, p.loNetwork, lo)
		loErr <- err
	}()
	res, err := p.cni.AddNetworkList(ctx, def.list, rt)
	if lerr := <-loErr; lerr != nil && err == nil {
		return fmt.Errorf("adding pod %s to the loopback network: %w", klog.KRef(pod.Namespace, pod.Name), lerr)
	}
	if err != nil {
		// libcni's text names the failing plugin and carries its message;
		// the user sees it in the pod's events, so it is kept whole.
		return fmt.Errorf("adding pod %s to CNI network %q: %w", klog.KRef(pod.Namespace, pod.Name), def.list.Name, err)
	}
	klog.V(4).InfoS("Added pod to CNI network", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID,
		"network", def.list.Name, "netns", netnsPath, "result", res)
	p.forgetOldNeighbors(pod, res)
	return nil
}

// forgetOldNeighbors drops what the host remembers of the MACs that had
// the new pod's IPs before (see forgetNeighbors). Failing to is not the
// pod's failure: the kernel re-resolves the address in seconds anyway.
func (p *Plugin) forgetOldNeighbors(pod network.PodRef, res types.Result) {
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return // logged whole above; GetPodNetworkStatus reads the netns
	}
	if ips := resultPodIPs(r); len(ips) > 0 {
		if err := p.opts.forgetNeighbors(ips); err != nil {
			klog.ErrorS(err, "Failed to delete the host's stale neighbour entries of a new pod's IPs", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID, "ips", ips)
		}
	}
}

// entryFor is the ledger entry of an ADD of list with rt.
func entryFor(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) ledgerEntry {
	return ledgerEntry{Network: list.Name, IfName: rt.IfName, Config: list.Bytes, CniArgs: rt.Args, CapabilityArgs: rt.CapabilityArgs}
}

// loopbackConf is rt for the loopback network: same identity, its own
// interface name, and no capability arguments (loopback takes none).
func loopbackConf(rt *libcni.RuntimeConf) *libcni.RuntimeConf {
	lo := *rt
	lo.IfName = loInterfaceName
	lo.CapabilityArgs = nil
	return &lo
}

// TearDownPod implements network.NetworkPlugin. It runs when the sandbox
// may already be gone, so it uses whatever is known: DEL is called with an
// empty netns when there is none (plugins then release IPAM and host
// rules), and with the configuration and arguments of the ADD, so that
// the plugins that ran are the ones asked to undo, even if the
// configuration directory changed or is empty since (a CNI DaemonSet
// being reinstalled): from libcni's cache for a complete ADD, else from
// netshim's ledger for one that failed halfway. A sandbox with neither
// had nothing added (or was already torn down): that is success, with no
// plugin run and no network config needed. Only an attachment that is
// known but cannot be deleted fails the teardown.
func (p *Plugin) TearDownPod(ctx context.Context, pod network.PodRef) error {
	host, err := p.getHost()
	if err != nil {
		return err
	}
	netnsPath, err := host.GetNetNS(ctx, pod.SandboxID)
	if err != nil {
		// Not fatal: DEL without a netns still frees the IP.
		klog.ErrorS(err, "Failed to get network namespace; tearing down without it", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID)
		netnsPath = ""
	}
	mappings, err := host.GetPodPortMappings(ctx, pod.SandboxID)
	if err != nil {
		// Not fatal: portmap deletes its rules by container ID, and the
		// recorded ADD arguments, when present, replace these anyway.
		klog.ErrorS(err, "Failed to get port mappings; tearing down without them", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID)
		mappings = nil
	}
	rt, err := buildRuntimeConf(runtimeConfInput{
		Pod:          pod,
		NetNS:        netnsPath,
		IfName:       podInterfaceName,
		CacheDir:     p.opts.CacheDir,
		PortMappings: mappings,
		PodCIDRs:     p.getPodCIDRs(),
	})
	if err != nil {
		return err
	}

	targets, lo, err := p.teardownTargets(pod, rt)
	if err != nil {
		return err
	}
	if len(targets) == 0 && lo == nil {
		klog.V(4).InfoS("No CNI attachment to delete: nothing was added for the sandbox, or it was already deleted", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID)
		return nil
	}

	ctx, cancel := p.withTimeout(ctx)
	defer cancel()

	// As for ADD, loopback's DEL runs beside the pod network's, and only
	// when loopback was added: it is what removes libcni's cache entry
	// (and netshim's record) of that attachment. It is tried twice, as it
	// is idempotent and a failure is mostly a plugin process that died;
	// a failure after that is only logged, since it holds no address,
	// and the record stays for GC to retry.
	loDone := make(chan struct{})
	go func() {
		defer close(loDone)
		if lo == nil {
			return
		}
		var err error
		for range loDelAttempts {
			if err = p.cni.DelNetworkList(ctx, p.loNetwork, lo); err == nil || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			klog.ErrorS(err, "Failed to delete pod from loopback network", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID, "attempts", loDelAttempts)
			return
		}
		p.forget(pod.SandboxID, loNetworkName, loInterfaceName)
	}()
	defer func() { <-loDone }()

	var errs []error
	for _, t := range targets {
		if err := p.delTarget(ctx, pod, t); err != nil {
			errs = append(errs, err)
			continue
		}
		p.forget(pod.SandboxID, t.list.Name, t.rt.IfName)
		klog.V(4).InfoS("Deleted pod from CNI network", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID, "network", t.list.Name, "from", t.source, "netns", netnsPath)
	}
	return errors.Join(errs...)
}

// delTarget is one attachment for TearDownPod to DEL.
type delTarget struct {
	list *libcni.NetworkConfigList
	rt   *libcni.RuntimeConf
	// source says where list and rt come from, for messages.
	source string
	// complete is true for an ADD that finished (libcni cached it): every
	// plugin of the chain ran, so each one's DEL is needed, also that of
	// a plugin whose binary is gone. For a half-done ADD (or a guess) a
	// missing plugin is one that never ran.
	complete bool
}

const (
	sourceCache   = "libcni's cache"
	sourceLedger  = "netshim's attachment ledger"
	sourceDefault = "the current network config"
)

// delTarget runs DEL for t. libcni stops at the first plugin whose DEL
// fails, so the plugins before it in the list (the IPAM-holding bridge,
// typically) would keep what they hold: on failure it retries plugin by
// plugin, carrying on past failures, before giving up.
func (p *Plugin) delTarget(ctx context.Context, pod network.PodRef, t delTarget) error {
	err := p.cni.DelNetworkList(ctx, t.list, t.rt)
	if err == nil {
		return nil
	}
	perr := p.delEachPlugin(ctx, t.list, t.rt, !t.complete)
	if perr == nil {
		klog.InfoS("CNI DEL of the whole network failed, but every installed plugin's own DEL succeeded", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID, "network", t.list.Name, "err", err)
		return nil
	}
	return fmt.Errorf("deleting pod %s from CNI network %q (config from %s): %w; what the attachment holds (its address, host rules) stays allocated until the plugins' DEL succeeds, which the next StopPodSandbox or CNI GC retries",
		klog.KRef(pod.Namespace, pod.Name), t.list.Name, t.source, errors.Join(err, perr))
}

// forget drops one attachment from the ledger after its DEL. A failure is
// logged only: the attachment is gone, and the stale record makes GC run
// one more (harmless) DEL and try again.
func (p *Plugin) forget(id, network, ifName string) {
	if err := p.ledger.remove(id, network, ifName); err != nil {
		klog.ErrorS(err, "Failed to drop a deleted attachment from the ledger; GC retries", "podSandboxID", id, "network", network, "ifName", ifName)
	}
}

// delEachPlugin runs DEL for each plugin of list on its own, in reverse
// order, and reports the failures. With skipMissing, a plugin whose
// binary is missing is skipped: the ADD never got to run it, so it holds
// nothing (the rollback of a setup that failed on exactly that plugin).
// Without, it is an error naming the plugin and where it was looked for.
func (p *Plugin) delEachPlugin(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf, skipMissing bool) error {
	var errs []error
	for i := len(list.Plugins) - 1; i >= 0; i-- {
		plugin := list.Plugins[i]
		single := &libcni.NetworkConfigList{Name: list.Name, CNIVersion: list.CNIVersion, Plugins: []*libcni.PluginConfig{plugin}}
		err := p.cni.DelNetworkList(ctx, single, rt)
		switch {
		case err == nil:
		case isMissingPlugin(err) && skipMissing:
			klog.V(2).InfoS("Skipping DEL of a plugin that is not installed", "plugin", plugin.Network.Type, "network", list.Name)
		case isMissingPlugin(err):
			errs = append(errs, fmt.Errorf("plugin %s ran when the pod was added but is not installed in %s now; reinstall it (the CNI provider may be being reinstalled) so that its DEL can run: %w",
				plugin.Network.Type, strings.Join(p.opts.BinDirs, ","), err))
		default:
			errs = append(errs, fmt.Errorf("plugin %s: %w", plugin.Network.Type, err))
		}
	}
	return errors.Join(errs...)
}

// isMissingPlugin recognises libcni's error for a plugin binary found in
// none of the bin dirs; libcni has no typed error for it.
func isMissingPlugin(err error) bool {
	return strings.Contains(err.Error(), "failed to find plugin")
}

// teardownTargets lists what TearDownPod must DEL for the pod, with rt as
// the base runtime config (current netns): every pod-interface attachment
// in libcni's cache, every one in the ledger that the cache lacks (an ADD
// that failed halfway), and the loopback attachment if either knows of
// it (lo is nil otherwise). Without a ledger, and nothing cached, the
// current default network is DELed as a best effort, as before the ledger
// existed: the ADD may have failed halfway. It fails only for an
// attachment that is known but for which no usable config exists.
func (p *Plugin) teardownTargets(pod network.PodRef, rt *libcni.RuntimeConf) ([]delTarget, *libcni.RuntimeConf, error) {
	cached, err := p.cni.GetCachedAttachments(pod.SandboxID)
	if err != nil {
		// An unreadable cache directory is not "nothing cached": the ledger
		// may still know, and otherwise the user must see why.
		klog.ErrorS(err, "Failed to read libcni's cache", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID)
	}
	recorded, lerr := p.ledger.get(pod.SandboxID)
	if lerr != nil {
		klog.ErrorS(lerr, "Failed to read the attachment ledger", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID)
	}
	def, defErr := p.getDefaultNetwork()

	var targets []delTarget
	var lo *libcni.RuntimeConf
	seen := map[string]bool{}
	for _, a := range cached {
		if a.Network == loNetworkName {
			lo = loopbackConf(rt)
			// The interface name the ADD was cached under: netshim
			// adds loopback as "lo", dockershim and cri-dockerd as
			// "eth0" (the loopback plugin ignores it). DEL removes the
			// cache entry of this name only.
			lo.IfName = a.IfName
			continue
		}
		if a.IfName != podInterfaceName {
			continue // not an attachment netshim makes
		}
		seen[a.Network] = true
		list, perr := libcni.ConfListFromBytes(a.Config)
		if perr == nil {
			list.Name = a.Network // the cache is keyed by this name
			targets = append(targets, delTarget{list: list, rt: cachedRuntimeConf(a, rt), source: sourceCache, complete: true})
			continue
		}
		// The cache entry is there but its config is unusable: the ledger's
		// copy of the same ADD, else the current config of the same name.
		if e := findEntry(recorded, a.Network, a.IfName); e != nil {
			if list, err := libcni.ConfListFromBytes(e.Config); err == nil {
				list.Name = e.Network
				targets = append(targets, delTarget{list: list, rt: cachedRuntimeConf(a, rt), source: sourceLedger, complete: true})
				continue
			}
		}
		if def != nil && def.list.Name == a.Network {
			targets = append(targets, delTarget{list: def.list, rt: cachedRuntimeConf(a, rt), source: sourceDefault, complete: true})
			continue
		}
		return nil, nil, fmt.Errorf("cannot tear down pod %s: its attachment to CNI network %q is in libcni's cache (%s) but the config cached with it is unusable (%v), and no config of that network is loaded; put the network's config back in %s so that its DEL can free the address",
			klog.KRef(pod.Namespace, pod.Name), a.Network, p.cacheDirForMessages(), perr, p.opts.ConfDir)
	}
	for _, e := range recorded {
		switch {
		case e.Network == loNetworkName:
			if lo == nil {
				lo = loopbackConf(rt)
			}
			continue
		case e.IfName != podInterfaceName || seen[e.Network]:
			continue
		}
		list, perr := libcni.ConfListFromBytes(e.Config)
		if perr != nil {
			return nil, nil, fmt.Errorf("cannot tear down pod %s: netshim recorded adding it to CNI network %q, but the recorded config is unusable: %w", klog.KRef(pod.Namespace, pod.Name), e.Network, perr)
		}
		list.Name = e.Network
		targets = append(targets, delTarget{list: list, rt: ledgerRuntimeConf(e, rt), source: sourceLedger})
	}
	if len(targets) > 0 || p.ledger != nil {
		return targets, lo, nil
	}
	// No ledger: nothing says whether an ADD ever ran (and failed halfway,
	// leaving no cache entry). DEL with the current network; without one,
	// say so rather than report success while an address may be held.
	if def != nil {
		return []delTarget{{list: def.list, rt: rt, source: sourceDefault}}, lo, nil
	}
	return nil, nil, fmt.Errorf("cannot tear down pod %s network: no cached CNI config for sandbox %s, no attachment ledger (no state directory) to tell whether it was ever added, and %w",
		klog.KRef(pod.Namespace, pod.Name), pod.SandboxID, defErr)
}

func (p *Plugin) cacheDirForMessages() string {
	if p.opts.CacheDir != "" {
		return p.opts.CacheDir
	}
	return libcni.CacheDir
}

func findEntry(entries []ledgerEntry, network, ifName string) *ledgerEntry {
	for i := range entries {
		if entries[i].Network == network && entries[i].IfName == ifName {
			return &entries[i]
		}
	}
	return nil
}

// cachedRuntimeConf is base (the sandbox's current netns) with the
// arguments libcni cached for attachment a.
func cachedRuntimeConf(a *libcni.NetworkAttachment, base *libcni.RuntimeConf) *libcni.RuntimeConf {
	rt := *base
	rt.IfName = a.IfName
	rt.Args = a.CniArgs
	rt.CapabilityArgs = a.CapabilityArgs
	return &rt
}

// ledgerRuntimeConf is base with the arguments recorded for e.
func ledgerRuntimeConf(e ledgerEntry, base *libcni.RuntimeConf) *libcni.RuntimeConf {
	rt := *base
	rt.IfName = e.IfName
	rt.Args = e.CniArgs
	rt.CapabilityArgs = e.CapabilityArgs
	return &rt
}

// cachedNetwork returns the configuration that libcni cached when the
// pod's default-network ADD succeeded, or nil when there is none. The
// entry for the network named preferName wins if several exist (the
// configuration was renamed between two ADDs of the same sandbox).
func (p *Plugin) cachedNetwork(sandboxID, preferName string) (*libcni.NetworkConfigList, error) {
	attachments, err := p.cni.GetCachedAttachments(sandboxID)
	if err != nil {
		return nil, fmt.Errorf("reading CNI cache: %w", err)
	}
	var pick *libcni.NetworkAttachment
	for _, a := range attachments {
		if a.IfName != podInterfaceName || a.Network == loNetworkName {
			continue
		}
		if pick == nil || a.Network == preferName {
			pick = a
		}
	}
	if pick == nil {
		return nil, nil
	}
	list, err := libcni.ConfListFromBytes(pick.Config)
	if err != nil {
		return nil, fmt.Errorf("parsing cached config of network %q: %w", pick.Network, err)
	}
	// The cache is keyed by this name; the one inside the bytes is the same
	// unless the file was edited by hand.
	list.Name = pick.Network
	return list, nil
}

// GetPodNetworkStatus implements network.NetworkPlugin. The addresses are
// those of the ADD result (both families, IPv4 first), as libcni cached it
// for this attachment: that is what the plugins assigned and what
// teardown will release, and reading it needs no netns entry. The pod's
// netns is the fallback for a result without pod addresses. The result is
// also returned raw, for verbose status.
func (p *Plugin) GetPodNetworkStatus(ctx context.Context, pod network.PodRef) (*network.PodNetworkStatus, error) {
	host, err := p.getHost()
	if err != nil {
		return nil, err
	}
	netnsPath, err := host.GetNetNS(ctx, pod.SandboxID)
	if err != nil {
		klog.V(4).InfoS("Failed to get network namespace; using cached CNI result", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID, "err", err)
		netnsPath = ""
	}

	status := &network.PodNetworkStatus{}
	cachedIPs, raw, cacheErr := p.cachedResult(pod)
	status.Result = raw
	if len(cachedIPs) > 0 {
		status.IPs = cachedIPs
		return status, nil
	}

	if netnsPath != "" {
		ips, err := podIPsInNetNS(netnsPath, podInterfaceName)
		switch {
		case err == nil && len(ips) > 0:
			status.IPs = ips
			return status, nil
		case err == nil:
			return nil, fmt.Errorf("no global IP address on %s in network namespace %s of pod %s", podInterfaceName, netnsPath, klog.KRef(pod.Namespace, pod.Name))
		case !errors.Is(err, errNetNSGone):
			return nil, fmt.Errorf("reading IP addresses of pod %s: %w", klog.KRef(pod.Namespace, pod.Name), err)
		}
		klog.V(4).InfoS("Network namespace is gone", "pod", klog.KRef(pod.Namespace, pod.Name), "netns", netnsPath, "err", err)
	}
	if cacheErr != nil {
		return nil, fmt.Errorf("pod %s has no network namespace and its cached CNI result is unusable: %w", klog.KRef(pod.Namespace, pod.Name), cacheErr)
	}
	return nil, fmt.Errorf("pod %s has no network namespace and no cached CNI result with an IP address", klog.KRef(pod.Namespace, pod.Name))
}

// cachedResult returns the pod IPs of the cached default-network ADD
// result, IPv4 first, and the result as JSON. No cache entry is not an
// error.
func (p *Plugin) cachedResult(pod network.PodRef) ([]net.IP, []byte, error) {
	var defName string
	if def, _ := p.getDefaultNetwork(); def != nil {
		defName = def.list.Name
	}
	list, err := p.cachedNetwork(pod.SandboxID, defName)
	if err != nil || list == nil {
		return nil, nil, err
	}
	rt := &libcni.RuntimeConf{ContainerID: pod.SandboxID, IfName: podInterfaceName, CacheDir: p.opts.CacheDir}
	res, err := p.cni.GetNetworkListCachedResult(list, rt)
	if err != nil {
		return nil, nil, fmt.Errorf("reading cached CNI result of network %q: %w", list.Name, err)
	}
	if res == nil {
		return nil, nil, nil
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding cached CNI result: %w", err)
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return nil, raw, fmt.Errorf("converting cached CNI result: %w", err)
	}
	return resultPodIPs(r), raw, nil
}

// resultPodIPs returns the addresses of a CNI result that belong to the
// pod (not to a host-side bridge or veth), IPv4 first.
func resultPodIPs(r *current.Result) []net.IP {
	var ips []net.IP
	for _, ipc := range r.IPs {
		if ipc.Interface != nil {
			i := *ipc.Interface
			if i < 0 || i >= len(r.Interfaces) {
				continue
			}
			intf := r.Interfaces[i]
			if intf.Sandbox == "" && intf.Name != podInterfaceName {
				continue
			}
		}
		ips = append(ips, ipc.Address.IP)
	}
	return orderIPs(ips)
}

// orderIPs puts IPv4 addresses before IPv6 ones, keeping the order within
// each family and dropping duplicates: the first IP is the pod's primary.
func orderIPs(ips []net.IP) []net.IP {
	var v4, v6 []net.IP
	seen := map[string]bool{}
	for _, ip := range ips {
		if ip == nil || seen[ip.String()] {
			continue
		}
		seen[ip.String()] = true
		if ip4 := ip.To4(); ip4 != nil {
			v4 = append(v4, ip4)
		} else {
			v6 = append(v6, ip)
		}
	}
	return append(v4, v6...)
}
