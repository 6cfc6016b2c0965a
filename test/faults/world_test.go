//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
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
	pauseImage    = harness.DefaultPauseImage
	workloadImage = "netshim.local/busybox:latest"
	rpcTimeout    = 30 * time.Second
)

// suite is what the suite needs from its environment.
type suite struct {
	netshim   string // NETSHIM_BIN
	cniBinDir string // CNI_BIN_DIR
	audit     string // LEAK_AUDIT: test/e2e/leak-audit.sh
}

// requireSuite skips without NETSHIM_BIN (a plain `go test`), and fails on
// anything else missing once it is set.
func requireSuite(t *testing.T) suite {
	t.Helper()
	s := suite{netshim: os.Getenv("NETSHIM_BIN"), cniBinDir: os.Getenv("CNI_BIN_DIR"), audit: os.Getenv("LEAK_AUDIT")}
	if s.netshim == "" {
		t.Skip("NETSHIM_BIN is not set: run `make e2e-faults` as root")
	}
	if s.cniBinDir == "" {
		s.cniBinDir = "/usr/lib/cni"
	}
	if s.audit == "" {
		s.audit = "../e2e/leak-audit.sh"
	}
	if os.Geteuid() != 0 {
		t.Fatal("faults: must run as root")
	}
	for _, f := range []string{s.netshim, s.audit, filepath.Join(s.cniBinDir, "host-local"), filepath.Join(s.cniBinDir, "bridge")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("faults: %v", err)
		}
	}
	for _, img := range []string{pauseImage, workloadImage} {
		if out, err := harness.RunCmd("docker", "image", "inspect", "--format", "{{.Id}}", img); err != nil {
			t.Fatalf("faults: image %s is missing (hack/images.sh): %v\n%s", img, err, out)
		}
	}
	return s
}

// scope is what one scenario owns on the host: a bridge and subnet, a pod
// namespace, a temp dir (netshim's dirs, host-local's store), and tmpfs
// mounts. The runner audits it after the scenario and then removes it, so
// that the audit sees what the scenario's own teardown left.
type scope struct {
	slot    int
	bridge  string
	subnet  *net.IPNet
	ns      string
	dir     string
	ipamDir string
	mounts  []string
	runs    atomic.Int64
}

func newScope(t *testing.T, slot int) *scope {
	t.Helper()
	dir, err := os.MkdirTemp("", "nsflt")
	if err != nil {
		t.Fatal(err)
	}
	s := &scope{slot: slot, bridge: fmt.Sprintf("nsflt%d", slot), ns: fmt.Sprintf("nsflt-%d", slot), dir: dir, ipamDir: filepath.Join(dir, "ipam")}
	_, s.subnet, _ = net.ParseCIDR(fmt.Sprintf("10.125.%d.0/24", slot))
	// A bridge of that name is a leftover of a crashed run. The bridge is
	// made here, as a node's is before its pods, so that a plugin that
	// fails half-way through the first ADD does not leave a half-made one.
	_, _ = harness.RunCmd("ip", "link", "del", s.bridge)
	// An address of its own, too: a bridge that took its first port's
	// MAC has none once that port is gone, and the bridge plugin then fails
	// every ADD with "could not set bridge's mac".
	harness.MustRun(t, "ip", "link", "add", "name", s.bridge, "address", fmt.Sprintf("02:6e:73:66:6c:%02x", slot), "type", "bridge")
	s.removeContainers(t)
	return s
}

func (s *scope) netshimDir() string { return filepath.Join(s.dir, "ns") }

// auditArgs scope the leak audit to what the scenario made.
func (s *scope) auditArgs() []string {
	d := s.netshimDir()
	return []string{"--no-defaults", "--ipam-dir", s.ipamDir, "--root-dir", filepath.Join(d, "root"),
		"--root-dir", filepath.Join(s.dir, "full", "root"), "--cache-dir", filepath.Join(d, "cnicache"),
		"--netns-dir", filepath.Join(d, "netns"),
		"--bridge", s.bridge, "--cni-network", s.bridge, "--container-filter", "label=netshim.io/pod-namespace=" + s.ns}
}

