package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// rssBytes reads the resident set size of the process from /proc.
func rssBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			fields := strings.Fields(v)
			if len(fields) != 2 || fields[1] != "kB" {
				return 0, fmt.Errorf("unexpected VmRSS line %q", s.Text())
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			return kb * 1024, err
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// runLabel is the CRI label that marks the pods of one bench run, so that
// cleanup never touches anyone else's pods on the same engine.
const runLabel = "netshim.bench/run"

// instanceLabel names the netshim that made a pod ("default" or
// "pinned"): both netshims of a run list every netshim pod on the engine,
// and cleanup must tear each pod down through its own.
const instanceLabel = "netshim.bench/netshim"

// podConfig is a sandbox config shaped like kubelet's for an ordinary pod
// without host ports. Its UID is random, as kubelet's pods' are.
func (b *bench) podConfig(name string) *runtimeapi.PodSandboxConfig {
	uid := newUID()
	ns := b.namespace
	return harness.Pod(name,
		harness.InNamespace(ns),
		harness.WithUID(uid),
		harness.WithLogDirectory(filepath.Join(b.dir, "pods", ns+"_"+name+"_"+uid)),
		harness.WithPodDNS([]string{"10.96.0.10"}, []string{ns + ".svc.cluster.local", "svc.cluster.local", "cluster.local"}, []string{"ndots:5"}),
		harness.WithPodLabels(map[string]string{
			"io.kubernetes.pod.name":      name,
			"io.kubernetes.pod.namespace": ns,
			"io.kubernetes.pod.uid":       uid,
			"app":                         "bench",
			runLabel:                      b.runID,
			instanceLabel:                 "default",
		}),
		harness.WithPodAnnotations(map[string]string{
			"kubernetes.io/config.seen":   time.Now().UTC().Format(time.RFC3339Nano),
			"kubernetes.io/config.source": "api",
		}),
		harness.WithPodNamespaceModes(runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD),
	)
}

// newUID returns a random UUID-shaped string, as pod UIDs are.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
