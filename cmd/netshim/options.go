package main

import (
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/cni"
	"github.com/netshim/netshim/pkg/dockerservice"
	"github.com/netshim/netshim/pkg/kubenet"
	"github.com/netshim/netshim/pkg/layerusage"
	"github.com/netshim/netshim/pkg/metrics"
	"github.com/netshim/netshim/pkg/network"
	"github.com/netshim/netshim/pkg/streaming"
)

// options are the daemon's flags, named as kubelet and cri-dockerd name
// them so operators can carry their settings over.
type options struct {
	listen               string
	dockerEndpoint       string
	rootDir              string
	networkPlugin        string
	cniBinDir            string
	cniConfDir           string
	cniCacheDir          string
	cniTimeout           time.Duration
	cniGCPeriod          time.Duration
	podInfraImage        string
	mtu                  int
	hairpinMode          string
	podCIDR              string
	nonMasqueradeCIDR    string
	kubenetBridge        string
	kubenetIPAMDir       string
	restrictOOMScoreAdj  string
	stopTimeout          time.Duration
	pullProgressDeadline time.Duration
	shutdownTimeout      time.Duration
	streamingAddress     string
	layerInterval        time.Duration
	metricsBindAddress   string
	enableProfiling      bool
	adoptCRIDockerd      bool
	criDockerdRootDir    string
	sandboxNetNS         string
	netnsDir             string
	// testWedgeIndex: SIGUSR2 wedges the index loop (make e2e-vm's
	// watchdog check); hidden, never for a node.
	testWedgeIndex bool
}

