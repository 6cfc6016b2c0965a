package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/cni"
	"github.com/netshim/netshim/pkg/dockerservice"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
	"github.com/netshim/netshim/pkg/kubenet"
	"github.com/netshim/netshim/pkg/layerusage"
	"github.com/netshim/netshim/pkg/metrics"
	"github.com/netshim/netshim/pkg/network"
	"github.com/netshim/netshim/pkg/podns"
	"github.com/netshim/netshim/pkg/streaming"
	"github.com/netshim/netshim/pkg/version"
)

func newRootCommand() *cobra.Command {
	opts := defaultOptions()
	cmd := &cobra.Command{
		Use:   "netshim",
		Short: "A CRI runtime that runs Kubernetes pods on a Docker engine",
		Long: `netshim serves the Kubernetes Container Runtime Interface (CRI v1) on a unix
socket and runs pods on a Docker engine, with pod networking through CNI.
Point kubelet at it with --container-runtime-endpoint=unix:///run/netshim/netshim.sock.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.validate(); err != nil {
				return err
			}
			return run(cmd.Context(), opts)
		},
	}
	opts.addFlags(cmd.Flags())
	cmd.AddCommand(newEngineCommand())
	cmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print netshim's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "netshim %s (CRI %s)\n", version.Version, version.CRIVersion)
		},
	})
	return cmd
}

func run(ctx context.Context, opts *options) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	klog.InfoS("Starting netshim", "version", version.Version, "listen", opts.listen, "dockerEndpoint", opts.dockerEndpoint, "networkPlugin", opts.networkPlugin)
	spec, err := parseListen(opts.listen)
	if err != nil {
		return err
	}
	// The sockets systemd passed, taken (and LISTEN_* unset) before any
	// child could inherit them; fd:// with none fails here, before
	// anything else happened.
	inherited, err := inheritedListener(spec)
	if err != nil {
		return err
	}
	if inherited != nil {
		// Closed by the server once it serves; this covers the returns
		// before. Closing never removes the file: systemd owns it.
		defer inherited.Close()
	}
	sup := newSystemdSupervisor()
	// Read (and unset) before any child could inherit it, like LISTEN_*.
	watchdog := watchdogTimeout()
	// Signals from here on: a SIGTERM while netshim waits for Docker
	// ends the wait, and still runs the deferred clean-ups.
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Then, before anything touches the socket file, the checkpoints,
	// the network or the CNI cache: only one netshim per root dir.
	lock, err := lockRootDir(opts.rootDir, lockWait)
	if err != nil {
		return err
	}
	defer lock.Close()
	oomFloor, err := dockerservice.OOMScoreAdjFloor(opts.restrictOOMScoreAdj, "/proc")
	if err != nil {
		return err
	}
	if oomFloor != nil {
		klog.InfoS("WARNING: negative oom_score_adj values will be clamped (netshim lacks CAP_SYS_RESOURCE, or --restrict-oom-score-adj=true)", "floor", *oomFloor)
	}
	rawClient, err := engine.NewClient(opts.dockerEndpoint)
	if err != nil {
		return fmt.Errorf("creating Docker client for %s: %w", opts.dockerEndpoint, err)
	}
	defer rawClient.Close()
	// nil (metrics off) records nothing, and leaves the client unwrapped.
	var m *metrics.Metrics
	if opts.metricsBindAddress != "" {
		m = metrics.New()
	}
	client := engine.Instrument(rawClient, m)
	checkpoints, err := checkpoint.NewManager(filepath.Join(opts.rootDir, "sandbox"))
	if err != nil {
		return fmt.Errorf("opening checkpoint store: %w", err)
	}
	plugins := []network.NetworkPlugin{
		cni.NewPlugin(cni.Options{
			ConfDir:  opts.cniConfDir,
			BinDirs:  network.SplitDirs(opts.cniBinDir),
			CacheDir: opts.cniCacheDir,
			StateDir: cniStateDir(opts.rootDir),
			Timeout:  opts.cniTimeout,
			GCPeriod: gcPeriod(opts.cniGCPeriod),
			Metrics:  m,
		}),
		kubenet.NewPlugin(kubenet.Options{
			BinDirs:     network.SplitDirs(opts.cniBinDir),
			CacheDir:    opts.cniCacheDir,
			PodCIDR:     opts.podCIDR,
			Bridge:      opts.kubenetBridge,
			IPAMDataDir: opts.kubenetIPAMDir,
			StateDir:    cniStateDir(opts.rootDir),
			Timeout:     opts.cniTimeout,
			Metrics:     m,
		}),
	}
	if err := ensureNetNSDir(opts); err != nil {
		return err
	}
	ds, err := dockerservice.NewDockerService(dockerservice.Config{
		PodInfraImage:     opts.podInfraImage,
		OOMScoreAdjFloor:  oomFloor,
		NetworkPluginName: opts.networkPlugin,
		Network: network.PluginConfig{
			HairpinMode:       network.HairpinMode(opts.hairpinMode),
			NonMasqueradeCIDR: opts.nonMasqueradeCIDR,
			MTU:               opts.mtu,
		},
		StopTimeout:               opts.stopTimeout,
		ImagePullProgressDeadline: opts.pullProgressDeadline,
		RootDir:                   opts.rootDir,
		LayerUsage:                layerusage.Options{Interval: opts.layerInterval},
		Metrics:                   m,

		AdoptCRIDockerd:   opts.adoptCRIDockerd,
		CRIDockerdRootDir: opts.criDockerdRootDir,
		SandboxNetNS:      opts.sandboxNetNS,
		NetNSDir:          opts.netnsDir,
	}, client, checkpoints, plugins)
	if err != nil {
		return err
	}
	defer ds.Close()
	lis, socket := inherited, ""
	if lis != nil {
		socket = lis.Addr().String() + " (passed by systemd)"
	} else {
		lis, err = listenUnix(spec.path)
		if err != nil {
			return err
		}
		// netshim made this socket, so it removes it; one systemd
		// passed stays with systemd.
		defer os.Remove(spec.path)
		socket = spec.path
	}
	gate := newServeGate()
	srv := newCRIServer(m, gate, ds.Codec())
	ds.Register(srv)
	// Connections are served from here on, before the slow parts of the
	// start (reading Docker's state, the streaming server), so that a
	// client's handshake never times out (gate.go); the calls wait at the
	// gate until all of it is done.
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()
	// A return before the gate opened ends the held calls (Unavailable,
	// saying why), then the connections.
	defer srv.Stop()
	defer gate.Close()

	// Up before the first sync, so that /readyz says why it waits.
	_, stopMetrics, err := startMetricsServer(opts.metricsBindAddress, opts.enableProfiling, m, ds.Ready)
	if err != nil {
		return err
	}
	defer stopMetrics()
	// Fill the state index before serving: an empty index would tell
	// kubelet every pod is gone. With dockerd down this returns at once
	// and the index fills when it comes up.
	sup.setStatus("Reading the state of Docker at " + opts.dockerEndpoint)
	ds.Start(ctx)
	logSandboxNetNSMode(ctx, ds)
	if watchdog > 0 {
		klog.InfoS("Pinging systemd's watchdog while the Docker state index loop runs", "interval", watchdog/2, "watchdog", watchdog)
		go sup.watchdog(ctx, watchdog, ds.IndexHeartbeat)
	}
	if opts.testWedgeIndex {
		wedgeIndexOnSignal(ctx, ds)
	}

	// Exec, attach and port-forward sessions: the RPCs hand out URLs of
	// this server. It listens before the gate opens, so no URL is ever
	// handed out for a server that is not there.
	streamSrv, err := streaming.New(streaming.Config{Addr: opts.streamingAddress}, rawClient, ds.PodNetNS)
	if err != nil {
		return err
	}
	if err := streamSrv.Start(); err != nil {
		return err
	}
	defer streamSrv.Stop()
	ds.SetStreamingServer(streamSrv)

	// Under systemd (a service manager waits for READY=1, or holds the
	// socket) netshim answers no call before it knows Docker's
	// containers: a client that called early waits at the gate and gets
	// real answers, not Unavailable. Run by hand it answers at once, and
	// Status says RuntimeReady=false until Docker answers.
	if sup.managed || inherited != nil {
		if err := sup.waitSynced(sigCtx, ds.Synced(), opts.dockerEndpoint, func() string {
			_, reason := ds.Ready()
			return reason
		}); err != nil {
			klog.ErrorS(err, "Shutting down before serving CRI")
			sup.stopping("Stopped before serving: " + err.Error())
			// The held calls end with Unavailable, saying why.
			gate.Close()
			shutdownGracefully(srv, opts.shutdownTimeout)
			return nil
		}
	}
	// READY=1 before the gate opens: whoever waits for READY (systemd,
	// the e2e test) sees it no later than the first answer.
	serving := func() string {
		sandboxes, containers := ds.Counts()
		return fmt.Sprintf("Serving CRI on %s; %d sandboxes, %d containers", socket, sandboxes, containers)
	}
	sup.ready(serving())
	gate.Open()
	klog.InfoS("Serving CRI", "socket", socket)
	// The counts in `systemctl status`, kept current; stopped before the
	// last status so that it is not overwritten.
	statusCtx, stopStatus := context.WithCancel(ctx)
	statusDone := make(chan struct{})
	go func() {
		defer close(statusDone)
		if sup.managed {
			sup.keepStatus(statusCtx, statusEvery, serving)
		}
	}()
	endStatus := func() { stopStatus(); <-statusDone }
	defer endStatus()

	select {
	case err := <-serveErr:
		endStatus()
		sup.setStatus(fmt.Sprintf("Serving CRI on %s failed: %v", socket, err))
		return fmt.Errorf("serving CRI on %s: %w", socket, err)
	case <-sigCtx.Done():
	}
	endStatus()
	sup.stopping(fmt.Sprintf("Shutting down: waiting for in-flight RPCs (at most %s)", opts.shutdownTimeout))
	klog.InfoS("Shutting down: waiting for in-flight RPCs", "timeout", opts.shutdownTimeout)
	// Event streams last as long as their clients: end them, or the
	// graceful stop would wait for them until its timeout.
	ds.StopEvents()
	shutdownGracefully(srv, opts.shutdownTimeout)
	klog.InfoS("netshim stopped")
	return nil
}

// shutdownGracefully lets in-flight RPCs finish (a RunPodSandbox cut in the
// middle would have to be cleaned up later), but not forever.
func shutdownGracefully(srv *grpc.Server, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		klog.InfoS("Graceful shutdown timed out; stopping hard")
		srv.Stop()
	}
}

// cniStateDir is where the network plugins keep the ledger of the CNI
// attachments netshim made. cni and kubenet share it: a pod set up by one
// is still known after a switch to the other.
func cniStateDir(rootDir string) string { return filepath.Join(rootDir, "cni") }

// gcPeriod maps --cni-gc-period (0: off) to cni.Options.GCPeriod (0:
// default, negative: off).
func gcPeriod(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// logSandboxNetNSMode says at start-up where new pods' network namespaces
// will come from (--sandbox-netns), waiting a little for the engine's
// runtimes, which decide the auto mode, and which modes the pods netshim
// already has were made in, and why.
func logSandboxNetNSMode(ctx context.Context, ds *dockerservice.DockerService) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	mode, reason := ds.SandboxNetNSMode(ctx)
	klog.InfoS("Sandbox network namespaces", "mode", mode, "reason", reason)
	if kv := modeCountsKV(ds.SandboxModeCounts()); len(kv) > 0 {
		klog.InfoS("Pod sandboxes by mode and why they got it", kv...)
	}
}

// modeCountsKV is a log line's key/value pairs of sandbox counts, keyed
// "mode/reason", in a stable order.
func modeCountsKV(counts map[metrics.SandboxMode]int) []any {
	keys := make([]metrics.SandboxMode, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b metrics.SandboxMode) int {
		return cmp.Or(cmp.Compare(a.Mode, b.Mode), cmp.Compare(a.Reason, b.Reason))
	})
	kv := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		kv = append(kv, k.Mode+"/"+k.Reason, counts[k])
	}
	return kv
}

// ensureNetNSDir makes --netns-dir an unbindable mount before any pod's
// namespaces are pinned in it, so that a container with a hostPath of /
// or /run gets no copy of them (podns.EnsureUnbindable). Only the
// current directory: one of an earlier --netns-dir that checkpoints still
// name gets no new pins, and empties as its pods go. In the docker mode
// nothing new is pinned either, and a failure is only logged.
func ensureNetNSDir(opts *options) error {
	if opts.netnsDir == "" {
		return nil
	}
	err := podns.EnsureUnbindable(opts.netnsDir)
	switch {
	case err == nil:
		return nil
	case opts.sandboxNetNS == dockerservice.SandboxNetNSDocker:
		klog.ErrorS(err, "Cannot make --netns-dir an unbindable mount; containers binding it or a directory above it get copies of the pinned namespaces in it", "netnsDir", opts.netnsDir)
		return nil
	}
	return fmt.Errorf("--netns-dir %s: %w", opts.netnsDir, err)
}