func (s *scope) removeContainers(t *testing.T) {
	out, err := harness.RunCmd("docker", "ps", "-aq", "--no-trunc", "--filter", "label=netshim.io/pod-namespace="+s.ns)
	if err != nil {
		t.Logf("cleanup: docker ps: %v\n%s", err, out)
		return
	}
	if ids := strings.Fields(out); len(ids) > 0 {
		if out, err := harness.RunCmd("docker", append([]string{"rm", "-f"}, ids...)...); err != nil {
			t.Logf("cleanup: docker rm -f: %v\n%s", err, out)
		}
	}
}

// remove deletes what the scenario left, after the audit counted it.
func (s *scope) remove(t *testing.T) {
	s.removeContainers(t)
	for i := len(s.mounts) - 1; i >= 0; i-- {
		if out, err := harness.RunCmd("umount", "-l", s.mounts[i]); err != nil {
			t.Logf("cleanup: umount %s: %v\n%s", s.mounts[i], err, out)
		}
	}
	// Pins a failed scenario left, and netshim's netns dir mount.
	if err := harness.UnmountUnder(s.dir); err != nil {
		t.Logf("cleanup: %v", err)
	}
	if out, err := harness.RunCmd("ip", "link", "del", s.bridge); err != nil && !strings.Contains(out, "Cannot find device") {
		t.Logf("cleanup: ip link del %s: %v\n%s", s.bridge, err, out)
	}
	if err := os.RemoveAll(s.dir); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// world is a scenario's running netshim, its clients' ledger and its
// error counts.
type world struct {
	t      *testing.T
	suite  suite
	sc     *scope
	ns     *harness.Netshim
	ledger *ledger
	codes  codeCounts
}

func newWorld(t *testing.T, s suite, sc *scope) *world {
	return &world{t: t, suite: s, sc: sc, ledger: newLedger()}
}

// conflist is the scope's network: bridge + host-local in the scope's
// store + portmap, changed by opts.
func (w *world) conflist(opts ...harness.ConflistOption) harness.NetshimOption {
	base := []harness.ConflistOption{
		harness.WithBridge(w.sc.bridge),
		harness.WithSubnets(w.sc.subnet.String()),
		harness.WithIPAMDataDir(w.sc.ipamDir),
	}
	return harness.WithCNIConfig(append(base, opts...)...)
}

// hostLocalIPAM is host-local's section for a wrapper IPAM plugin named
// typ that ends by running host-local with the same config.
func (w *world) hostLocalIPAM(typ string) map[string]any {
	return map[string]any{
		"type":    typ,
		"ranges":  [][]map[string]any{{{"subnet": w.sc.subnet.String()}}},
		"dataDir": w.sc.ipamDir,
	}
}

// start starts netshim on the scope's dirs. Its cleanup removes the
// scope's pods through netshim; before that, the ledger is checked.
func (w *world) start(opts ...harness.NetshimOption) *harness.Netshim {
	w.t.Helper()
	base := []harness.NetshimOption{
		harness.WithBinary(w.suite.netshim),
		harness.WithDir(w.sc.netshimDir()),
		harness.WithCNIBinDir(w.suite.cniBinDir),
		harness.WithCleanupNamespace(w.sc.ns),
		harness.WithVerbosity(2),
	}
	w.ns = harness.StartNetshim(w.t, append(base, opts...)...)
	w.t.Cleanup(w.checkLedger)
	return w.ns
}

// client is a CRI client of the scope's netshim that survives its
// restarts, as kubelet's does.
func (w *world) client() *harness.CRI {
	return harness.ConnectCRI(w.t, w.ns.Sock)
}

// podConfig is the sandbox config of a pod of the scope: in its
// namespace, logging under its dir, mapping hostPort (unless 0) to port
// 80, changed by opts.
func (w *world) podConfig(name string, hostPort int32, opts ...harness.PodOption) *runtimeapi.PodSandboxConfig {
	base := []harness.PodOption{
		harness.InNamespace(w.sc.ns),
		harness.WithLogDirectory(filepath.Join(w.sc.dir, "logs", name)),
		harness.WithPodLabels(map[string]string{"nsflt": w.sc.ns}),
	}
	if hostPort != 0 {
		base = append(base, harness.WithHostPort(80, hostPort, runtimeapi.Protocol_TCP))
	}
	return harness.Pod(name, append(base, opts...)...)
}

// hostPort is the k-th host port of the scope.
func (w *world) hostPort(k int) int32 { return int32(20000 + w.sc.slot*100 + k) }

func rpcCtx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, rpcTimeout)
}

