package cni

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/netshim/netshim/pkg/network"
)

// testConfList11 is testConfList at CNI 1.1.0, where STATUS and GC exist.
var testConfList11 = strings.Replace(testConfList, `"cniVersion": "1.0.0"`, `"cniVersion": "1.1.0"`, 1)

var (
	podA = network.PodRef{Namespace: "ns", Name: "a", UID: "uid-a", SandboxID: "sandboxAAAAAAAA"}
	podB = network.PodRef{Namespace: "ns", Name: "b", UID: "uid-b", SandboxID: "sandboxBBBBBBBB"}
)

// newVerbsEnv is newTestEnv with options for the verbs: no GC loop (tests
// call GC), a fast STATUS refresh, a host firewall that drops nothing.
func newVerbsEnv(t *testing.T, conf string, tweak func(*Options)) *testEnv {
	t.Helper()
	env := &testEnv{exec: newFakeExec(), host: newFakeHost(), confDir: t.TempDir()}
	if conf != "" {
		writeFile(t, env.confDir, "10-test.conflist", conf)
	}
	env.exec.results["bridge"] = strings.Replace(bridgeResult, `"cniVersion": "1.0.0"`, `"cniVersion": "1.1.0"`, 1)
	for _, pod := range []network.PodRef{testPod, podA, podB} {
		env.host.setNetNS(pod.SandboxID, "/proc/42/ns/net")
	}
	opts := Options{
		ConfDir: env.confDir, BinDirs: []string{"/fake/bin"}, CacheDir: t.TempDir(), StateDir: t.TempDir(), Exec: env.exec,
		SyncPeriod: time.Hour, Debounce: 10 * time.Millisecond, StatusPeriod: time.Hour, GCPeriod: -1,
		probeFirewall: noFirewall, forgetNeighbors: env.forgetNeighbors,
	}
	if tweak != nil {
		tweak(&opts)
	}
	env.plugin = NewPlugin(opts)
	if err := env.plugin.Init(env.host, network.PluginConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.plugin.Stop)
	return env
}

