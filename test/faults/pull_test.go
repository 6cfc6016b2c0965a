//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

const (
	// pullDeadline is the scenario's --image-pull-progress-deadline.
	pullDeadline = 10 * time.Second
	// pullSlack is how long past pullDeadline a stalled PullImage may
	// take to fail: the time to reach the stalled layer (a ping, a
	// manifest and a config from a loopback registry, well under a
	// second) and to tear the pull down.
	pullSlack = 10 * time.Second
	// stallAfter is how much of a layer the stalling proxy forwards
	// before it stops: more than 1% of it, so that Docker reports it
	// (its progress messages come per 1% of a layer, or 512 KiB).
	stallAfter = 16 << 10
	// layerMin tells layers (the busybox-static one is about 1 MiB
	// compressed) from config blobs (a few KiB), which are never slowed.
	layerMin = 64 << 10
	// slowChunks is how many pieces the slow proxy sends a layer in, one
	// every slowGap: 12.5% each, so each piece is a progress message,
	// and the gaps are far below the deadline while the whole download
	// takes almost twice as long as it.
	slowChunks = 8
	slowGap    = pullDeadline / 4
)

// (9) An image pull whose registry connection stalls (an HTTP proxy on
// loopback in front of docker-registry forwards a layer's first bytes and
// then nothing, keeping the connection open) must fail once Docker has
// reported no progress for --image-pull-progress-deadline, with
// DeadlineExceeded naming the image and the deadline, and leave nothing:
// Docker's pull is cancelled (its log says so), no image and no partial
// download stay, and the next pull fetches the layer afresh. That pull,
// through the same proxy, is slow but moves (a piece of the layer every
// deadline/4), takes longer than the deadline in all, and must succeed.
// The engine is a private dockerd, so that the pull's state is the
// scenario's own. Before 0b07cfc netshim waited for a stalled pull until
// the caller gave up, which failed with the caller's own "context
// deadline exceeded".
func testStalledImagePull(t *testing.T, w *world) {
	d := harness.StartPrivateDockerd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	r := harness.StartRegistry(t, harness.WithRegistryPort(port), harness.WithRegistryDir(filepath.Join(w.sc.dir, "registry")))
	name := r.Prefix() + "/nsflt/busybox:stall"
	if err := r.PushAs(ctx, harness.EngineCLI(""), workloadImage, name); err != nil {
		t.Fatalf("pushing %s to the scenario's registry: %v", workloadImage, err)
	}
	p := startPullProxy(t, r.Addr())
	ref := p.addr + "/nsflt/busybox:stall"
	w.start(w.conflist(), harness.WithDockerEndpoint(d.Endpoint()), harness.WithArgs("--image-pull-progress-deadline", pullDeadline.String()))
	c := w.ns.CRI()
	pull := func(timeout time.Duration) (*runtimeapi.PullImageResponse, time.Duration, error) {
		pctx, pcancel := context.WithTimeout(ctx, timeout)
		defer pcancel()
		start := time.Now()
		resp, err := c.Image.PullImage(pctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		return resp, time.Since(start), err
	}

	// Stalled: fails at the deadline, naming the image and the deadline.
	p.setMode(proxyStall)
	type result struct {
		took time.Duration
		err  error
	}
	res := make(chan result, 1)
	go func() {
		_, took, err := pull(pullDeadline + pullSlack + 20*time.Second)
		res <- result{took, err}
	}()
	// While it stalls, Docker holds the layer's first bytes in a partial
	// download: what the check after the failure must find gone.
	dataRoot := filepath.Join(d.Dir, "data")
	var partial []string
	if !harness.Eventually(pullDeadline, func() bool {
		partial = partialDownloads(dataRoot)
		return p.stalls.Load() > 0 && len(partial) > 0
	}) {
		t.Errorf("no partial download in the private dockerd's data root while the layer stalled (%d stalled): the check of what the pull leaves looks in the wrong place", p.stalls.Load())
	} else {
		t.Logf("while stalled, dockerd holds %v", partial)
	}
	r0 := <-res
	took, err := r0.took, r0.err
	failedAt := time.Now()
	wantMsg := fmt.Sprintf("no progress for %s", pullDeadline)
	switch {
	case err == nil:
		t.Errorf("PullImage %s through a stalled connection succeeded after %s", ref, took)
	case status.Code(err) != codes.DeadlineExceeded || !strings.Contains(status.Convert(err).Message(), ref) || !strings.Contains(status.Convert(err).Message(), wantMsg):
		t.Errorf("PullImage %s through a stalled connection failed after %s with %v; want DeadlineExceeded naming the image and %q", ref, took.Round(time.Millisecond), err, wantMsg)
	case took < pullDeadline:
		t.Errorf("PullImage %s through a stalled connection failed after %s, before the %s progress deadline could pass: %v", ref, took.Round(time.Millisecond), pullDeadline, err)
	case took > pullDeadline+pullSlack:
		t.Errorf("PullImage %s through a stalled connection took %s to fail, over the %s progress deadline + %s: %v", ref, took.Round(time.Millisecond), pullDeadline, pullSlack, err)
	default:
		t.Logf("PullImage through a stalled connection failed after %s: %v", took.Round(time.Millisecond), err)
	}
	if p.stalls.Load() == 0 {
		t.Errorf("the proxy stalled no layer download: the pull never reached one\n%s", d.LogTail(20))
	}
	// Docker's pull was cancelled: its log says so, it keeps no image and
	// no partial download, and the next pull fetches the layer afresh.
	var stopped string
	if !harness.Eventually(10*time.Second, func() bool { stopped = pullStoppedLogged(d.LogPath()); return stopped != "" }) {
		t.Errorf("dockerd's log does not say the pull stopped, cancelled, 10 s after PullImage failed\n%s", d.LogTail(20))
	} else {
		t.Logf("dockerd: %s", stopped)
	}
	// Not a check: Docker's blob reader is left blocked in its read of
	// the stalled response (moby's NewCancelReadCloser closes the HTTP
	// body only once a read returns), so dockerd keeps that connection
	// open until the proxy closes it at cleanup. netshim cannot change
	// that; the pull itself is over.
	if harness.Eventually(5*time.Second, func() bool { return p.abandoned.Load() == p.stalls.Load() }) {
		if p.stalls.Load() > 0 {
			t.Logf("dockerd closed the stalled download's connection %s after PullImage failed", p.lastAbandoned().Sub(failedAt).Round(time.Millisecond))
		}
	} else {
		t.Logf("dockerd keeps %d stalled layer download connection(s) open after its pull was cancelled (Docker's reader blocks in the read); the proxy closes them at cleanup", p.stalls.Load()-p.abandoned.Load())
	}
	if out, err := d.Docker("images", "-aq"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("the private dockerd has images after the stalled pull (it had none before): %q (%v)", out, err)
	}
	if !harness.Eventually(10*time.Second, func() bool { partial = partialDownloads(dataRoot); return len(partial) == 0 }) {
		t.Errorf("partial downloads left in the private dockerd's data root 10 s after the stalled pull: %v", partial)
	}
	w.sc.runs.Add(1)

	// Slow but moving: longer than the deadline in all, and it succeeds.
	p.setMode(proxySlow)
	resp, took, err := pull(2 * time.Minute)
	switch {
	case err != nil:
		t.Errorf("PullImage %s through a slow connection that moves failed after %s: %v", ref, took.Round(time.Millisecond), err)
	case took <= pullDeadline:
		t.Errorf("PullImage %s through a slow connection took %s, not more than the %s deadline: the check proves nothing", ref, took.Round(time.Millisecond), pullDeadline)
	default:
		t.Logf("PullImage through a slow connection (%d pieces %s apart) succeeded after %s", slowChunks, slowGap, took.Round(time.Millisecond))
	}
	if p.slowed.Load() == 0 {
		t.Errorf("the proxy slowed no layer download: the pull after the stalled one did not fetch the layer again")
	}
	if err == nil {
		id, ierr := d.Docker("image", "inspect", "--format", "{{.Id}}", ref)
		if ierr != nil || strings.TrimSpace(id) != resp.GetImageRef() {
			t.Errorf("after the slow pull, the private dockerd has %s as %q (%v); PullImage said %s", ref, strings.TrimSpace(id), ierr, resp.GetImageRef())
		}
	}
	w.sc.runs.Add(1)
}

// freePort is a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pullStoppedLogged is the line of dockerd's log that reports a pull
// stopped because it was cancelled (Docker 20.10 and 29 word it alike),
// or "".
func pullStoppedLogged(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "Not continuing with pull after error") && strings.Contains(l, "context canceled") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// partialDownloads lists what an unfinished pull keeps in a data root:
// Docker's temporary layer files (GetImageBlob*, in its tmp dir) and
// containerd's content ingests (Docker 29's image store).
func partialDownloads(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if strings.HasPrefix(e.Name(), "GetImageBlob") || (e.IsDir() && filepath.Base(filepath.Dir(path)) == "ingest") {
			out = append(out, path)
		}
		return nil
	})
	return out
}