func defaultOptions() *options {
	return &options{
		listen:               "unix:///run/netshim/netshim.sock",
		dockerEndpoint:       "unix:///var/run/docker.sock",
		rootDir:              "/var/lib/netshim",
		networkPlugin:        "cni",
		cniBinDir:            "/opt/cni/bin,/usr/lib/cni",
		cniConfDir:           "/etc/cni/net.d",
		cniCacheDir:          "/var/lib/cni/cache",
		cniTimeout:           cni.DefaultTimeout,
		cniGCPeriod:          5 * time.Minute,
		podInfraImage:        "registry.k8s.io/pause:3.10",
		hairpinMode:          string(network.DefaultHairpinMode),
		nonMasqueradeCIDR:    kubenet.DefaultNonMasqueradeCIDR,
		kubenetBridge:        kubenet.DefaultBridge,
		restrictOOMScoreAdj:  "auto",
		stopTimeout:          10 * time.Second,
		pullProgressDeadline: dockerservice.DefaultImagePullProgressDeadline,
		shutdownTimeout:      10 * time.Second,
		streamingAddress:     streaming.DefaultAddr,
		layerInterval:        layerusage.DefaultInterval,
		criDockerdRootDir:    "/var/lib/cri-dockerd",
		sandboxNetNS:         dockerservice.SandboxNetNSAuto,
		netnsDir:             "/run/netshim/netns",
	}
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.listen, "listen", o.listen, "CRI endpoint to serve: unix://PATH, or fd:// (fd://NAME) for a socket systemd passes (socket activation, netshim.socket). With unix://PATH the socket is created mode 0660, its directory if missing, and a stale socket left by a crash is replaced; but when systemd passed a socket, netshim serves that one (the one at PATH if several) and leaves its file alone. Under systemd (NOTIFY_SOCKET or a passed socket) netshim accepts no connection before it has read Docker's state, then notifies READY=1.")
	fs.StringVar(&o.dockerEndpoint, "docker-endpoint", o.dockerEndpoint, "Docker engine endpoint. The API version is negotiated, so any engine from API 1.41 (Docker 20.10) on works.")
	fs.StringVar(&o.rootDir, "root-dir", o.rootDir, "Directory for netshim's state: sandbox checkpoints live in ROOT/sandbox, the record of the CNI attachments netshim made in ROOT/cni. One netshim per directory: ROOT/netshim.lock is locked (flock) for the daemon's life, and a second instance exits at once.")
	fs.StringVar(&o.networkPlugin, "network-plugin", o.networkPlugin, "Pod network plugin: \"cni\" (the default network from --cni-conf-dir), \"kubenet\" (a built-in bridge network over --pod-cidr, no config file) or \"none\" (pods get loopback only).")
	fs.StringVar(&o.cniBinDir, "cni-bin-dir", o.cniBinDir, "Comma-separated list of directories searched, in order, for CNI plugin binaries.")
	fs.StringVar(&o.cniConfDir, "cni-conf-dir", o.cniConfDir, "Directory of CNI network configs; the first .conflist/.conf/.json in lexical order is the default network. Watched (fsnotify), so a config added, changed or removed later takes effect within a fraction of a second, without a restart.")
	fs.StringVar(&o.cniCacheDir, "cni-cache-dir", o.cniCacheDir, "Directory where libcni caches each attachment's config and result; teardown uses it to release exactly what setup took.")
	fs.DurationVar(&o.cniTimeout, "cni-timeout", o.cniTimeout, "Deadline of every CNI plugin call (ADD, DEL, CHECK, GC, STATUS), on top of kubelet's own cancellation of the RPC: a plugin that blocks (e.g. on an unreachable datastore) fails the call instead of holding the pod. The plugins' GC has a 1m deadline of its own besides, and a pod's ADD never waits for it: it cancels a GC in progress, which runs again later.")
	fs.DurationVar(&o.cniGCPeriod, "cni-gc-period", o.cniGCPeriod, "How often CNI GC frees what plugins hold for sandboxes that no longer exist (it also runs at start-up); 0 disables it.")
	_ = fs.MarkHidden("cni-gc-period")
	fs.StringVar(&o.podInfraImage, "pod-infra-container-image", o.podInfraImage, "Image of the pod infra (\"pause\") container that holds each pod's namespaces. Pulled only if missing.")
	fs.IntVar(&o.mtu, "mtu", o.mtu, "MTU of pod interfaces for plugins that set it; 0 lets the plugin decide (kubenet: the MTU of the default route's link).")
	fs.StringVar(&o.hairpinMode, "hairpin-mode", o.hairpinMode, "How a pod reaches itself through a service: \"hairpin-veth\", \"promiscuous-bridge\" or \"none\".")
	fs.StringVar(&o.podCIDR, "pod-cidr", o.podCIDR, "kubenet: the node's pod CIDR, one or a comma-separated IPv4,IPv6 pair for dual-stack. Empty waits for kubelet to send it (UpdateRuntimeConfig); once set it is kept until restart.")
	fs.StringVar(&o.nonMasqueradeCIDR, "non-masquerade-cidr", o.nonMasqueradeCIDR, "kubenet: traffic from pods to destinations outside these CIDRs (comma-separated, either family) and outside the pod CIDR is masqueraded. 0.0.0.0/0 turns IPv4 masquerading off.")
	fs.StringVar(&o.kubenetBridge, "kubenet-bridge", o.kubenetBridge, "kubenet: name of the pods' bridge (for tests).")
	fs.StringVar(&o.kubenetIPAMDir, "kubenet-ipam-dir", o.kubenetIPAMDir, "kubenet: host-local's store directory; empty means host-local's default /var/lib/cni/networks (for tests).")
	_ = fs.MarkHidden("kubenet-bridge")
	_ = fs.MarkHidden("kubenet-ipam-dir")
	fs.BoolVar(&o.testWedgeIndex, "test-wedge-index-on-sigusr2", false, "For tests of the watchdog only: SIGUSR2 wedges the Docker state index loop for good, as a deadlock would, so that systemd's watchdog kills and restarts netshim.")
	_ = fs.MarkHidden("test-wedge-index-on-sigusr2")
	fs.StringVar(&o.restrictOOMScoreAdj, "restrict-oom-score-adj", o.restrictOOMScoreAdj, "Clamp negative oom_score_adj values (kubelet asks -998 for sandboxes) to netshim's own: \"auto\" when netshim lacks CAP_SYS_RESOURCE (runc would fail the start), \"true\" always, \"false\" never.")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", o.stopTimeout, "Grace period given to a sandbox's containers when the sandbox is stopped.")
	fs.DurationVar(&o.pullProgressDeadline, "image-pull-progress-deadline", o.pullProgressDeadline, "Cancel an image pull that reports no progress for this long (cri-dockerd's flag and default): a stalled registry or connection fails the pull, naming the image, instead of holding it until kubelet's deadline. A pull that moves is never cut.")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", o.shutdownTimeout, "On SIGTERM/SIGINT, how long in-flight RPCs may run before the server stops hard.")
	fs.StringVar(&o.streamingAddress, "streaming-address", o.streamingAddress, "host:port of the HTTP server for exec, attach and port-forward sessions (the URLs the CRI Exec/Attach/PortForward RPCs return). Port 0 picks a free port. It has no authentication besides single-use tokens: keep it on loopback, where kubelet reaches it.")
	fs.StringVar(&o.metricsBindAddress, "metrics-bind-address", o.metricsBindAddress, "[host]:port of the HTTP endpoint serving Prometheus metrics (/metrics), /healthz, /readyz, and /debug/pprof/ with --enable-profiling. Empty (the default) turns it off. Without a host (\":9090\") it binds 127.0.0.1: it has no authentication, so give a host (e.g. 0.0.0.0:9090) only on a trusted network; netshim logs a warning when it listens elsewhere than on loopback.")
	fs.BoolVar(&o.enableProfiling, "enable-profiling", o.enableProfiling, fmt.Sprintf("Serve Go's pprof profiles under /debug/pprof/ on the --metrics-bind-address endpoint (which it needs). Off by default: profiles expose the process's memory and command line, and a CPU profile or trace slows it. A profile or trace samples for at most %d seconds (its seconds parameter).", int(metrics.MaxProfileDuration.Seconds())))
	fs.DurationVar(&o.layerInterval, "writable-layer-measure-interval", o.layerInterval, "How often the disk usage of a container's writable layer (ContainerStats' writable_layer, kubelet's container rootfs) is measured, in the background. A layer too big to walk in one short slice is measured less often each time, down to once per 30 minutes or this interval if longer.")
	fs.BoolVar(&o.adoptCRIDockerd, "adopt-cri-dockerd", o.adoptCRIDockerd, "Take over the pods cri-dockerd runs on the same Docker engine: its sandboxes and containers are listed with their ids, metadata and states, their host ports come from its checkpoints in --cri-dockerd-root-dir, their IPs from libcni's cache (use cri-dockerd's --cni-cache-dir), and their logs continue in CRI format. Keep it on while such pods remain (docs/migrate-from-cri-dockerd.md).")
	fs.StringVar(&o.criDockerdRootDir, "cri-dockerd-root-dir", o.criDockerdRootDir, "cri-dockerd's --cri-dockerd-root-directory, whose sandbox/ checkpoints --adopt-cri-dockerd reads.")

	fs.StringVar(&o.sandboxNetNS, "sandbox-netns", o.sandboxNetNS, "Where a pod's network namespace comes from. \"docker\": the pause container's own, set up by CNI after the container started (works on any engine). \"pinned\": netshim makes it under --netns-dir and runs the CNI ADD while Docker starts the pause container in it, through netshim's OCI runtime wrapper netshim-oci, which the engine must have as runtime \"netshim-oci\" (daemon.json \"runtimes\"); teardown always finds the netns, also after the container is gone. \"pauseless\" (opt-in): as pinned, and a pod gets no pause container at all: netshim also pins its IPC and UTS namespaces and its /dev/shm, and runs its containers in them through netshim-oci; pods that share a PID namespace or the node's IPC namespace keep a pause container (pinned). \"auto\" (the default): when the engine has that runtime and its default runtime is runc (which netshim-oci execs; checked every 30s), the fastest mode each pod allows: pauseless, else pinned (a pod sharing a PID namespace or the node's IPC namespace); else docker. `netshim engine register` adds the runtime. Host-network pods and pods with a RuntimeClass handler always use docker. The mode in effect is logged at start-up and shown by `crictl info` (sandboxNetns); each pod's, and why, by `crictl inspectp` (sandboxMode) and the netshim_sandbox_modes metric.")
	fs.StringVar(&o.netnsDir, "netns-dir", o.netnsDir, "Directory of the pinned pod network namespaces (bind mounts; --sandbox-netns). netshim makes it an unbindable mount of its own at start-up and leaves it mounted, so that a recursive bind of a directory above it (a container's hostPath of / or /run, where the kernel keeps the mount unbindable in the container's mount namespace; 6.18 does not) does not copy the pods' namespaces. Files in it that no sandbox names are removed at start-up.")

	// klog's flags (-v, --vmodule, --logtostderr...) as kubelet has them.
	gofs := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(gofs)
	fs.AddGoFlagSet(gofs)
}

