package cni

import (
	"errors"

	"github.com/containernetworking/cni/libcni"

	"github.com/netshim/netshim/pkg/network"
)

// This file is the hook for plugins (kubenet) that build their default
// network in memory instead of loading it from a conf dir, and reuse this
// plugin's setup, teardown (libcni's cached config for DEL) and status
// machinery for it.

// InitStatic initialises p like Init, but p will read no conf dir: its
// default network is what SetStaticNetwork sets, and until then none (so
// SetUpPod fails and Status reports not ready). Call it instead of Init.
func (p *Plugin) InitStatic(host network.Host, cfg network.PluginConfig) error {
	if host == nil {
		return errors.New("cni plugin needs a network host")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.initialized {
		return errors.New("cni plugin initialised twice")
	}
	select {
	case <-p.stopCh:
		return errors.New("cni plugin already stopped")
	default:
	}
	p.initialized = true
	p.host = host
	p.cfg = cfg
	p.loadErr = errors.New("no network configured yet")
	return nil
}

// SetStaticNetwork makes list the default network of a plugin initialised
// with InitStatic. A nil list removes it, with why as the reason Status
// and SetUpPod give. Pods set up before keep being torn down with the
// config libcni cached for them.
func (p *Plugin) SetStaticNetwork(list *libcni.NetworkConfigList, why error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if list == nil {
		if why == nil {
			why = errors.New("no network configured")
		}
		p.defaultNetwork, p.loadErr = nil, why
		return
	}
	p.defaultNetwork = &confFile{path: "(built in: " + list.Name + ")", list: list}
	p.loadErr = nil
}
