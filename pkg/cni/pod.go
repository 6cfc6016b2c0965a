package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/cni/libcni"
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
	p.gcMu.RLock()
	defer p.gcMu.RUnlock()

	// Loopback and the pod network touch different interfaces, so their
	// ADDs run side by side: the loopback exec costs nothing on the way.
	loErr := make(chan error, 1)
	go func() {
		_, err := p.cni.AddNetworkList(ctx, p.loNetwork, loopbackConf(rt))
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
	return nil
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
// rules), and with the configuration and capability arguments of the ADD
// as cached by libcni, so that the plugins that ran are the ones asked to
// undo, even if the configuration directory changed since.
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
		// cached ADD arguments, when present, replace these anyway.
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

	list, delRt, err := p.teardownTarget(pod, rt)
	if err != nil {
		return err
	}

	ctx, cancel := p.withTimeout(ctx)
	defer cancel()

	// As for ADD, loopback's DEL runs beside the pod network's. It runs
	// even without a netns (the plugin then has nothing to undo and
	// succeeds): it is what removes libcni's cache entry for the
	// attachment, which would otherwise outlive the pod. A failure is only
	// logged, since it holds no address.
	loDone := make(chan struct{})
	go func() {
		defer close(loDone)
		if err := p.cni.DelNetworkList(ctx, p.loNetwork, loopbackConf(rt)); err != nil {
			klog.ErrorS(err, "Failed to delete pod from loopback network", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID)
		}
	}()
	defer func() { <-loDone }()

	if err := p.cni.DelNetworkList(ctx, list, delRt); err != nil {
		// libcni stops at the first plugin whose DEL fails, so the plugins
		// before it in the list (the IPAM-holding bridge, typically) would
		// keep what they hold. Retry plugin by plugin, carrying on past
		// failures, before giving up.
		if perr := p.delEachPlugin(ctx, list, delRt); perr != nil {
			return fmt.Errorf("deleting pod %s from CNI network %q: %w", klog.KRef(pod.Namespace, pod.Name), list.Name, errors.Join(err, perr))
		}
		klog.InfoS("CNI DEL of the whole network failed, but every installed plugin's own DEL succeeded", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID, "network", list.Name, "err", err)
	}
	klog.V(4).InfoS("Deleted pod from CNI network", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID, "network", list.Name, "netns", netnsPath)
	return nil
}

// delEachPlugin runs DEL for each plugin of list on its own, in reverse
// order, and reports the failures. A plugin whose binary is missing is
// skipped: it never ran, so it holds nothing (this is the rollback of a
// setup that failed on exactly that plugin).
func (p *Plugin) delEachPlugin(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	var errs []error
	for i := len(list.Plugins) - 1; i >= 0; i-- {
		plugin := list.Plugins[i]
		single := &libcni.NetworkConfigList{Name: list.Name, CNIVersion: list.CNIVersion, Plugins: []*libcni.PluginConfig{plugin}}
		err := p.cni.DelNetworkList(ctx, single, rt)
		switch {
		case err == nil:
		case isMissingPlugin(err):
			klog.V(2).InfoS("Skipping DEL of a plugin that is not installed", "plugin", plugin.Network.Type, "network", list.Name)
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

// teardownTarget picks the network to DEL: the one the pod was added to,
// from libcni's cache, else the current default network. With neither it
// fails rather than report success while an address may still be held.
func (p *Plugin) teardownTarget(pod network.PodRef, rt *libcni.RuntimeConf) (*libcni.NetworkConfigList, *libcni.RuntimeConf, error) {
	def, defErr := p.getDefaultNetwork()
	var defName string
	if def != nil {
		defName = def.list.Name
	}
	cached, err := p.cachedNetwork(pod.SandboxID, defName)
	if err != nil {
		klog.ErrorS(err, "Ignoring unreadable CNI cache entry", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID)
	}
	if cached != nil && len(cached.Plugins) > 0 {
		_, cachedRt, err := p.cni.GetNetworkListCachedConfig(cached, rt)
		if err == nil && cachedRt != nil {
			klog.V(4).InfoS("Tearing down with the cached network config", "pod", klog.KRef(pod.Namespace, pod.Name), "network", cached.Name)
			return cached, cachedRt, nil
		}
		if err != nil {
			klog.ErrorS(err, "Ignoring unreadable CNI cache entry", "pod", klog.KRef(pod.Namespace, pod.Name), "podSandboxID", pod.SandboxID)
		}
	}
	if def != nil {
		return def.list, rt, nil
	}
	return nil, nil, fmt.Errorf("cannot tear down pod %s network: no cached CNI config for sandbox %s and %w",
		klog.KRef(pod.Namespace, pod.Name), pod.SandboxID, defErr)
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