// codeCounts counts the gRPC codes of failed calls, for the report.
type codeCounts struct {
	mu sync.Mutex
	m  map[codes.Code]int
}

func (c *codeCounts) add(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[codes.Code]int{}
	}
	c.m[status.Code(err)]++
}

func (c *codeCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for code, n := range c.m {
		parts = append(parts, fmt.Sprintf("%s=%d", code, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// retry calls f until it succeeds or ctx ends, as kubelet's sync loop
// does: a call that failed (netshim down: Unavailable; or anything else)
// is made again after a short, jittered pause.
func (w *world) retry(ctx context.Context, what string, f func(ctx context.Context) error) error {
	for {
		cctx, cancel := rpcCtx(ctx)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		w.codes.add(err)
		if ctx.Err() != nil {
			return fmt.Errorf("%s: gave up: %w", what, err)
		}
		pause := time.NewTimer(time.Duration(100+rand.IntN(200)) * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-pause.C:
		}
		pause.Stop()
	}
}

// cycle runs, stops and removes one pod the way kubelet does, retrying
// each step; AlreadyExists (a sandbox of that name left by a RunPodSandbox
// whose answer was lost) is resolved by stopping and removing it first.
func (w *world) cycle(ctx context.Context, c *harness.CRI, cfg *runtimeapi.PodSandboxConfig) error {
	var id string
	err := w.retry(ctx, "RunPodSandbox "+cfg.Metadata.Name, func(ctx context.Context) error {
		resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err == nil {
			id = resp.PodSandboxId
			return nil
		}
		if status.Code(err) == codes.AlreadyExists {
			if rerr := w.removeByName(ctx, c, cfg.Metadata.Name); rerr != nil {
				return errors.Join(err, rerr)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	w.ledger.told(id, cfg.Metadata.Name)
	if err := w.stopRemove(ctx, c, id); err != nil {
		return err
	}
	w.sc.runs.Add(1)
	return nil
}

// stopRemove stops and removes a sandbox, retrying, and books the removal.
func (w *world) stopRemove(ctx context.Context, c *harness.CRI, id string) error {
	if err := w.retry(ctx, "StopPodSandbox "+id, func(ctx context.Context) error {
		_, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return w.ledger.checkNotFound(id, "StopPodSandbox", err)
	}); err != nil {
		return err
	}
	if err := w.retry(ctx, "RemovePodSandbox "+id, func(ctx context.Context) error {
		_, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return w.ledger.checkNotFound(id, "RemovePodSandbox", err)
	}); err != nil {
		return err
	}
	w.ledger.removed(id)
	return nil
}

// removeByName stops and removes the scope's sandboxes named name.
func (w *world) removeByName(ctx context.Context, c *harness.CRI, name string) error {
	ids, err := w.sandboxes(ctx, c, name)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			return fmt.Errorf("stopping the old sandbox %s: %w", id, err)
		}
		if _, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			return fmt.Errorf("removing the old sandbox %s: %w", id, err)
		}
		w.ledger.removed(id)
	}
	return nil
}

// sandboxes lists the IDs of the scope's sandboxes (named name, unless
// empty).
func (w *world) sandboxes(ctx context.Context, c *harness.CRI, name string) ([]string, error) {
	resp, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox: %w", err)
	}
	var ids []string
	for _, p := range resp.Items {
		if p.GetMetadata().GetNamespace() == w.sc.ns && (name == "" || p.GetMetadata().GetName() == name) {
			ids = append(ids, p.Id)
		}
	}
	return ids, nil
}

// mustSandboxes is sandboxes for the test goroutine, through netshim's own
// client.
func (w *world) mustSandboxes() []*runtimeapi.PodSandbox {
	w.t.Helper()
	ctx, cancel := rpcCtx(context.Background())
	defer cancel()
	resp, err := w.ns.CRI().Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		w.t.Fatalf("ListPodSandbox: %v", err)
	}
	var out []*runtimeapi.PodSandbox
	for _, p := range resp.Items {
		if p.GetMetadata().GetNamespace() == w.sc.ns {
			out = append(out, p)
		}
	}
	return out
}

// removeAll stops and removes every sandbox of the scope through netshim,
// retrying for a while, and fails the test on what cannot be removed.
func (w *world) removeAll() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := w.ns.CRI()
	for _, p := range w.mustSandboxes() {
		if err := w.stopRemove(ctx, c, p.Id); err != nil {
			w.t.Errorf("removing sandbox %s (%s): %v", p.Id, p.GetMetadata().GetName(), err)
		}
	}
}

// ipamHeld lists the IPs host-local's store of the scope holds.
func (w *world) ipamHeld() map[string]string {
	held := map[string]string{}
	stores, _ := os.ReadDir(w.sc.ipamDir)
	for _, st := range stores {
		ents, _ := os.ReadDir(filepath.Join(w.sc.ipamDir, st.Name()))
		for _, e := range ents {
			if net.ParseIP(e.Name()) == nil {
				continue
			}
			data, _ := os.ReadFile(filepath.Join(w.sc.ipamDir, st.Name(), e.Name()))
			first, _, _ := strings.Cut(string(data), "\n")
			held[e.Name()] = strings.TrimSpace(first)
		}
	}
	return held
}

// checkLedger fails the test if a sandbox a client was told exists (and
// did not remove) is gone, or if netshim said NotFound for one.
func (w *world) checkLedger() {
	if !w.ns.Running() {
		w.t.Errorf("ledger: netshim is not running at the end of the scenario, cannot check the sandboxes")
		return
	}
	ctx, cancel := rpcCtx(context.Background())
	defer cancel()
	listed, err := w.sandboxes(ctx, w.ns.CRI(), "")
	if err != nil {
		w.t.Errorf("ledger: %v", err)
		return
	}
	for _, p := range w.ledger.problems(listed) {
		w.t.Errorf("ledger: %s", p)
	}
}

// ledger books what clients were told: a sandbox exists from the
// RunPodSandbox answer that named it until the client removed it.
type ledger struct {
	mu    sync.Mutex
	live  map[string]string // id -> pod name
	lost  []string
	total int
}

func newLedger() *ledger { return &ledger{live: map[string]string{}} }

func (l *ledger) told(id, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live[id] = name
	l.total++
}

func (l *ledger) removed(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.live, id)
}

// checkNotFound books a NotFound for a sandbox the client was told exists
// and has not removed: netshim lost it. The error is passed on.
func (l *ledger) checkNotFound(id, call string, err error) error {
	if status.Code(err) != codes.NotFound {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if name, ok := l.live[id]; ok {
		l.lost = append(l.lost, fmt.Sprintf("%s %s (%s): NotFound for a sandbox the client was told exists: %v", call, id, name, err))
		delete(l.live, id)
		return nil // nothing to retry: it is gone
	}
	return err
}

// problems compares the ledger with the sandboxes netshim lists.
func (l *ledger) problems(listed []string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]string(nil), l.lost...)
	have := map[string]bool{}
	for _, id := range listed {
		have[id] = true
	}
	for id, name := range l.live {
		if !have[id] {
			out = append(out, fmt.Sprintf("sandbox %s (%s) was reported created and never removed by its client, but netshim no longer lists it", id, name))
		}
	}
	return out
}

// writeScript writes an executable shell script.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// touch creates or removes a flag file.
func flag(t *testing.T, path string, on bool) {
	t.Helper()
	var err error
	if on {
		err = os.WriteFile(path, nil, 0o644)
	} else if err = os.Remove(path); errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if err != nil {
		t.Fatal(err)
	}
}

// dockerPS lists containers matching the docker ps filters.
func dockerPS(t *testing.T, filters ...string) []string {
	t.Helper()
	args := []string{"ps", "-aq", "--no-trunc"}
	for _, f := range filters {
		args = append(args, "--filter", f)
	}
	return strings.Fields(harness.MustRun(t, "docker", args...))
}
