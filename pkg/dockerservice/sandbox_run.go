package dockerservice

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/network"
)

// sandboxOOMScoreAdj is what kubelet expects for infra containers: the
// last thing the OOM killer should pick.
const sandboxOOMScoreAdj = -998

// cleanupTimeout bounds the undo of a failed RunPodSandbox, which runs
// even when the caller has given up.
const cleanupTimeout = 2 * time.Minute

// RunPodSandbox admits the request (valid, a known runtime handler, its
// name reserved, no sandbox of that name already), chooses the sandbox's
// mode, and has the mode's controller make it (sandbox_controller.go).
// Every failure after something exists undoes what was done: network,
// container, namespaces and checkpoint. In every mode the pod's sysctls
// are in its namespaces before the CNI ADD (sandbox_sysctls.go).
func (ds *DockerService) RunPodSandbox(ctx context.Context, r *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	cfg := r.GetConfig()
	if err := dockerspec.ValidateRunPodSandbox(r); err != nil {
		return nil, err
	}
	if err := ds.checkRuntimeHandler(ctx, r.GetRuntimeHandler()); err != nil {
		return nil, err
	}
	md := cfg.GetMetadata()
	name := labelcodec.SandboxName(md)
	release, err := ds.reserveName(name)
	if err != nil {
		return nil, err
	}
	defer release()

	t := newStepTimer(ctx, "RunPodSandbox", "pod", klog.KRef(md.Namespace, md.Name))
	// A sandbox with this name may be one without a container, which
	// Docker's name check cannot see (sandbox_pauseless.go).
	if resp, err, found := ds.existingSandboxByName(ctx, name, md); found {
		return resp, err
	}
	ctl, why, err := ds.chooseSandboxController(ctx, cfg, r.GetRuntimeHandler())
	if err != nil {
		return nil, err
	}
	// Before anything is made: a parent Docker cannot take fails the pod
	// here, with nothing to undo.
	cgroupParent, err := ds.dockerCgroupParent(ctx, cfg.GetLinux().GetCgroupParent())
	if err != nil {
		return nil, err
	}
	// A pod user namespace's ids are its own: no other pod's may overlap.
	releaseIDs, err := ds.userns.claims.claim(name, cfg, ds.usernsRangesInUse)
	if err != nil {
		return nil, err
	}
	defer releaseIDs()
	t.kv = append(t.kv, "mode", ctl.mode(), "modeReason", why)
	return ctl.run(ctx, &sandboxRequest{cfg: cfg, handler: r.GetRuntimeHandler(), name: name, cgroupParent: cgroupParent, timer: t, mode: ctl.mode(), modeReason: why})
}

// newSandboxCheckpoint is the first checkpoint of a sandbox being made,
// its network setup "pending": it is not set up until the checkpoint says
// so, and a daemon killed before that finds "pending" at start-up, never
// reports the sandbox READY and releases what the ADD took.
func newSandboxCheckpoint(id string, req *sandboxRequest, netns string) *checkpoint.PodSandbox {
	cfg := req.cfg
	md := cfg.GetMetadata()
	return &checkpoint.PodSandbox{
		Version:      checkpoint.CurrentVersion,
		SandboxID:    id,
		Name:         md.GetName(),
		Namespace:    md.GetNamespace(),
		UID:          md.GetUid(),
		Attempt:      md.GetAttempt(),
		PortMappings: checkpointPortMappings(cfg.GetPortMappings()),
		CreatedAt:    time.Now().UnixNano(),
		Setup:        checkpoint.SetupPending,
		NetNS:        netns,
		Mode:         req.mode,
		ModeReason:   req.modeReason,
	}
}

// setUpSandboxNetwork asks the plugin to attach the sandbox (the plugin
// finds its netns through networkHost: the pinned one, or the running
// infra container's), and records the IPs of
// the ADD result, both families, in the checkpoint: status then never has
// to enter the netns, and the IPs survive a netshim restart. The CNI
// plugin answers GetPodNetworkStatus from the result libcni cached for
// this ADD; the netns is only its fallback.
func (ds *DockerService) setUpSandboxNetwork(ctx context.Context, cp *checkpoint.PodSandbox, cfg *runtimeapi.PodSandboxConfig) error {
	pod := podRef(cp)
	var opts network.SetUpOptions
	if dns := cfg.GetDnsConfig(); dns != nil {
		opts.DNS = &network.DNSConfig{Servers: dns.Servers, Searches: dns.Searches, Options: dns.Options}
	}
	if err := ds.network.SetUpPod(ctx, pod, cfg.GetAnnotations(), opts); err != nil {
		return err
	}
	st, err := ds.network.GetPodNetworkStatus(ctx, pod)
	if err != nil {
		return err
	}
	updated := *cp
	updated.IPs = orderPodIPs(st.IPs)
	updated.NetworkResult = st.Result
	updated.Setup = checkpoint.SetupReady
	return ds.putCheckpoint(&updated)
}

// orderPodIPs returns the pod's addresses as strings, primary first: the
// first IPv4 address unless there is none, then the other addresses in the
// plugin's order. Duplicates and nils are dropped.
func orderPodIPs(ips []net.IP) []string {
	var v4, v6 []string
	seen := map[string]bool{}
	for _, ip := range ips {
		if ip == nil {
			continue
		}
		s := ip.String()
		if seen[s] {
			continue
		}
		seen[s] = true
		if ip.To4() != nil {
			v4 = append(v4, s)
		} else {
			v6 = append(v6, s)
		}
	}
	return append(v4, v6...)
}

