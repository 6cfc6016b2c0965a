package cni

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"k8s.io/klog/v2"
)

// hostFirewall is what decides whether bridged pod-to-pod traffic crosses
// iptables' FORWARD chain, and what that chain does with it.
type hostFirewall struct {
	// bridgeNFCallIPTables is net.bridge.bridge-nf-call-iptables: bridged
	// IPv4 traffic goes through iptables.
	bridgeNFCallIPTables bool
	// forwardPolicy is the filter table's FORWARD policy ("DROP" on a
	// Docker host), "" if unknown.
	forwardPolicy string
	// rules is `iptables -S` of the filter table, one rule a line.
	rules []string
}

// firewallWarning returns the warning for list on a host with fw, or "":
// a bridge network without the firewall plugin, on a host whose FORWARD
// policy drops what bridge netfilter hands it, and no rule of the host's
// accepting the bridge's traffic, drops traffic between two pods.
func firewallWarning(path string, list *libcni.NetworkConfigList, fw hostFirewall) string {
	if !fw.bridgeNFCallIPTables || fw.forwardPolicy != "DROP" {
		return ""
	}
	var bridges []string
	for _, pl := range list.Plugins {
		switch pl.Network.Type {
		case "firewall":
			return ""
		case "bridge":
			var conf struct {
				Bridge string `json:"bridge"`
			}
			_ = json.Unmarshal(pl.Bytes, &conf)
			if conf.Bridge == "" {
				conf.Bridge = "cni0" // the bridge plugin's default
			}
			bridges = append(bridges, conf.Bridge)
		}
	}
	for _, br := range bridges {
		if acceptsBridge(fw.rules, br) {
			continue
		}
		return fmt.Sprintf("pod-to-pod traffic on bridge %s will be dropped: the host's iptables FORWARD policy is DROP (Docker sets it) "+
			"and net.bridge.bridge-nf-call-iptables=1, and CNI network %q (%s) has no \"firewall\" plugin; "+
			"add {\"type\": \"firewall\"} to its plugins, or accept the bridge's traffic (iptables -I DOCKER-USER -i %s -o %s -j ACCEPT)",
			br, list.Name, path, br, br)
	}
	return ""
}

// acceptsBridge reports whether a rule accepts all traffic forwarded from
// the bridge to itself: "-A <chain> -i br [-o br] -j ACCEPT", nothing more.
func acceptsBridge(rules []string, br string) bool {
	for _, r := range rules {
		f := strings.Fields(r)
		if len(f) < 2 || f[0] != "-A" {
			continue
		}
		in, out, accept, other := false, true, false, false
		for i := 2; i < len(f); i++ {
			switch {
			case f[i] == "-i" && i+1 < len(f):
				in = f[i+1] == br
				i++
			case f[i] == "-o" && i+1 < len(f):
				out = f[i+1] == br
				i++
			case f[i] == "-j" && i+1 < len(f):
				accept = f[i+1] == "ACCEPT"
				i++
			default:
				other = true
			}
		}
		if in && out && accept && !other {
			return true
		}
	}
	return false
}

// refreshFirewall looks at the host firewall for def when the network
// changed or the last look is older than firewallRecheckPeriod, and keeps
// the warning for Status. A new warning is logged once.
func (p *Plugin) refreshFirewall(ctx context.Context, def *confFile, changed bool) {
	p.mu.RLock()
	checked := p.firewallChecked
	p.mu.RUnlock()
	if !changed && !checked.IsZero() && time.Since(checked) < firewallRecheckPeriod {
		return
	}
	warn := ""
	fw, err := p.opts.probeFirewall(ctx)
	if err != nil {
		klog.V(2).InfoS("Cannot read the host firewall; not checking for dropped pod-to-pod traffic", "err", err)
	} else {
		warn = firewallWarning(def.path, def.list, fw)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.defaultNetwork != def {
		return
	}
	p.firewallChecked = time.Now()
	if warn != "" && warn != p.firewallWarn {
		klog.InfoS("WARNING: " + warn)
	}
	p.firewallWarn = warn
}
