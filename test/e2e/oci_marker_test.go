//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/podns"
	"github.com/netshim/netshim/test/harness"
)

// bindNodeNetns bind-mounts this process's network namespace, the node's,
// on a file of its own: what /var/run/docker/netns/default or /run/netns/X
// is on a node. It is unmounted when the test ends.
func bindNodeNetns(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nse2e-nodens")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "node")
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/proc/self/ns/net", path, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting the node's netns: %v", err)
	}
	t.Cleanup(func() {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		_ = os.RemoveAll(dir)
	})
	return path
}

// markedImage commits the workload image, in the engine docker reaches
// with args, as a new image whose ENV names the path as the pod's netns,
// the way an image's author could; removed when the test ends.
func markedImage(t *testing.T, docker func(args ...string) (string, error), tag, path string) string {
	t.Helper()
	id, err := docker("create", workloadImage, "true")
	if err != nil {
		t.Fatalf("docker create: %v: %s", err, id)
	}
	id = strings.TrimSpace(id)
	defer func() { _, _ = docker("rm", "-f", id) }()
	if out, err := docker("commit", "--change", "ENV "+podns.EnvKey+"=net="+path, id, tag); err != nil {
		t.Fatalf("docker commit: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = docker("rmi", "-f", tag) })
	return tag
}

func hostDocker(args ...string) (string, error) { return runCmd("docker", args...) }

// TestImageCannotNameANamespace: an image whose ENV names the node's
// network namespace as netshim's marker does never put a container there.
//   - On an engine whose default runtime is netshim's OCI wrapper (an easy
//     misreading of "register the wrapper"): a container of such an image,
//     not made by netshim, fails to start, naming why, while the same
//     image without the ENV runs; netshim refuses every pod, in every
//     mode, with FailedPrecondition naming the fix, and creates nothing.
//   - On the engine as the README registers the wrapper, in every sandbox
//     mode: the image's container runs in its pod's netns, not the node's.
func TestImageCannotNameANamespace(t *testing.T) {
	requireWorkloadImage(t)
	nodeNS := bindNodeNetns(t)
	nodeIno := fmt.Sprintf("net:[%d]", nsInode(t, "/proc/self/ns/net"))

	t.Run("wrapper as the default runtime", func(t *testing.T) {
		d := harness.StartPrivateDockerd(t, harness.WithImages(pauseImage, workloadImage),
			harness.WithDockerdArgs("--default-runtime", "netshim-oci"))
		evil := markedImage(t, d.Docker, "netshim.local/e2e-marked:default-runtime", nodeNS)
		if out, err := d.Docker("run", "--rm", "--network", "none", workloadImage, "true"); err != nil {
			t.Fatalf("an image without the marker does not run under the wrapper: %v: %s", err, out)
		}
		out, err := d.Docker("run", "--rm", "--network", "none", evil, "readlink", "/proc/self/ns/net")
		if err == nil || !strings.Contains(out, "no netshim signature") {
			t.Fatalf("the marked image ran (err %v): %q; want a refusal naming the missing signature", err, out)
		}
		for _, mode := range []string{"docker", "pinned", "pauseless"} {
			e := newEnv(t, envOptions{dockerEndpoint: d.Endpoint(), extraFlags: []string{"--sandbox-netns=" + mode}})
			e.start()
			e.mustCrictl("info") // Status, as kubelet calls it first
			ctx, cancel := e.rpcCtx()
			_, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: e.podConfig("marked-" + mode)})
			cancel()
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `register it only as runtime "netshim-oci"`) {
				t.Errorf("--sandbox-netns=%s: RunPodSandbox: %v; want FailedPrecondition naming the fix", mode, err)
			}
			if ids := e.listPodIDs(); len(ids) != 0 {
				t.Errorf("--sandbox-netns=%s: sandboxes %v after the refusal", mode, ids)
			}
			if out, _ := d.Docker("ps", "-aq", "--filter", "label=netshim.io/type"); strings.TrimSpace(out) != "" {
				t.Errorf("--sandbox-netns=%s: containers %q after the refusal", mode, out)
			}
		}
	})

	evil := markedImage(t, hostDocker, "netshim.local/e2e-marked:registered", nodeNS)
	for _, mode := range []string{"docker", "pinned", "pauseless"} {
		t.Run("registered, "+mode, func(t *testing.T) {
			e := newEnv(t, envOptions{extraFlags: []string{"--sandbox-netns=" + mode}})
			e.start()
			podID, podCfg := e.runPodWith("marked", kubeletPod)
			cfg := harness.Container("marked", evil, harness.WithCommand("sleep", "300"))
			ctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
			defer cancel()
			resp, err := e.client.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
			if err != nil {
				t.Fatalf("CreateContainer: %v", err)
			}
			id := resp.ContainerId
			t.Cleanup(func() { _, _ = runCmd("docker", "rm", "-f", id) })
			if _, err := e.client.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
				t.Fatalf("StartContainer: %v\n%s", err, e.logTail(20))
			}
			got := dockerExec(t, id, "readlink", "/proc/1/ns/net")
			if got == nodeIno {
				t.Fatalf("the marked image's container runs in the node's netns %s", got)
			}
			st := e.inspectp(podID)
			if st.Network == nil || st.Network.IP == "" {
				t.Fatalf("pod %s has no IP: %+v", podID, st)
			}
			pid := strings.TrimSpace(mustRun(t, "docker", "inspect", "--format", "{{.State.Pid}}", id))
			if addrs := mustRun(t, "nsenter", "--net=/proc/"+pid+"/ns/net", "ip", "-o", "-4", "addr", "show"); !strings.Contains(addrs, " "+st.Network.IP+"/") {
				t.Errorf("the container's netns %s lacks the pod's IP %s: %s", got, st.Network.IP, addrs)
			}
		})
	}
}
