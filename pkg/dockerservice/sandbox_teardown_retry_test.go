package dockerservice

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/testutil"
	"github.com/netshim/netshim/pkg/metrics"
	"github.com/netshim/netshim/pkg/network"
)

func (p *fakePlugin) callCount(call string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		if c == call {
			n++
		}
	}
	return n
}

func (p *fakePlugin) holds(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.ips[id]
	return ok
}

// A daemon that starts with checkpoints of sandboxes whose infra container
// died or was removed while it was down tears their networks down by
// itself, retrying with backoff while the plugin fails, and leaves running
// sandboxes alone.
func TestStartupRetriesTearDownOfDeadSandboxes(t *testing.T) {
	minDelay, maxDelay := tearDownRetryMinDelay, tearDownRetryMaxDelay
	tearDownRetryMinDelay, tearDownRetryMaxDelay = 5*time.Millisecond, 20*time.Millisecond
	t.Cleanup(func() { tearDownRetryMinDelay, tearDownRetryMaxDelay = minDelay, maxDelay })

	e := newTestEnv(t)
	dead := e.run(t, podConfig("dead"))
	removed := e.run(t, podConfig("removed"))
	live := e.run(t, podConfig("live"))
	hostNet := podConfig("hostnet")
	hostNet.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}
	host := e.run(t, hostNet)
	e.docker.KillBehindBack(dead)
	e.docker.RemoveBehindBack(removed)
	e.docker.KillBehindBack(host)

	// The daemon restarts; the plugin fails at first.
	plugin := &fakePlugin{downErr: errors.New("plugin unreachable")}
	m := metrics.New()
	ds, err := NewDockerService(Config{PodInfraImage: testPauseImage, NetworkPluginName: "fake", Metrics: m}, e.docker, e.ckpt, []network.NetworkPlugin{plugin})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{dead, removed, live} {
		plugin.ips[id] = net.IPv4(10, 0, 0, byte(i+1))
	}
	startService(t, ds)

	testutil.Eventually(t, "retried teardowns of both dead sandboxes", func() bool {
		return plugin.callCount("TearDownPod "+dead) >= 3 && plugin.callCount("TearDownPod "+removed) >= 3
	})
	if plugin.held() != 3 {
		t.Fatalf("%d IPs held while the plugin fails, want 3", plugin.held())
	}
	if n := gaugeValue(t, m, "netshim_teardown_retries_pending", nil); n != 2 {
		t.Errorf("teardown retries pending = %v while both fail, want 2", n)
	}
	plugin.mu.Lock()
	plugin.downErr = nil
	plugin.mu.Unlock()
	testutil.Eventually(t, "the dead sandboxes' IPs to be released", func() bool { return !plugin.holds(dead) && !plugin.holds(removed) })
	testutil.Eventually(t, "no teardown retry pending", func() bool { return gaugeValue(t, m, "netshim_teardown_retries_pending", nil) == 0 })

	if !plugin.holds(live) || plugin.callCount("TearDownPod "+live) != 0 {
		t.Errorf("the running sandbox was torn down (holds its IP: %v; calls: %v)", plugin.holds(live), plugin.calls)
	}
	if n := plugin.callCount("TearDownPod " + host); n != 0 {
		t.Errorf("a host-network sandbox was torn down %d times", n)
	}
	for _, id := range []string{dead, removed} {
		st, err := ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		if err != nil {
			t.Fatalf("status of %s: %v", id, err)
		}
		if st.Status.Network == nil || st.Status.Network.Ip != "" || st.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Errorf("status of a torn-down sandbox: state %v network %v", st.Status.State, st.Status.Network)
		}
		// Stop and Remove now have no DEL left to do.
		before := plugin.callCount("TearDownPod " + id)
		if _, err := ds.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := ds.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Fatal(err)
		}
		if after := plugin.callCount("TearDownPod " + id); after != before {
			t.Errorf("Stop/Remove after the start-up teardown ran DEL again (%d → %d)", before, after)
		}
	}
	st, err := ds.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: live})
	if err != nil || st.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY || st.Status.GetNetwork().GetIp() != "10.0.0.3" {
		t.Errorf("the running sandbox after restart: %v %v", st, err)
	}
}

func TestOrderPodIPs(t *testing.T) {
	ips := func(ss ...string) []net.IP {
		var out []net.IP
		for _, s := range ss {
			out = append(out, net.ParseIP(s))
		}
		return out
	}
	for _, c := range []struct {
		in   []net.IP
		want []string
	}{
		{ips("fd00::2", "10.0.0.2"), []string{"10.0.0.2", "fd00::2"}},
		{ips("10.0.0.2", "fd00::2", "10.0.0.3"), []string{"10.0.0.2", "10.0.0.3", "fd00::2"}},
		{ips("fd00::2", "fd00::3"), []string{"fd00::2", "fd00::3"}},
		{append(ips("10.0.0.2", "10.0.0.2"), nil), []string{"10.0.0.2"}},
		{nil, nil},
	} {
		got := orderPodIPs(c.in)
		if len(got) != len(c.want) {
			t.Errorf("orderPodIPs(%v) = %v, want %v", c.in, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("orderPodIPs(%v) = %v, want %v", c.in, got, c.want)
				break
			}
		}
	}
}
