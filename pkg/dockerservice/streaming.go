package dockerservice

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// StreamingServer hands out the URLs of exec, attach and port-forward
// sessions (pkg/streaming's Server implements it). The RPCs below check
// the request against the state index, then let it validate and cache the
// request.
type StreamingServer interface {
	GetExec(*runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	GetAttach(*runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	GetPortForward(*runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
}

// SetStreamingServer installs the streaming server. Call it before the
// service is registered and serving; until then the three RPCs answer
// Unavailable.
func (ds *DockerService) SetStreamingServer(s StreamingServer) { ds.streaming = s }

// Exec returns the URL of a streaming exec session in a running container.
func (ds *DockerService) Exec(_ context.Context, r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if len(r.GetCmd()) == 0 {
		return nil, crirpc.InvalidArgf("exec in container %s: cmd is required", r.GetContainerId())
	}
	if err := checkStdio(r.GetStdin(), r.GetStdout(), r.GetStderr(), r.GetTty()); err != nil {
		return nil, err
	}
	rec, err := ds.runningContainerForStream("exec in", r.GetContainerId())
	if err != nil {
		return nil, err
	}
	srv, err := ds.streamingServer()
	if err != nil {
		return nil, err
	}
	// The session runs on the full ID even if the client gave a prefix.
	req := proto.CloneOf(r)
	req.ContainerId = rec.ID
	return srv.GetExec(req)
}

// Attach returns the URL of a streaming attach session to a running
// container's main process.
func (ds *DockerService) Attach(_ context.Context, r *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if err := checkStdio(r.GetStdin(), r.GetStdout(), r.GetStderr(), r.GetTty()); err != nil {
		return nil, err
	}
	rec, err := ds.runningContainerForStream("attach to", r.GetContainerId())
	if err != nil {
		return nil, err
	}
	srv, err := ds.streamingServer()
	if err != nil {
		return nil, err
	}
	req := proto.CloneOf(r)
	req.ContainerId = rec.ID
	return srv.GetAttach(req)
}

// PortForward returns the URL of a port-forward session to a ready pod
// sandbox. The ports are connected on the pod's loopback, inside its
// network namespace.
func (ds *DockerService) PortForward(_ context.Context, r *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	id := r.GetPodSandboxId()
	if err := dockerspec.ValidateID("pod sandbox", "pod_sandbox_id", id); err != nil {
		return nil, fmt.Errorf("port-forward: %w", err)
	}
	for _, p := range r.GetPort() {
		if p <= 0 || p > 65535 {
			return nil, crirpc.InvalidArgf("port-forward to pod sandbox %s: invalid port %d", id, p)
		}
	}
	if err := ds.requireSynced(); err != nil {
		return nil, err
	}
	rec, err := ds.store().Resolve(id)
	if err != nil {
		return nil, crirpc.InvalidArgf("port-forward: %v", err)
	}
	if rec == nil {
		return nil, crirpc.NotFoundf("port-forward: pod sandbox %s not found", id)
	}
	if rec.Kind != store.KindSandbox {
		return nil, crirpc.NotFoundf("port-forward: %s is a container, not a pod sandbox", id)
	}
	if st := ds.sandboxState(rec.ID, rec.Running()); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("port-forward: pod sandbox %s is not ready (its infra container is %s)", rec.ID, stateWord(rec)))
	}
	srv, err := ds.streamingServer()
	if err != nil {
		return nil, err
	}
	req := proto.CloneOf(r)
	req.PodSandboxId = rec.ID
	return srv.GetPortForward(req)
}

// PodNetNS returns the network namespace path of a running pod sandbox,
// from the state index (no Docker call), once its infra container's pid is
// checked to still be that container's (see sandboxNetNS). It is the
// streaming server's way into a pod for port-forward.
func (ds *DockerService) PodNetNS(_ context.Context, sandboxID string) (string, error) {
	rec, ok := ds.store().Get(sandboxID)
	if !ok || rec.Kind != store.KindSandbox {
		return "", crirpc.NotFoundf("pod sandbox %s not found", sandboxID)
	}
	if !rec.Running() {
		return "", errSandboxNotRunning(sandboxID)
	}
	return ds.controllerOf(rec, nil).podNetNS(rec)
}

func errSandboxNotRunning(id string) error {
	return crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("pod sandbox %s is not running", id))
}

// runningContainerForStream finds a workload container by ID or unique
// prefix and checks that it runs.
func (ds *DockerService) runningContainerForStream(what, id string) (*store.Record, error) {
	if err := dockerspec.ValidateID("container", "container_id", id); err != nil {
		return nil, fmt.Errorf("%s container: %w", what, err)
	}
	if err := ds.requireSynced(); err != nil {
		return nil, err
	}
	rec, err := ds.store().Resolve(id)
	if err != nil {
		return nil, crirpc.InvalidArgf("%s container: %v", what, err)
	}
	if rec == nil {
		return nil, crirpc.NotFoundf("%s container: container %s not found", what, id)
	}
	if rec.Kind != store.KindContainer {
		return nil, crirpc.NotFoundf("%s container: %s is a pod sandbox, not a container", what, id)
	}
	if !rec.Running() {
		return nil, crirpc.WithCode(codes.FailedPrecondition, fmt.Errorf("%s container %s: container is not running (%s)", what, rec.ID, stateWord(rec)))
	}
	return rec, nil
}

// checkStdio applies the CRI's rules on the requested streams.
func checkStdio(stdin, stdout, stderr, tty bool) error {
	if !stdin && !stdout && !stderr {
		return crirpc.InvalidArgf("one of stdin, stdout and stderr must be requested")
	}
	if tty && stderr {
		return crirpc.InvalidArgf("tty and stderr cannot both be requested: a terminal has a single output stream")
	}
	return nil
}

func (ds *DockerService) streamingServer() (StreamingServer, error) {
	if ds.streaming == nil {
		return nil, crirpc.WithCode(codes.Unavailable, errors.New("netshim's streaming server is not running"))
	}
	return ds.streaming, nil
}

func stateWord(r *store.Record) string {
	switch r.State {
	case store.StateCreated:
		return "created, not started"
	case store.StateRunning:
		return "running"
	case store.StateExited:
		return fmt.Sprintf("exited with code %d", r.ExitCode)
	}
	return "in an unknown state"
}
