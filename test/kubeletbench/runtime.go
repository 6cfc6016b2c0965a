package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// runtimeUnderTest is the CRI runtime one run puts under kubelet: netshim
// on the private dockerd, or containerd's own CRI plugin as its peer. The
// run's steps (kubelet, manifests, waits, hold, teardown) are the same for
// both; what differs is behind this.
type runtimeUnderTest interface {
	// start starts the runtime; once it returns nil, the runtime serves
	// CRI on endpoint with the bench's images in its store.
	start(ctx context.Context) error
	// endpoint is the CRI socket kubelet is given.
	endpoint() string
	// runtimeClient is the bench's own CRI client of the runtime, whose
	// answers are the truth about the pods (kubelet runs standalone).
	runtimeClient() runtimeapi.RuntimeServiceClient
	// stack is which processes the hold measures.
	stack(kubelet int) stack
	// netshimURL is netshim's metrics and pprof endpoint, "" for a
	// runtime that is not netshim: its RPC and Docker call counts and
	// profiles are netshim's figures only.
	netshimURL() string
	// stop removes the pods kubelet left (an error: kubelet should have),
	// stops the runtime, keeps its log in artifacts (when not "") and
	// audits what it left on the host.
	stop(artifacts string) error
}

// newRuntime is the one place that picks a run's runtime, from its mode.
// runDir is the run's own directory, removed once the run stopped.
func (w *world) newRuntime(m mode, runDir string) runtimeUnderTest {
	if m.kind == kindContainerd {
		return &containerdRuntime{w: w, cfg: w.containerdConfig(runDir)}
	}
	return &netshimRuntime{w: w, mode: m, dir: filepath.Join(runDir, "netshim")}
}

// cniOptions are the network every run's pods get, whatever the runtime:
// the bridge, host-local in the world's own data dir, portmap, firewall.
// netshim gets it through the harness (WithCNIConfig), containerd as a
// file in its conf dir (writeConflist): the same bytes.
func (w *world) cniOptions() []harness.ConflistOption {
	return []harness.ConflistOption{
		harness.WithNetworkName(networkName),
		harness.WithBridge(bridgeName),
		harness.WithHairpin(false),
		harness.WithIPAM(map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": subnetCIDR, "gateway": gatewayIP}}},
			"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
			"dataDir": w.ipamDir,
		}),
		harness.WithFirewall(),
	}
}

// netshimRuntime is netshim, with a mode's flags, on the world's private
// dockerd.
type netshimRuntime struct {
	w    *world
	mode mode
	dir  string
	n    *harness.Netshim
}

func (nr *netshimRuntime) start(ctx context.Context) error {
	w := nr.w
	args := []string{"--network-plugin", "cni", "--metrics-bind-address", strings.TrimPrefix(nr.netshimURL(), "http://")}
	if w.o.profile {
		args = append(args, "--enable-profiling")
	}
	var err error
	nr.n, err = harness.NewNetshim(
		harness.WithBinary(w.o.netshim),
		harness.WithDir(nr.dir),
		harness.WithDockerEndpoint(w.dockerd.Endpoint()),
		harness.WithCNIBinDir(w.o.cniBinDir),
		harness.WithPauseImage(w.o.pauseImage),
		harness.WithVerbosity(w.o.netshimV),
		harness.WithOwnProcessGroup(),
		harness.WithArgs(append(args, nr.mode.args...)...),
		harness.WithCNIConfig(w.cniOptions()...),
	)
	if err != nil {
		return err
	}
	nctx, ncancel := context.WithTimeout(ctx, harness.StartTimeout+5*time.Second)
	defer ncancel()
	err = nr.n.Start(nctx)
	if pid := nr.n.Pid(); pid > 0 {
		err = errors.Join(err, w.guard.RecordProcess("netshim", pid, w.tmp))
	}
	if err != nil {
		return fmt.Errorf("netshim %s: %w\n%s", strings.Join(nr.mode.args, " "), err, nr.n.LogTail(20))
	}
	return nil
}

func (nr *netshimRuntime) endpoint() string { return nr.n.Sock }

func (nr *netshimRuntime) runtimeClient() runtimeapi.RuntimeServiceClient {
	return nr.n.CRI().Runtime
}

func (nr *netshimRuntime) stack(kubelet int) stack {
	return netshimStack(nr.n.Pid(), kubelet, nr.w.dockerdPid(), nr.w.dockerd.Dir)
}

func (nr *netshimRuntime) netshimURL() string { return nr.w.netshimURL() }

// stop removes what kubelet left through netshim, stops it, and checks
// that the run left nothing in the engine, the network or netshim's state.
func (nr *netshimRuntime) stop(artifacts string) error {
	if nr.n == nil {
		return nil
	}
	var errs []error
	if nr.n.Running() {
		ctx, cancel := context.WithTimeout(context.Background(), harness.RPCTimeout)
		if v, err := viewPods(ctx, nr.n.CRI().Runtime, namespace); err == nil && v.sandboxes > 0 {
			errs = append(errs, fmt.Errorf("kubelet left %v; removing them through netshim", v))
			errs = append(errs, nr.n.RemovePods(ctx, namespace))
		}
		cancel()
	}
	errs = append(errs, nr.n.Stop(syscall.SIGTERM))
	if artifacts != "" {
		copyFile(nr.n.LogPath, filepath.Join(artifacts, "netshim.log"))
	}
	errs = append(errs, nr.w.audit(nr.n.RootDir, nr.n.NetNSDir))
	// netshim never unmounts its netns dir; the guard would, at the
	// end of the bench, and each round has its own.
	errs = append(errs, nr.n.UnmountNetNSDir())
	return errors.Join(errs...)
}
