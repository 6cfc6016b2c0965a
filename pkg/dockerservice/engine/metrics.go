package engine

import (
	"context"
	"io"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/image"
	dnetwork "github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/netshim/netshim/pkg/metrics"
)

// Instrument returns c with the latency and errors of each of its calls
// recorded in m (netshim_docker_call_*), by method name. With a nil m it
// returns c itself: no wrapper on the path at all.
//
// Calls that open a stream (ImagePull, ContainerLogs, ContainerExecAttach)
// are timed until the stream is open, not while it is read. Events is not
// timed: its stream lives as long as the daemon (reconnects show in
// netshim_index_resyncs_total).
func Instrument(c Client, m *metrics.Metrics) Client {
	if m == nil {
		return c
	}
	return &instrumentedClient{c: c, m: m}
}

type instrumentedClient struct {
	c Client
	m *metrics.Metrics
}

// observe records a call that began at start; it is deferred with the
// start time evaluated at the call, so each method stays one line.
func (d *instrumentedClient) observe(call string, start time.Time, err error) {
	d.m.ObserveDockerCall(call, time.Since(start), err)
}

func (d *instrumentedClient) Ping(ctx context.Context) (r types.Ping, err error) {
	defer func(t time.Time) { d.observe("Ping", t, err) }(time.Now())
	return d.c.Ping(ctx)
}

func (d *instrumentedClient) ServerVersion(ctx context.Context) (r types.Version, err error) {
	defer func(t time.Time) { d.observe("ServerVersion", t, err) }(time.Now())
	return d.c.ServerVersion(ctx)
}

func (d *instrumentedClient) Info(ctx context.Context) (r system.Info, err error) {
	defer func(t time.Time) { d.observe("Info", t, err) }(time.Now())
	return d.c.Info(ctx)
}

func (d *instrumentedClient) DiskUsage(ctx context.Context, options types.DiskUsageOptions) (r types.DiskUsage, err error) {
	defer func(t time.Time) { d.observe("DiskUsage", t, err) }(time.Now())
	return d.c.DiskUsage(ctx, options)
}

func (d *instrumentedClient) ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (r image.InspectResponse, err error) {
	defer func(t time.Time) { d.observe("ImageInspect", t, err) }(time.Now())
	return d.c.ImageInspect(ctx, ref, opts...)
}

func (d *instrumentedClient) ImagePull(ctx context.Context, ref string, options image.PullOptions) (r io.ReadCloser, err error) {
	defer func(t time.Time) { d.observe("ImagePull", t, err) }(time.Now())
	return d.c.ImagePull(ctx, ref, options)
}

func (d *instrumentedClient) ImageList(ctx context.Context, options image.ListOptions) (r []image.Summary, err error) {
	defer func(t time.Time) { d.observe("ImageList", t, err) }(time.Now())
	return d.c.ImageList(ctx, options)
}

func (d *instrumentedClient) ImageRemove(ctx context.Context, ref string, options image.RemoveOptions) (r []image.DeleteResponse, err error) {
	defer func(t time.Time) { d.observe("ImageRemove", t, err) }(time.Now())
	return d.c.ImageRemove(ctx, ref, options)
}

func (d *instrumentedClient) ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networkingConfig *dnetwork.NetworkingConfig, platform *ocispec.Platform, containerName string) (r container.CreateResponse, err error) {
	defer func(t time.Time) { d.observe("ContainerCreate", t, err) }(time.Now())
	return d.c.ContainerCreate(ctx, config, hostConfig, networkingConfig, platform, containerName)
}

func (d *instrumentedClient) ContainerStart(ctx context.Context, id string, options container.StartOptions) (err error) {
	defer func(t time.Time) { d.observe("ContainerStart", t, err) }(time.Now())
	return d.c.ContainerStart(ctx, id, options)
}

func (d *instrumentedClient) ContainerStop(ctx context.Context, id string, options container.StopOptions) (err error) {
	defer func(t time.Time) { d.observe("ContainerStop", t, err) }(time.Now())
	return d.c.ContainerStop(ctx, id, options)
}

func (d *instrumentedClient) ContainerRemove(ctx context.Context, id string, options container.RemoveOptions) (err error) {
	defer func(t time.Time) { d.observe("ContainerRemove", t, err) }(time.Now())
	return d.c.ContainerRemove(ctx, id, options)
}

func (d *instrumentedClient) ContainerInspect(ctx context.Context, id string) (r container.InspectResponse, err error) {
	defer func(t time.Time) { d.observe("ContainerInspect", t, err) }(time.Now())
	return d.c.ContainerInspect(ctx, id)
}

func (d *instrumentedClient) ContainerList(ctx context.Context, options container.ListOptions) (r []container.Summary, err error) {
	defer func(t time.Time) { d.observe("ContainerList", t, err) }(time.Now())
	return d.c.ContainerList(ctx, options)
}

func (d *instrumentedClient) ContainerUpdate(ctx context.Context, id string, updateConfig container.UpdateConfig) (r container.UpdateResponse, err error) {
	defer func(t time.Time) { d.observe("ContainerUpdate", t, err) }(time.Now())
	return d.c.ContainerUpdate(ctx, id, updateConfig)
}

func (d *instrumentedClient) ContainerLogs(ctx context.Context, id string, options container.LogsOptions) (r io.ReadCloser, err error) {
	defer func(t time.Time) { d.observe("ContainerLogs", t, err) }(time.Now())
	return d.c.ContainerLogs(ctx, id, options)
}

func (d *instrumentedClient) ContainerExecCreate(ctx context.Context, id string, options container.ExecOptions) (r container.ExecCreateResponse, err error) {
	defer func(t time.Time) { d.observe("ContainerExecCreate", t, err) }(time.Now())
	return d.c.ContainerExecCreate(ctx, id, options)
}

func (d *instrumentedClient) ContainerExecAttach(ctx context.Context, execID string, options container.ExecAttachOptions) (r types.HijackedResponse, err error) {
	defer func(t time.Time) { d.observe("ContainerExecAttach", t, err) }(time.Now())
	return d.c.ContainerExecAttach(ctx, execID, options)
}

func (d *instrumentedClient) ContainerExecInspect(ctx context.Context, execID string) (r container.ExecInspect, err error) {
	defer func(t time.Time) { d.observe("ContainerExecInspect", t, err) }(time.Now())
	return d.c.ContainerExecInspect(ctx, execID)
}

// ClientVersion and NegotiateAPIVersionPing make no call.
func (d *instrumentedClient) ClientVersion() string                { return d.c.ClientVersion() }
func (d *instrumentedClient) NegotiateAPIVersionPing(p types.Ping) { d.c.NegotiateAPIVersionPing(p) }

func (d *instrumentedClient) Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error) {
	return d.c.Events(ctx, options)
}
