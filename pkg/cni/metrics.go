package cni

import (
	"context"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/netshim/netshim/pkg/metrics"
)

// instrumentedCNI times the CNI verbs netshim runs (ADD, DEL, CHECK, GC,
// STATUS on network lists: every plugin call goes through one of them) by
// verb and network name. The rest of libcni.CNI (cache reads, single
// plugin calls netshim does not make) passes through.
type instrumentedCNI struct {
	libcni.CNI
	m *metrics.Metrics
}

// instrumentCNI wraps c when m is set; with nil m it returns c itself.
func instrumentCNI(c libcni.CNI, m *metrics.Metrics) libcni.CNI {
	if m == nil || c == nil {
		return c
	}
	return &instrumentedCNI{CNI: c, m: m}
}

func (c *instrumentedCNI) observe(verb string, list *libcni.NetworkConfigList, start time.Time, err error) {
	network := ""
	if list != nil {
		network = list.Name
	}
	c.m.ObserveCNI(verb, network, time.Since(start), err)
}

func (c *instrumentedCNI) AddNetworkList(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (r types.Result, err error) {
	defer func(t time.Time) { c.observe("ADD", list, t, err) }(time.Now())
	return c.CNI.AddNetworkList(ctx, list, rt)
}

func (c *instrumentedCNI) DelNetworkList(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (err error) {
	defer func(t time.Time) { c.observe("DEL", list, t, err) }(time.Now())
	return c.CNI.DelNetworkList(ctx, list, rt)
}

func (c *instrumentedCNI) CheckNetworkList(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (err error) {
	defer func(t time.Time) { c.observe("CHECK", list, t, err) }(time.Now())
	return c.CNI.CheckNetworkList(ctx, list, rt)
}

func (c *instrumentedCNI) GCNetworkList(ctx context.Context, list *libcni.NetworkConfigList, args *libcni.GCArgs) (err error) {
	defer func(t time.Time) { c.observe("GC", list, t, err) }(time.Now())
	return c.CNI.GCNetworkList(ctx, list, args)
}

func (c *instrumentedCNI) GetStatusNetworkList(ctx context.Context, list *libcni.NetworkConfigList) (err error) {
	defer func(t time.Time) { c.observe("STATUS", list, t, err) }(time.Now())
	return c.CNI.GetStatusNetworkList(ctx, list)
}
