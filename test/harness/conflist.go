package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// conflist is what the Conflist options shape: by default a bridge
// network with host-local IPAM followed by portmap, which is what kubelet
// setups and every suite here use.
type conflist struct {
	version      string
	name         string
	bridge       string
	subnets      []string
	ipamDataDir  string
	defaultRoute bool
	hairpin      bool
	ipam         map[string]any
	extra        []map[string]any
	portmap      bool
	chain        []map[string]any
	fileName     string
	firewall     bool
}

// ConflistOption changes the network config Conflist builds.
type ConflistOption func(*conflist)

// WithNetworkName names the network (default: the bridge's name).
func WithNetworkName(name string) ConflistOption { return func(c *conflist) { c.name = name } }

// WithBridge names the bridge the bridge plugin creates or adopts.
func WithBridge(name string) ConflistOption { return func(c *conflist) { c.bridge = name } }

// WithSubnets gives host-local one range set per subnet (one per family
// for dual-stack).
func WithSubnets(cidrs ...string) ConflistOption {
	return func(c *conflist) { c.subnets = append([]string(nil), cidrs...) }
}

// WithIPAMDataDir keeps host-local's store under dir instead of the
// host's /var/lib/cni/networks, so that a test's allocations are its own.
func WithIPAMDataDir(dir string) ConflistOption { return func(c *conflist) { c.ipamDataDir = dir } }

// WithDefaultRoute adds a 0.0.0.0/0 route to host-local's result.
func WithDefaultRoute() ConflistOption { return func(c *conflist) { c.defaultRoute = true } }

// WithHairpin sets the bridge plugin's hairpinMode (default on).
func WithHairpin(on bool) ConflistOption { return func(c *conflist) { c.hairpin = on } }

// WithIPAM replaces the host-local IPAM section (e.g. by a wrapper plugin
// that delays or breaks it); subnets and data dir are then the caller's.
func WithIPAM(ipam map[string]any) ConflistOption { return func(c *conflist) { c.ipam = ipam } }

// WithPlugins appends plugins after bridge and before portmap.
func WithPlugins(plugins ...map[string]any) ConflistOption {
	return func(c *conflist) { c.extra = append(c.extra, plugins...) }
}

// WithFirewall ends the chain with the firewall plugin, which lets pod
// traffic that crosses the bridge through Docker's FORWARD policy (DROP).
func WithFirewall() ConflistOption { return func(c *conflist) { c.firewall = true } }

// WithoutPortmap leaves portmap out of the chain.
func WithoutPortmap() ConflistOption { return func(c *conflist) { c.portmap = false } }

// WithChain replaces the whole generated chain by plugins.
func WithChain(plugins ...map[string]any) ConflistOption {
	return func(c *conflist) { c.chain = plugins }
}

// WithCNIVersion sets the conflist's cniVersion (default 1.0.0).
func WithCNIVersion(v string) ConflistOption { return func(c *conflist) { c.version = v } }

// WithFileName names the file WriteConflist writes (default
// 10-<network name>.conflist).
func WithFileName(name string) ConflistOption { return func(c *conflist) { c.fileName = name } }

func newConflist(opts []ConflistOption) *conflist {
	c := &conflist{version: "1.0.0", hairpin: true, portmap: true}
	for _, o := range opts {
		o(c)
	}
	if c.name == "" {
		c.name = c.bridge
	}
	return c
}

// Conflist returns the JSON of a CNI network config list.
func Conflist(opts ...ConflistOption) ([]byte, error) {
	return newConflist(opts).encode()
}

func (c *conflist) encode() ([]byte, error) {
	if c.name == "" {
		return nil, errors.New("conflist: no network name (WithNetworkName or WithBridge)")
	}
	plugins := c.chain
	if plugins == nil {
		if c.bridge == "" {
			return nil, errors.New("conflist: no bridge name (WithBridge)")
		}
		ipam := c.ipam
		if ipam == nil {
			if len(c.subnets) == 0 {
				return nil, errors.New("conflist: no subnet for host-local (WithSubnets)")
			}
			var ranges [][]map[string]any
			for _, s := range c.subnets {
				ranges = append(ranges, []map[string]any{{"subnet": s}})
			}
			ipam = map[string]any{"type": "host-local", "ranges": ranges}
			if c.ipamDataDir != "" {
				ipam["dataDir"] = c.ipamDataDir
			}
			if c.defaultRoute {
				ipam["routes"] = []map[string]string{{"dst": "0.0.0.0/0"}}
			}
		}
		bridge := map[string]any{
			"type":      "bridge",
			"bridge":    c.bridge,
			"isGateway": true,
			"ipMasq":    false,
			"ipam":      ipam,
		}
		if c.hairpin {
			bridge["hairpinMode"] = true
		}
		plugins = append([]map[string]any{bridge}, c.extra...)
		if c.portmap {
			plugins = append(plugins, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}})
		}
		if c.firewall {
			plugins = append(plugins, map[string]any{"type": "firewall"})
		}
	}
	data, err := json.MarshalIndent(map[string]any{
		"cniVersion": c.version,
		"name":       c.name,
		"plugins":    plugins,
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding conflist: %w", err)
	}
	return data, nil
}

// writeConflist writes the config into dir and returns its path.
func writeConflist(dir string, opts []ConflistOption) (string, error) {
	c := newConflist(opts)
	data, err := c.encode()
	if err != nil {
		return "", err
	}
	name := c.fileName
	if name == "" {
		name = "10-" + c.name + ".conflist"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// WriteConflist writes a network config into dir (netshim's
// --cni-conf-dir) and returns its path.
func WriteConflist(t testing.TB, dir string, opts ...ConflistOption) string {
	t.Helper()
	path, err := writeConflist(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