type proxyMode int32

const (
	proxyPass proxyMode = iota
	proxyStall
	proxySlow
)

// pullProxy is an HTTP proxy on a loopback port in front of a registry.
// Everything passes through as it is but layers (blobs of layerMin or
// more), which in proxyStall get their first stallAfter bytes and then
// nothing, on a connection kept open until the client closes it, and in
// proxySlow come in slowChunks pieces slowGap apart.
type pullProxy struct {
	addr     string
	upstream string
	client   *http.Client
	mode     atomic.Int32
	done     chan struct{}

	stalls, abandoned, slowed atomic.Int32
	mu                        sync.Mutex
	abandonedAt               time.Time
}

func startPullProxy(t *testing.T, upstream string) *pullProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pullProxy{
		addr:     l.Addr().String(),
		upstream: upstream,
		// No environment proxy, no transparent gunzip: the bytes as the
		// registry sent them.
		client: &http.Client{
			Transport:     &http.Transport{DisableCompression: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		done: make(chan struct{}),
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(l) }()
	t.Cleanup(func() {
		close(p.done)
		srv.Close()
		<-served
	})
	return p
}

func (p *pullProxy) setMode(m proxyMode) { p.mode.Store(int32(m)) }

func (p *pullProxy) lastAbandoned() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.abandonedAt
}