func TestStatusVerb(t *testing.T) {
	env := newVerbsEnv(t, testConfList11, nil)
	waitWithin(t, reactBound, "STATUS to be answered", func() bool { return env.plugin.Status() == nil })
	calls := env.exec.callsOf("STATUS")
	if got := callNames(calls); got != "STATUS bridge, STATUS portmap, STATUS bandwidth" {
		t.Fatalf("STATUS calls = %s", got)
	}
	if calls[0].Conf["name"] != "testnet" || calls[0].Conf["cniVersion"] != "1.1.0" {
		t.Errorf("STATUS stdin = %v", calls[0].Conf)
	}
	// kubelet's polls are answered from the cached answer.
	for range 100 {
		if err := env.plugin.Status(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(env.exec.callsOf("STATUS")); n != 3 {
		t.Errorf("Status polls forked plugins: %d STATUS calls", n)
	}

	// A plugin answering STATUS with an error: not ready, with its message,
	// once the config changes (or the periodic refresh runs).
	env.exec.setErr("STATUS portmap", errors.New("datastore unreachable"))
	writeFile(t, env.confDir, "10-test.conflist", strings.Replace(testConfList11, "testnet", "testnet2", 1))
	waitWithin(t, reactBound, "STATUS error in Status", func() bool {
		return statusContains(env.plugin, `CNI network "testnet2"`, "is not ready", "datastore unreachable")
	})

	// A 1.0.0 config is never asked.
	env.exec.Reset()
	writeFile(t, env.confDir, "10-test.conflist", testConfList)
	waitWithin(t, reactBound, "the 1.0.0 config", func() bool { return networkName(env.plugin) == "testnet" })
	if err := env.plugin.Status(); err != nil {
		t.Fatalf("Status with a 1.0.0 config = %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(env.exec.callsOf("STATUS")); n != 0 {
		t.Errorf("%d STATUS calls for a 1.0.0 config", n)
	}
}

func TestStatusVerbRefreshedPeriodically(t *testing.T) {
	env := newVerbsEnv(t, testConfList11, func(o *Options) { o.StatusPeriod = 30 * time.Millisecond })
	waitWithin(t, reactBound, "STATUS to be answered", func() bool { return env.plugin.Status() == nil })
	env.exec.setErr("STATUS bridge", errors.New("bridge not ready"))
	waitWithin(t, reactBound, "the periodic STATUS to see the error", func() bool { return statusContains(env.plugin, "bridge not ready") })
	env.exec.setErr("STATUS bridge", nil)
	waitWithin(t, reactBound, "the periodic STATUS to see the recovery", func() bool { return env.plugin.Status() == nil })
}

// setUp runs SetUpPod and fails the test on error.
func setUp(t *testing.T, env *testEnv, pods ...network.PodRef) {
	t.Helper()
	for _, pod := range pods {
		if err := env.plugin.SetUpPod(context.Background(), pod, nil, network.SetUpOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// setUpWithin runs SetUpPod with a deadline of d, and fails the test on
// error: a setup parked by GC fails the test instead of hanging it.
func setUpWithin(t *testing.T, env *testEnv, pod network.PodRef, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := env.plugin.SetUpPod(ctx, pod, nil, network.SetUpOptions{}); err != nil {
		t.Fatalf("SetUpPod of %s: %v", pod.Name, err)
	}
}

func TestGC(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conf     string
		pluginGC bool
	}{
		{"cniVersion 1.1.0", testConfList11, true},
		{"cniVersion 1.0.0", testConfList, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newVerbsEnv(t, tc.conf, nil)
			setUp(t, env, podA, podB)
			env.exec.Reset()

			// Before the runtime knows its sandboxes, GC does nothing.
			if err := env.plugin.GC(context.Background()); !errors.Is(err, errHostNotReady) {
				t.Fatalf("GC before sync = %v", err)
			}
			if c := env.exec.Calls(); len(c) != 0 {
				t.Fatalf("GC before sync ran %s", callNames(c))
			}

			// B is gone: its attachments get a DEL with the cached config
			// and no netns; A is left alone.
			env.host.setLive(nil, podA.SandboxID, testPod.SandboxID)
			if err := env.plugin.GC(context.Background()); err != nil {
				t.Fatal(err)
			}
			dels := env.exec.callsOf("DEL")
			// In the cache's order: cni-loopback-<id>-lo, then testnet-<id>-eth0.
			if got := callNames(dels); got != "DEL loopback, DEL bandwidth, DEL portmap, DEL bridge" {
				t.Errorf("DEL calls = %s", got)
			}
			for _, c := range dels {
				if c.ContainerID != podB.SandboxID || c.NetNS != "" {
					t.Errorf("%s for %s netns %q, want %s without netns", c, c.ContainerID, c.NetNS, podB.SandboxID)
				}
			}
			gcs := env.exec.callsOf("GC")
			if !tc.pluginGC {
				if len(gcs) != 0 {
					t.Fatalf("GC calls for a 1.0.0 network: %s", callNames(gcs))
				}
				return
			}
			if got := callNames(gcs); got != "GC bridge, GC portmap, GC bandwidth" {
				t.Fatalf("GC calls = %s", got)
			}
			// The live sandboxes' pod interfaces and everything still cached.
			checkJSON(t, "valid attachments", gcs[0].Conf["cni.dev/valid-attachments"],
				`[{"containerID":"`+testPod.SandboxID+`","ifname":"eth0"},{"containerID":"`+podA.SandboxID+`","ifname":"eth0"},{"containerID":"`+podA.SandboxID+`","ifname":"lo"}]`)

			// A second pass has nothing left to DEL.
			env.exec.Reset()
			if err := env.plugin.GC(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := len(env.exec.callsOf("DEL")); n != 0 {
				t.Errorf("second GC ran %d DELs", n)
			}
		})
	}
}

func TestGCUsesCachedConfigAndKeepsFailedDeletes(t *testing.T) {
	env := newVerbsEnv(t, testConfList11, nil)
	setUp(t, env, podA, podB)
	// The conf dir now names another network: B's DEL must still go to
	// the network B was added to.
	writeFile(t, env.confDir, "10-test.conflist", strings.Replace(testConfList11, "testnet", "othernet", 1))
	waitWithin(t, reactBound, "the new config", func() bool { return networkName(env.plugin) == "othernet" })
	env.exec.Reset()
	env.exec.setErr("DEL bridge", errors.New("bridge DEL failed"))
	env.host.setLive(nil, podA.SandboxID)

	err := env.plugin.GC(context.Background())
	if err == nil || !strings.Contains(err.Error(), "bridge DEL failed") {
		t.Fatalf("GC = %v", err)
	}
	for _, c := range env.exec.callsOf("DEL") {
		if c.Plugin != "loopback" && c.Conf["name"] != "testnet" {
			t.Errorf("%s ran with network %v, want the cached testnet", c, c.Conf["name"])
		}
	}
	// B's DEL failed: it is passed to the plugins' GC as valid, so that
	// they keep what it holds for the next attempt with its own config.
	gcs := env.exec.callsOf("GC")
	if len(gcs) == 0 || gcs[0].Conf["name"] != "othernet" {
		t.Fatalf("GC calls = %v", gcs)
	}
	checkJSON(t, "valid attachments", gcs[0].Conf["cni.dev/valid-attachments"],
		`[{"containerID":"`+podA.SandboxID+`","ifname":"eth0"},{"containerID":"`+podA.SandboxID+`","ifname":"lo"},{"containerID":"`+podB.SandboxID+`","ifname":"eth0"}]`)
}

// addForeign makes an attachment the way another runtime sharing libcni's
// cache directory would: libcni's own ADD, not netshim's.
func addForeign(t *testing.T, env *testEnv, conf, containerID string) {
	t.Helper()
	list, err := libcni.ConfListFromBytes([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	other := libcni.NewCNIConfigWithCacheDir([]string{"/fake/bin"}, env.plugin.opts.CacheDir, env.exec)
	rt := &libcni.RuntimeConf{ContainerID: containerID, NetNS: "/proc/77/ns/net", IfName: "eth0",
		Args: [][2]string{{"K8S_POD_INFRA_CONTAINER_ID", containerID}}}
	if _, err := other.AddNetworkList(context.Background(), list, rt); err != nil {
		t.Fatal(err)
	}
}

// TestGCLeavesOtherRuntimesAlone: libcni's cache holds attachments of
// another runtime, on another network and on netshim's own network name.
// GC must DEL only netshim's stale attachment and pass the others to the
// plugins' GC as valid.
func TestGCLeavesOtherRuntimesAlone(t *testing.T) {
	const foreignOtherNet, foreignSameNet = "podmanAAAAAAAAAA", "containerdBBBBBB"
	env := newVerbsEnv(t, testConfList11, nil)
	setUp(t, env, podA, podB)
	addForeign(t, env, `{"cniVersion":"1.0.0","name":"podman","plugins":[{"type":"bridge"}]}`, foreignOtherNet)
	addForeign(t, env, testConfList11, foreignSameNet)
	env.exec.Reset()
	env.host.setLive(nil, podA.SandboxID)

	if err := env.plugin.GC(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range env.exec.callsOf("DEL") {
		if c.ContainerID != podB.SandboxID {
			t.Errorf("GC ran %s for %s, which netshim never made", c, c.ContainerID)
		}
	}
	if got := callNames(env.exec.callsOf("DEL")); got != "DEL loopback, DEL bandwidth, DEL portmap, DEL bridge" {
		t.Errorf("DEL calls = %s, want netshim's stale pod B deleted", got)
	}
	gcs := env.exec.callsOf("GC")
	if len(gcs) != 3 {
		t.Fatalf("GC calls = %s", callNames(gcs))
	}
	checkJSON(t, "valid attachments", gcs[0].Conf["cni.dev/valid-attachments"],
		`[{"containerID":"`+foreignSameNet+`","ifname":"eth0"},{"containerID":"`+foreignOtherNet+`","ifname":"eth0"},`+
			`{"containerID":"`+podA.SandboxID+`","ifname":"eth0"},{"containerID":"`+podA.SandboxID+`","ifname":"lo"}]`)
	left, err := env.plugin.cni.GetCachedAttachments("")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range left {
		ids = append(ids, a.ContainerID+"/"+a.Network+"/"+a.IfName)
	}
	if got, want := strings.Join(ids, " "), "sandboxAAAAAAAA/cni-loopback/lo podmanAAAAAAAAAA/podman/eth0 containerdBBBBBB/testnet/eth0 sandboxAAAAAAAA/testnet/eth0"; got != want {
		t.Errorf("cache after GC = %s, want %s", got, want)
	}
}

// TestGCReleasesHalfDoneSetup: an ADD that failed halfway leaves no cache
// entry, only netshim's record; GC DELs it with the recorded config once
// the sandbox is gone, and forgets it.
func TestGCReleasesHalfDoneSetup(t *testing.T) {
	env := newVerbsEnv(t, testConfList11, nil)
	env.exec.setErr("ADD portmap", errors.New("iptables says no"))
	if err := env.plugin.SetUpPod(context.Background(), podB, nil, network.SetUpOptions{}); err == nil {
		t.Fatal("setup succeeded")
	}
	env.exec.setErr("ADD portmap", nil)
	env.exec.Reset()
	env.host.setLive(nil)
	if err := env.plugin.GC(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Loopback's ADD completed (it is cached); the pod network's did not.
	dels := env.exec.callsOf("DEL")
	if got := callNames(dels); got != "DEL loopback, DEL bandwidth, DEL portmap, DEL bridge" {
		t.Fatalf("DEL calls = %s", got)
	}
	bridge := dels[3]
	if bridge.ContainerID != podB.SandboxID || bridge.NetNS != "" || bridge.Conf["name"] != "testnet" || !strings.Contains(bridge.Args, "K8S_POD_NAME=b") {
		t.Errorf("bridge DEL %+v", bridge)
	}
	if owned, err := env.plugin.ledger.all(); err != nil || len(owned) != 0 {
		t.Errorf("ledger after GC = %v, %v; want empty", owned, err)
	}
	env.exec.Reset()
	if err := env.plugin.GC(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(env.exec.callsOf("DEL")); n != 0 {
		t.Errorf("second GC ran %d DELs", n)
	}
}

func TestGCWithoutStateDirIsOff(t *testing.T) {
	env := newVerbsEnv(t, testConfList11, func(o *Options) { o.StateDir = "" })
	setUp(t, env, podA)
	env.exec.Reset()
	env.host.setLive(nil)
	if err := env.plugin.GC(context.Background()); !errors.Is(err, errNoLedger) {
		t.Fatalf("GC = %v", err)
	}
	if c := env.exec.Calls(); len(c) != 0 {
		t.Errorf("GC without a ledger ran %s", callNames(c))
	}
}

func TestPlanGC(t *testing.T) {
	att := func(id, net, ifName string) *libcni.NetworkAttachment {
		return &libcni.NetworkAttachment{ContainerID: id, Network: net, IfName: ifName}
	}
	ent := func(net, ifName string) ledgerEntry { return ledgerEntry{Network: net, IfName: ifName} }
	owned := map[string][]ledgerEntry{
		"ours-gone":   {ent("testnet", "eth0"), ent(loNetworkName, "lo")},
		"ours-live":   {ent("testnet", "eth0")},
		"ours-halfup": {ent("testnet", "eth0")},
		"ours-renet":  {ent("oldnet", "eth0")},
	}
	cached := []*libcni.NetworkAttachment{
		att("ours-gone", "testnet", "eth0"),
		att("ours-gone", loNetworkName, "lo"),
		att("ours-live", "testnet", "eth0"),
		att("theirs", "testnet", "eth0"),     // same network, not recorded
		att("theirs2", "podman", "eth0"),     // another network
		att("ours-renet", "testnet", "eth0"), // netshim's ID, but this network was never recorded for it
		att("ours-gone", "testnet", "net1"),  // netshim's ID and network, another interface
	}
	plan := planGC(cached, owned, map[string]bool{"ours-live": true})
	var got []string
	for _, a := range plan.staleCached {
		got = append(got, "cached "+a.ContainerID+"/"+a.Network+"/"+a.IfName)
	}
	for _, r := range plan.staleRecorded {
		got = append(got, "recorded "+r.id+"/"+r.entry.Network+"/"+r.entry.IfName)
	}
	want := []string{"cached ours-gone/testnet/eth0", "cached ours-gone/cni-loopback/lo", "recorded ours-halfup/testnet/eth0", "recorded ours-renet/oldnet/eth0"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("plan = %q, want %q", got, want)
	}
	if plan.foreign != 4 {
		t.Errorf("foreign = %d, want 4", plan.foreign)
	}
}

func TestGCWaitsForADDsInFlight(t *testing.T) {
	env := newVerbsEnv(t, testConfList11, nil)
	env.host.setLive(nil, podA.SandboxID)
	entered, release := make(chan struct{}), make(chan struct{})
	env.exec.setHook(func(_ context.Context, c execCall) error {
		if c.Command == "ADD" && c.Plugin == "bridge" {
			close(entered)
			<-release
		}
		return nil
	})
	setUpDone := make(chan error, 1)
	go func() { setUpDone <- env.plugin.SetUpPod(context.Background(), podA, nil, network.SetUpOptions{}) }()
	<-entered
	listsBefore := env.host.lists()
	gcDone := make(chan error, 1)
	go func() { gcDone <- env.plugin.GC(context.Background()) }()
	time.Sleep(100 * time.Millisecond)
	if env.host.lists() != listsBefore {
		t.Fatal("GC listed the sandboxes while an ADD was in flight")
	}
	close(release)
	if err := <-setUpDone; err != nil {
		t.Fatal(err)
	}
	if err := <-gcDone; err != nil {
		t.Fatal(err)
	}
	if n := len(env.exec.callsOf("DEL")); n != 0 {
		t.Errorf("GC deleted the pod whose ADD it waited for: %d DELs", n)
	}
}

// hangGC makes the bridge's CNI GC block until its context ends, like a
// plugin waiting for a lock, the first time only when once is set; each
// call of it is announced on started first, when there is room.
func hangGC(started chan<- struct{}, once bool) func(ctx context.Context, c execCall) error {
	var calls atomic.Int32
	return func(ctx context.Context, c execCall) error {
		if c.Command != "GC" || c.Plugin != "bridge" {
			return nil
		}
		n := calls.Add(1)
		select {
		case started <- struct{}{}:
		default:
		}
		if once && n > 1 {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}
}

// TestSetUpPodPreemptsGC: a pod's setup that arrives while the plugins'
// GC hangs does not wait for it: the GC is cancelled, and the ADD runs at
// once with the caller's deadline, not what is left of it.
func TestSetUpPodPreemptsGC(t *testing.T) {
	// Neither deadline ends the GC within the test: only the preemption can.
	env := newVerbsEnv(t, testConfList11, func(o *Options) { o.Timeout = time.Hour; o.gcTimeout = time.Hour })
	env.host.setLive(nil, podA.SandboxID)
	gcStarted := make(chan struct{}, 1)
	hang := hangGC(gcStarted, false)
	type addCall struct {
		err  error
		left time.Duration
	}
	adds := make(chan addCall, 1)
	env.exec.setHook(func(ctx context.Context, c execCall) error {
		if c.Command == "ADD" && c.Plugin == "bridge" {
			dl, _ := ctx.Deadline()
			adds <- addCall{ctx.Err(), time.Until(dl)}
		}
		return hang(ctx, c)
	})
	gcCtx, stopGC := context.WithCancel(context.Background())
	defer stopGC()
	gcDone := make(chan error, 1)
	go func() { gcDone <- env.plugin.GC(gcCtx) }()
	within(t, gateBound, "the plugins' GC starting", gcStarted)

	// kubelet's deadline for RunPodSandbox.
	const rpcDeadline = 2 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
	defer cancel()
	start := time.Now()
	setUpDone := make(chan error, 1)
	go func() { setUpDone <- env.plugin.SetUpPod(ctx, podA, nil, network.SetUpOptions{}) }()
	select {
	case err := <-setUpDone:
		if err != nil {
			t.Fatalf("SetUpPod during GC = %v", err)
		}
	case <-time.After(gateBound):
		stopGC() // lets the parked SetUpPod go before the test ends
		t.Fatalf("SetUpPod still waited for the hung GC after %s", gateBound)
	}
	add := within(t, gateBound, "the bridge's ADD", adds)
	if add.err != nil || add.left < rpcDeadline-time.Since(start)-time.Second {
		t.Errorf("the ADD ran with context error %v and %s left of the %s deadline", add.err, add.left, rpcDeadline)
	}
	err := within(t, gateBound, "the preempted GC returning", gcDone)
	if !errors.Is(err, errGCPreempted) || errors.Is(err, errGCTimeout) {
		t.Errorf("preempted GC = %v, want errGCPreempted", err)
	}
	if n := len(env.exec.callsOf("DEL")); n != 0 {
		t.Errorf("GC ran %d DELs", n)
	}

	// The next pass, with the plugins' GC answering, sees the new pod.
	env.exec.setHook(nil)
	env.exec.Reset()
	if err := env.plugin.GC(context.Background()); err != nil {
		t.Fatalf("GC after the setup = %v", err)
	}
	gcs := env.exec.callsOf("GC")
	if len(gcs) == 0 {
		t.Fatal("no plugin GC after the setup")
	}
	checkJSON(t, "valid attachments", gcs[0].Conf["cni.dev/valid-attachments"],
		`[{"containerID":"`+podA.SandboxID+`","ifname":"eth0"},{"containerID":"`+podA.SandboxID+`","ifname":"lo"}]`)
}

// TestGCDeadlineEndsAHungPluginGC: the plugins' GC has a deadline of its
// own, far shorter than --cni-timeout.
func TestGCDeadlineEndsAHungPluginGC(t *testing.T) {
	env := newVerbsEnv(t, testConfList11, func(o *Options) { o.Timeout = time.Hour; o.gcTimeout = 100 * time.Millisecond })
	env.host.setLive(nil)
	env.exec.setHook(hangGC(nil, false))
	start := time.Now()
	gcDone := make(chan error, 1)
	go func() { gcDone <- env.plugin.GC(context.Background()) }()
	err := within(t, gateBound, "GC returning with a hung plugin", gcDone)
	if !errors.Is(err, errGCTimeout) || errors.Is(err, errGCPreempted) {
		t.Fatalf("GC with a hung plugin = %v, want errGCTimeout", err)
	}
	for _, s := range []string{`network "testnet"`, "100ms", "deadline exceeded"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("GC error %q lacks %q", err, s)
		}
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("GC returned after %s, before its 100ms deadline", d)
	}
	// The gate is free again.
	setUpWithin(t, env, podA, gateBound)
}

// TestGCLoopRetriesSoon: a pass that was preempted, or whose plugins'
// GC ran out of time, is retried soon, not a GCPeriod later.
func TestGCLoopRetriesSoon(t *testing.T) {
	for _, tc := range []struct {
		name      string
		gcTimeout time.Duration
		preempt   bool
	}{
		{"preempted by a pod's setup", time.Hour, true},
		{"timed out", 100 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newVerbsEnv(t, testConfList11, func(o *Options) { o.GCPeriod = time.Hour; o.Timeout = time.Hour; o.gcTimeout = tc.gcTimeout })
			started := make(chan struct{}, 1)
			env.exec.setHook(hangGC(started, true))
			env.host.setLive(nil, podA.SandboxID)
			within(t, gateBound, "the start-up GC", started)
			if tc.preempt {
				setUpWithin(t, env, podA, gateBound)
			}
			within(t, gcRetryPeriod+gateBound, "the retry", started)
		})
	}
}

func TestGCLoopRunsOnceTheHostIsSynced(t *testing.T) {
	env := newVerbsEnv(t, testConfList11, func(o *Options) { o.GCPeriod = time.Hour })
	time.Sleep(50 * time.Millisecond)
	if n := len(env.exec.callsOf("GC")); n != 0 {
		t.Fatalf("GC ran before the host could list its sandboxes")
	}
	env.host.setLive(nil)
	waitWithin(t, 3*time.Second, "the start-up GC", func() bool { return len(env.exec.callsOf("GC")) == 3 })
}

func TestCheckPod(t *testing.T) {
	t.Run("ok and drift", func(t *testing.T) {
		env := newVerbsEnv(t, testConfList, nil)
		setUp(t, env, testPod)
		res := env.plugin.CheckPod(context.Background(), testPod)
		if res.Status != network.CheckOK {
			t.Fatalf("CheckPod = %+v", res)
		}
		checks := env.exec.callsOf("CHECK")
		if got := callNames(checks); got != "CHECK bridge, CHECK portmap, CHECK bandwidth" {
			t.Fatalf("CHECK calls = %s", got)
		}
		if checks[0].NetNS != "/proc/42/ns/net" || checks[0].Conf["prevResult"] == nil {
			t.Errorf("CHECK netns %q, prevResult %v", checks[0].NetNS, checks[0].Conf["prevResult"])
		}
		env.exec.setErr("CHECK bridge", errors.New("eth0 has the wrong address"))
		res = env.plugin.CheckPod(context.Background(), testPod)
		if res.Status != network.CheckFailed || !strings.Contains(res.Message, "eth0 has the wrong address") {
			t.Fatalf("CheckPod = %+v", res)
		}
	})
	t.Run("cniVersion 0.3.1 is not broken", func(t *testing.T) {
		env := newVerbsEnv(t, strings.Replace(testConfList, `"cniVersion": "1.0.0"`, `"cniVersion": "0.3.1"`, 1), nil)
		env.exec.results["bridge"] = strings.Replace(bridgeResult, `"cniVersion": "1.0.0"`, `"cniVersion": "0.3.1"`, 1)
		setUp(t, env, testPod)
		res := env.plugin.CheckPod(context.Background(), testPod)
		if res.Status != network.CheckUnsupported || !strings.Contains(res.Message, "0.3.1") {
			t.Fatalf("CheckPod = %+v", res)
		}
		if n := len(env.exec.callsOf("CHECK")); n != 0 {
			t.Errorf("%d CHECK calls for a 0.3.1 network", n)
		}
	})
	t.Run("disableCheck", func(t *testing.T) {
		env := newVerbsEnv(t, strings.Replace(testConfList, `"name": "testnet",`, `"name": "testnet", "disableCheck": true,`, 1), nil)
		setUp(t, env, testPod)
		if res := env.plugin.CheckPod(context.Background(), testPod); res.Status != network.CheckUnsupported {
			t.Fatalf("CheckPod = %+v", res)
		}
	})
	t.Run("not running or never set up", func(t *testing.T) {
		env := newVerbsEnv(t, testConfList, nil)
		if res := env.plugin.CheckPod(context.Background(), testPod); res.Status != network.CheckUnsupported {
			t.Fatalf("CheckPod without a cache entry = %+v", res)
		}
		setUp(t, env, testPod)
		env.host.setNetNS(testPod.SandboxID, "")
		if res := env.plugin.CheckPod(context.Background(), testPod); res.Status != network.CheckUnsupported {
			t.Fatalf("CheckPod without a netns = %+v", res)
		}
	})
}

// blockUntilCancelled makes every ADD and DEL of bridge block until its
// context ends, like a plugin waiting for an unreachable datastore.
func blockUntilCancelled(ctx context.Context, c execCall) error {
	if c.Plugin == "bridge" && (c.Command == "ADD" || c.Command == "DEL") {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func TestCallsCarryDeadlineAndCancellation(t *testing.T) {
	env := newVerbsEnv(t, testConfList, func(o *Options) { o.Timeout = 100 * time.Millisecond })
	env.exec.setHook(blockUntilCancelled)

	start := time.Now()
	err := env.plugin.SetUpPod(context.Background(), testPod, nil, network.SetUpOptions{})
	if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("SetUpPod with a blocked plugin = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("SetUpPod took %s with a 100ms --cni-timeout", d)
	}
	start = time.Now()
	if err := env.plugin.TearDownPod(context.Background(), testPod); err == nil {
		t.Fatal("TearDownPod with a blocked plugin succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("TearDownPod took %s with a 100ms --cni-timeout", d)
	}

	// The caller's cancellation (kubelet's) ends the call before the
	// timeout does.
	env2 := newVerbsEnv(t, testConfList, func(o *Options) { o.Timeout = time.Hour })
	env2.exec.setHook(blockUntilCancelled)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	err = env2.plugin.SetUpPod(ctx, testPod, nil, network.SetUpOptions{})
	if err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("SetUpPod after cancellation = %v", err)
	}
}

func TestFirewallWarning(t *testing.T) {
	drop := hostFirewall{bridgeNFCallIPTables: true, forwardPolicy: "DROP", rules: []string{"-P FORWARD DROP", "-A FORWARD -j DOCKER-USER"}}
	list := func(conf string) *libcni.NetworkConfigList {
		l, err := libcni.ConfListFromBytes([]byte(conf))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	bridgeOnly := list(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge","bridge":"br9"},{"type":"portmap"}]}`)
	withFirewall := list(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"firewall"}]}`)
	ptp := list(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"}]}`)
	defaultBridge := list(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"}]}`)

	w := firewallWarning("/etc/cni/net.d/10.conflist", bridgeOnly, drop)
	for _, s := range []string{"br9", "FORWARD policy is DROP", "bridge-nf-call-iptables=1", `"firewall"`, "/etc/cni/net.d/10.conflist"} {
		if !strings.Contains(w, s) {
			t.Errorf("warning %q lacks %q", w, s)
		}
	}
	if w := firewallWarning("f", defaultBridge, drop); !strings.Contains(w, "cni0") {
		t.Errorf("default bridge warning = %q", w)
	}
	for name, tc := range map[string]struct {
		list *libcni.NetworkConfigList
		fw   hostFirewall
	}{
		"firewall plugin":      {withFirewall, drop},
		"no bridge":            {ptp, drop},
		"policy ACCEPT":        {bridgeOnly, hostFirewall{bridgeNFCallIPTables: true, forwardPolicy: "ACCEPT"}},
		"bridge nf off":        {bridgeOnly, hostFirewall{forwardPolicy: "DROP"}},
		"accept rule":          {bridgeOnly, hostFirewall{bridgeNFCallIPTables: true, forwardPolicy: "DROP", rules: []string{"-A DOCKER-USER -i br9 -o br9 -j ACCEPT"}}},
		"accept rule, in only": {bridgeOnly, hostFirewall{bridgeNFCallIPTables: true, forwardPolicy: "DROP", rules: []string{"-A FORWARD -i br9 -j ACCEPT"}}},
	} {
		if w := firewallWarning("f", tc.list, tc.fw); w != "" {
			t.Errorf("%s: warning %q", name, w)
		}
	}
	for _, r := range []string{"-A FORWARD -i br9 ! -o br9 -j ACCEPT", "-A FORWARD -i br9 -o br9 -m conntrack --ctstate RELATED -j ACCEPT", "-A FORWARD -i br9 -o br9 -j DROP"} {
		if acceptsBridge([]string{r}, "br9") {
			t.Errorf("%q taken as accepting all of br9's traffic", r)
		}
	}

	// Through the plugin: a warning, ready all the same; gone with the
	// firewall plugin added.
	env := newVerbsEnv(t, strings.Replace(testConfList, `"bridge": "cni0"`, `"bridge": "br9"`, 1),
		func(o *Options) { o.probeFirewall = func(context.Context) (hostFirewall, error) { return drop, nil } })
	waitWithin(t, reactBound, "the firewall warning", func() bool {
		w := env.plugin.Warnings()
		return len(w) == 1 && strings.Contains(w[0], "br9")
	})
	if err := env.plugin.Status(); err != nil {
		t.Errorf("Status with a warning = %v", err)
	}
	writeFile(t, env.confDir, "10-test.conflist", strings.Replace(testConfList, `{"type": "bandwidth", "capabilities": {"bandwidth": true}}`,
		`{"type": "bandwidth", "capabilities": {"bandwidth": true}}, {"type": "firewall"}`, 1))
	waitWithin(t, reactBound, "the warning to go", func() bool {
		return len(env.plugin.Warnings()) == 0 && networkName(env.plugin) == "testnet" && env.plugin.Status() == nil
	})
}
