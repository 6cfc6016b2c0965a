package cni

import (
	"context"
	"errors"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/metrics"
	"github.com/netshim/netshim/pkg/network"
)

// metricValue is the counter value, or histogram sample count, of the
// series of family with labels; 0 if there is none.
func metricValue(t *testing.T, m *metrics.Metrics, family string, labels map[string]string) float64 {
	t.Helper()
	v, _ := testutil.MetricValue(t, m.Registry(), family, labels)
	return v
}

func TestInstrumentCNINilMetricsIsTheCNI(t *testing.T) {
	c := libcni.NewCNIConfig(nil, nil)
	if got := instrumentCNI(c, nil); got != libcni.CNI(c) {
		t.Errorf("with nil metrics: got %T, want the CNI itself", got)
	}
}

func TestMetricsTimeVerbsByNetworkAndCountGC(t *testing.T) {
	m := metrics.New()
	env := newVerbsEnv(t, testConfList11, func(o *Options) { o.Metrics = m })
	waitWithin(t, reactBound, "STATUS to be answered", func() bool { return env.plugin.Status() == nil })
	setUp(t, env, podA, podB)

	env.exec.setErr("ADD bridge", errors.New("no IPs left"))
	if err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{}); err == nil {
		t.Fatal("SetUpPod succeeded although the bridge plugin fails")
	}
	env.exec.setErr("ADD bridge", nil)

	// B is gone: GC releases its two attachments (lo and eth0).
	// (testPod, whose setup failed, stays live: its half-done attachment
	// is not GC's.)
	env.host.setLive(nil, podA.SandboxID, testPod.SandboxID)
	if err := env.plugin.GC(context.Background()); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		family, verb, network string
		atLeast               float64
	}{
		{"netshim_cni_operation_duration_seconds", "STATUS", "testnet", 1},
		{"netshim_cni_operation_duration_seconds", "ADD", "testnet", 3},
		{"netshim_cni_operation_duration_seconds", "ADD", loNetworkName, 3},
		{"netshim_cni_operation_duration_seconds", "DEL", "testnet", 1},
		{"netshim_cni_operation_duration_seconds", "DEL", loNetworkName, 1},
		{"netshim_cni_operation_duration_seconds", "GC", "testnet", 1},
		{"netshim_cni_operation_errors_total", "ADD", "testnet", 1},
	} {
		if got := metricValue(t, m, tc.family, map[string]string{"verb": tc.verb, "network": tc.network}); got < tc.atLeast {
			t.Errorf("%s{verb=%s,network=%s} = %v, want >= %v", tc.family, tc.verb, tc.network, got, tc.atLeast)
		}
	}
	if got := metricValue(t, m, "netshim_cni_operation_errors_total", map[string]string{"verb": "ADD", "network": loNetworkName}); got != 0 {
		t.Errorf("loopback ADD errors = %v, want 0", got)
	}
	if got := metricValue(t, m, "netshim_gc_attachments_total", nil); got != 2 {
		t.Errorf("GC'd attachments = %v, want 2 (B's lo and eth0)", got)
	}
}