func (o *options) validate() error {
	if _, err := parseListen(o.listen); err != nil {
		return err
	}
	switch network.HairpinMode(o.hairpinMode) {
	case network.HairpinVeth, network.PromiscuousBridge, network.HairpinNone:
	default:
		return fmt.Errorf("--hairpin-mode %q: want hairpin-veth, promiscuous-bridge or none", o.hairpinMode)
	}
	if o.podCIDR != "" {
		if _, err := kubenet.ParseCIDRs(o.podCIDR); err != nil {
			return fmt.Errorf("--pod-cidr: %w", err)
		}
	}
	if _, err := kubenet.ParseNonMasqCIDRs(o.nonMasqueradeCIDR); err != nil {
		return fmt.Errorf("--non-masquerade-cidr: %w", err)
	}
	if n := len(o.kubenetBridge); n == 0 || n > 15 || strings.ContainsAny(o.kubenetBridge, " /:") {
		return fmt.Errorf("--kubenet-bridge %q: want an interface name of 1 to 15 characters", o.kubenetBridge)
	}
	if o.pullProgressDeadline <= 0 {
		return fmt.Errorf("--image-pull-progress-deadline %s: must be positive", o.pullProgressDeadline)
	}
	if o.cniTimeout <= 0 {
		return fmt.Errorf("--cni-timeout %s: must be positive", o.cniTimeout)
	}
	if o.cniGCPeriod < 0 {
		return fmt.Errorf("--cni-gc-period %s: must not be negative", o.cniGCPeriod)
	}
	if o.mtu < 0 {
		return fmt.Errorf("--mtu %d: must not be negative", o.mtu)
	}
	if _, _, err := net.SplitHostPort(o.streamingAddress); err != nil {
		return fmt.Errorf("--streaming-address %q: want host:port (e.g. 127.0.0.1:0): %v", o.streamingAddress, err)
	}
	if o.metricsBindAddress != "" {
		if _, err := metrics.ListenAddress(o.metricsBindAddress); err != nil {
			return fmt.Errorf("--metrics-bind-address %q: %w", o.metricsBindAddress, err)
		}
	}
	if o.enableProfiling && o.metricsBindAddress == "" {
		// Refused rather than ignored: whoever asked for profiles would
		// find nothing serving them.
		return fmt.Errorf("--enable-profiling serves pprof on the metrics endpoint: give --metrics-bind-address too (e.g. 127.0.0.1:9090)")
	}
	if o.layerInterval <= 0 {
		return fmt.Errorf("--writable-layer-measure-interval %s: must be positive", o.layerInterval)
	}
	if o.adoptCRIDockerd && (!filepath.IsAbs(o.criDockerdRootDir) || filepath.Clean(o.criDockerdRootDir) == filepath.Clean(o.rootDir)) {
		return fmt.Errorf("--cri-dockerd-root-dir %q: want cri-dockerd's absolute root directory, not netshim's --root-dir", o.criDockerdRootDir)
	}
	if err := dockerservice.ValidSandboxNetNSMode(o.sandboxNetNS); err != nil {
		return err
	}
	if !filepath.IsAbs(o.netnsDir) || filepath.Clean(o.netnsDir) == filepath.Clean(o.rootDir) {
		return fmt.Errorf("--netns-dir %q: want an absolute directory of its own", o.netnsDir)
	}
	if o.podInfraImage == "" {
		return fmt.Errorf("--pod-infra-container-image must not be empty")
	}
	return nil
}
