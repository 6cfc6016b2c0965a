package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// plugin holds what the tests replace: the sleep itself.
type plugin struct {
	sleep func(time.Duration)
}

// netConf is the plugin's netconf: the common fields and "sleep".
type netConf struct {
	types.PluginConf
	// Sleep is how long ADD sleeps, in time.ParseDuration's form.
	Sleep string `json:"sleep"`
}

// parseConf decodes the netconf and its prevResult (the result of the
// plugins before this one in the chain, when the runtime passes one).
func parseConf(stdin []byte) (*netConf, error) {
	var c netConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "cni-sleep: decoding the netconf", err.Error())
	}
	if err := version.ParsePrevResult(&c.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "cni-sleep: decoding prevResult", err.Error())
	}
	return &c, nil
}

// sleepFor is the "sleep" duration. It must be given: a misspelt key must
// not turn the slow chain into a fast one without anyone noticing.
func (c *netConf) sleepFor() (time.Duration, error) {
	if c.Sleep == "" {
		return 0, types.NewError(types.ErrInvalidNetworkConfig, `cni-sleep: the netconf has no "sleep" duration`, `add e.g. "sleep": "150ms" to the plugin's entry in the conflist`)
	}
	d, err := time.ParseDuration(c.Sleep)
	if err != nil {
		return 0, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("cni-sleep: \"sleep\" %q is not a duration", c.Sleep), err.Error())
	}
	if d < 0 {
		return 0, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("cni-sleep: \"sleep\" %q is negative", c.Sleep), "")
	}
	return d, nil
}

// validate checks what ADD and CHECK need: a sleep duration and a
// previous result to pass on (the plugin adds no interface of its own, so
// it cannot be first in a chain).
func (c *netConf) validate() (time.Duration, error) {
	d, err := c.sleepFor()
	if err != nil {
		return 0, err
	}
	if c.PrevResult == nil {
		return 0, types.NewError(types.ErrInvalidNetworkConfig, "cni-sleep: no prevResult to pass on", "put cni-sleep after a plugin that returns a result (e.g. bridge), not first in the chain")
	}
	return d, nil
}

// add sleeps, then returns the previous result unchanged (with the
// netconf, whose cniVersion the result is printed in).
func (p plugin) add(args *skel.CmdArgs) (*netConf, types.Result, error) {
	c, err := parseConf(args.StdinData)
	if err != nil {
		return nil, nil, err
	}
	d, err := c.validate()
	if err != nil {
		return nil, nil, err
	}
	p.sleep(d)
	return c, c.PrevResult, nil
}

// check answers at once: the plugin set nothing up that could be missing.
func (p plugin) check(args *skel.CmdArgs) error {
	c, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	_, err = c.validate()
	return err
}

// del answers at once, whatever the netconf: there is nothing to release,
// and a DEL must succeed so that the runtime can tear down after a failed
// or misconfigured ADD.
func (p plugin) del(*skel.CmdArgs) error { return nil }

// gc answers at once: the plugin holds nothing for any attachment.
func (p plugin) gc(*skel.CmdArgs) error { return nil }

// status says ready: the plugin depends on nothing.
func (p plugin) status(*skel.CmdArgs) error { return nil }