// hopHeaders are the headers of one connection, not to be forwarded.
var hopHeaders = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true}

func (p *pullProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+p.upstream+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out.ContentLength = r.ContentLength
	for k, vs := range r.Header {
		if !hopHeaders[k] {
			out.Header[k] = vs
		}
	}
	resp, err := p.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if !hopHeaders[k] {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	layer := r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") && resp.StatusCode == http.StatusOK && resp.ContentLength >= layerMin
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	switch mode := proxyMode(p.mode.Load()); {
	case layer && mode == proxyStall:
		if _, err := io.CopyN(w, resp.Body, stallAfter); err != nil {
			return
		}
		flush()
		p.stalls.Add(1)
		select {
		case <-r.Context().Done(): // the client closed the connection
			p.mu.Lock()
			p.abandonedAt = time.Now()
			p.mu.Unlock()
			p.abandoned.Add(1)
		case <-p.done:
		}
	case layer && mode == proxySlow:
		p.slowed.Add(1)
		chunk := (resp.ContentLength + slowChunks - 1) / slowChunks
		for first := true; ; first = false {
			if !first {
				select {
				case <-r.Context().Done():
					return
				case <-p.done:
					return
				case <-time.After(slowGap):
				}
			}
			_, err := io.CopyN(w, resp.Body, chunk)
			flush()
			if err != nil {
				return // io.EOF: all sent
			}
		}
	default:
		_, _ = io.Copy(w, resp.Body)
	}
}