// sandboxUndo is the undo of a failed RunPodSandbox under way, which each
// mode's controller runs with the steps every mode shares. It runs on a
// context detached from the caller's: a kubelet that timed out must not
// leave a half-made pod behind.
type sandboxUndo struct {
	ds     *DockerService
	ctx    context.Context
	cancel context.CancelFunc
	logger klog.Logger
	log    []any
	cp     *checkpoint.PodSandbox
}

func (ds *DockerService) startUndo(ctx context.Context, cp *checkpoint.PodSandbox) *sandboxUndo {
	u := &sandboxUndo{ds: ds, logger: klog.FromContext(ctx), cp: cp,
		log: []any{"pod", klog.KRef(cp.Namespace, cp.Name), "podSandboxID", cp.SandboxID}}
	u.ctx, u.cancel = context.WithTimeout(backgroundCtx(ctx), cleanupTimeout)
	return u
}

// tearDownNetwork runs the CNI DEL of an ADD that ran or was attempted.
// On failure (logged) the checkpoint must stay: it is what a later
// StopPodSandbox or the start-up retry needs to free the IP.
func (u *sandboxUndo) tearDownNetwork() bool {
	if err := u.ds.network.TearDownPod(u.ctx, podRef(u.cp)); err != nil {
		u.logger.Error(err, "Failed to tear down the network of a sandbox whose setup failed; keeping its checkpoint for a later retry", u.log...)
		return false
	}
	return true
}

// removeFiles removes the sandbox's pinned namespaces, then its
// checkpoint. kept is true when the namespaces could not be removed: the
// checkpoint, which names them, stays for RemovePodSandbox to retry.
// removed is true when the checkpoint is gone.
func (u *sandboxUndo) removeFiles() (kept, removed bool) {
	if err := u.ds.releasePinnedNamespaces(u.cp); err != nil {
		u.logger.Error(err, "Failed to remove the pinned netns of a failed sandbox; keeping its checkpoint so that RemovePodSandbox retries", u.log...)
		return true, false
	}
	if err := u.ds.removeCheckpoint(u.cp.SandboxID); err != nil {
		u.logger.Error(err, "Failed to remove checkpoint of a failed sandbox", u.log...)
		return false, false
	}
	return false, true
}

// existingSandbox answers a RunPodSandbox whose name Docker already knows.
// A retry of a request that succeeded gets the same sandbox back; anything
// else is a conflict the caller must resolve by removing the old one.
func (ds *DockerService) existingSandbox(ctx context.Context, name string, md *runtimeapi.PodSandboxMetadata) (*runtimeapi.RunPodSandboxResponse, error) {
	c, err := ds.engine.ContainerInspect(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("a container named %s exists but cannot be inspected: %w", name, err)
	}
	if c.Config == nil || c.Config.Labels[labelcodec.LabelType] != labelcodec.TypeSandbox {
		return nil, crirpc.WithCode(codes.AlreadyExists, fmt.Errorf("a container named %s (%s) exists that netshim does not own; remove it first", name, c.ID))
	}
	if c.State != nil && c.State.Running && ds.sandboxReady(c.ID) {
		klog.FromContext(ctx).Info("RunPodSandbox for an existing ready sandbox: returning it", "pod", klog.KRef(md.Namespace, md.Name), "attempt", md.Attempt, "podSandboxID", c.ID)
		return &runtimeapi.RunPodSandboxResponse{PodSandboxId: c.ID}, nil
	}
	return nil, crirpc.WithCode(codes.AlreadyExists, fmt.Errorf("pod sandbox %s attempt %d already exists as %s and is not ready; stop and remove it before running it again", klog.KRef(md.Namespace, md.Name), md.Attempt, c.ID))
}

// reserveName refuses a second concurrent RunPodSandbox for the same pod
// and attempt: the first one decides what exists.
func (ds *DockerService) reserveName(name string) (func(), error) {
	release, ok := ds.pods.Reserve(name)
	if !ok {
		return nil, crirpc.WithCode(codes.Aborted, fmt.Errorf("pod sandbox %s is already being created; retry later", name))
	}
	return release, nil
}

func checkpointPortMappings(pms []*runtimeapi.PortMapping) []checkpoint.PortMapping {
	var out []checkpoint.PortMapping
	for _, pm := range pms {
		out = append(out, checkpoint.PortMapping{
			Protocol:      dockerspec.ProtocolName(pm.Protocol),
			ContainerPort: pm.ContainerPort,
			HostPort:      pm.HostPort,
			HostIP:        pm.HostIp,
		})
	}
	return out
}

func podRef(cp *checkpoint.PodSandbox) network.PodRef {
	return network.PodRef{Namespace: cp.Namespace, Name: cp.Name, UID: cp.UID, SandboxID: cp.SandboxID}
}

// stepTimer logs how long each step of an operation took, at -v=4.
type stepTimer struct {
	log   klog.Logger // the request's, so the steps line names its RPC and ids
	op    string
	kv    []any
	start time.Time
	last  time.Time
	steps []any
}

func newStepTimer(ctx context.Context, op string, kv ...any) *stepTimer {
	now := time.Now()
	return &stepTimer{log: klog.FromContext(ctx), op: op, kv: kv, start: now, last: now}
}

func (t *stepTimer) step(name string) {
	now := time.Now()
	t.steps = append(t.steps, name, now.Sub(t.last))
	t.last = now
}

func (t *stepTimer) done(kv ...any) {
	if !t.log.V(4).Enabled() {
		return
	}
	all := append(append(append([]any{}, t.kv...), kv...), t.steps...)
	all = append(all, "total", time.Since(t.start))
	t.log.V(4).Info(t.op+" steps", all...)
}
