package network

import (
	"fmt"
	"sort"
	"strings"
)

// InitNetworkPlugin picks the plugin named name among plugins (the noop
// plugin is always available as "none", and "" means "none") and
// initialises it with host and cfg.
func InitNetworkPlugin(plugins []NetworkPlugin, name string, host Host, cfg PluginConfig) (NetworkPlugin, error) {
	if name == "" || name == NoopPluginName {
		return NoopPlugin{}, nil
	}
	names := []string{NoopPluginName}
	for _, p := range plugins {
		if p.Name() != name {
			names = append(names, p.Name())
			continue
		}
		if err := p.Init(host, cfg); err != nil {
			return nil, fmt.Errorf("initialising network plugin %q: %w", name, err)
		}
		return p, nil
	}
	sort.Strings(names)
	return nil, fmt.Errorf("network plugin %q not found (available: %s)", name, strings.Join(names, ", "))
}
