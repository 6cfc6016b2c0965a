//go:build soak

package soak

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	sampleEvery = 10 * time.Second
	// warmUp: the samples of a netshim's first 30 s are not fitted: its
	// caches fill and its heap finds its size then, growth that stops.
	warmUp = 30 * time.Second
)

// metric is what the soak fits, with the bound on its growth per 1,000
// lifecycles (docs/benchmarks.md "Churn soak" gives the reasons).
type metric struct {
	name  string
	bound float64 // per 1,000 lifecycles, in the metric's unit
	unit  float64 // divisor for the report (1<<20: MiB)
	label string
}

var metrics = []metric{
	{"rss", 16 << 20, 1 << 20, "RSS MiB"},
	{"heap", 4 << 20, 1 << 20, "live heap MiB"},
	{"fds", 10, 1, "open fds"},
	{"goroutines", 20, 1, "goroutines"},
}

// sample reads netshim's numbers every sampleEvery until ctx ends, and
// looks for READY sandboxes without an IP each time.
func (w *world) sample(ctx context.Context) {
	hc := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.readOnce(ctx, hc)
		w.sweepReady(ctx)
	}
}

func (w *world) readOnce(ctx context.Context, hc *http.Client) {
	seg, segStart := w.segment()
	pid := w.shim.Pid()
	if pid == 0 || !w.shim.Running() {
		w.res.skippedSamples.Add(1)
		return
	}
	x := float64(w.res.completed.Load() + w.res.aborted.Load())
	vals, err := w.read(ctx, hc, pid)
	// A netshim killed between the reads (or being restarted) gives no
	// sample: its numbers would mix two processes.
	if now, _ := w.segment(); err != nil || now != seg || w.shim.Pid() != pid {
		w.res.skippedSamples.Add(1)
		return
	}
	w.res.addSample(seg, time.Since(segStart) >= warmUp, x, vals)
}

// read takes one reading of each metric of netshim's process pid.
func (w *world) read(ctx context.Context, hc *http.Client, pid int) (map[string]float64, error) {
	vals := map[string]float64{}
	var err error
	if vals["rss"], err = rssBytes("/proc", pid); err != nil {
		return nil, err
	}
	if vals["fds"], err = openFDs("/proc", pid); err != nil {
		return nil, err
	}
	text, err := get(ctx, hc, "http://"+w.addr+"/metrics")
	if err != nil {
		return nil, err
	}
	if vals["goroutines"], err = gauge(text, "go_goroutines"); err != nil {
		return nil, err
	}
	if text, err = get(ctx, hc, "http://"+w.addr+"/debug/pprof/heap?gc=1&debug=1"); err != nil {
		return nil, err
	}
	if vals["heap"], err = heapAlloc(text); err != nil {
		return nil, err
	}
	return vals, nil
}

func get(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), nil
}

// sweepReady books every READY sandbox of the run whose status has no IP:
// kubelet would start its containers with no network.
func (w *world) sweepReady(ctx context.Context) {
	c := w.shim.CRI()
	if c == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := c.Runtime.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		return // netshim is being restarted
	}
	for _, p := range resp.Items {
		if p.GetMetadata().GetNamespace() != w.ns {
			continue
		}
		st, err := c.Runtime.PodSandboxStatus(cctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: p.Id})
		if err != nil {
			continue // removed meanwhile
		}
		if st.GetStatus().GetState() == runtimeapi.PodSandboxState_SANDBOX_READY && st.GetStatus().GetNetwork().GetIp() == "" {
			w.res.readyWithoutIP(p.Id)
		}
	}
}

// fit fits each metric's growth and fails the run on one above its bound.
func (w *world) fit() {
	for _, m := range metrics {
		f := FitSlope(w.res.fitted(m.name))
		w.res.mu.Lock()
		w.res.fits = append(w.res.fits, f)
		w.res.mu.Unlock()
		if f.Exceeds(m.bound / 1000) {
			w.res.fail(fmt.Sprintf("%s grows %s per 1,000 lifecycles, above the bound of %g", m.label, f.Per1000(m.unit), m.bound/m.unit))
		}
	}
}
