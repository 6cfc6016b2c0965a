//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netshim/netshim/pkg/podns"
)

// TestPauselessPrototype is the engine-level prototype of a sandbox with
// no pause container (docs/design/sandbox-modes.md): netshim's pinned
// net, IPC and UTS namespaces, and two app containers that join them
// through the real netshim-oci on the real engine: both run in the pinned
// namespaces, with the pod's hostname, and neither they nor an exec in
// them sees netshim's marker. It does not go through CRI: the CRI
// integration is the design's open part.
func TestPauselessPrototype(t *testing.T) {
	requireConfig(t)
	pinner := podns.NewPinner(filepath.Join(t.TempDir(), "netns"))
	paths, err := pinner.Pin("pod-proto", podns.Net, podns.IPC, podns.UTS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range paths {
			_ = pinner.Remove(p)
		}
	})
	var ids []string
	t.Cleanup(func() {
		for _, id := range ids {
			_, _ = runCmd("docker", "rm", "-f", id)
		}
	})
	run := func(name string) string {
		out := mustRun(t, "docker", "run", "-d", "--runtime", "netshim-oci",
			"--network", "none", "--ipc", "private", "--hostname", "proto-pod",
			"--label", "netshim.io/prototype=1", "--name", fmt.Sprintf("nse2e-proto-%s-%d", name, len(ids)),
			"-e", paths.Env(), workloadImage, "sleep", "300")
		id := strings.TrimSpace(out)
		ids = append(ids, id)
		return id
	}
	a, b := run("a"), run("b")
	for kind, path := range paths {
		want := fmt.Sprintf("%s:[%d]", kind, nsInode(t, path))
		for _, id := range []string{a, b} {
			got := strings.TrimSpace(mustRun(t, "docker", "exec", id, "readlink", "/proc/1/ns/"+string(kind)))
			if got != want {
				t.Errorf("container %.12s: %s namespace %s, want the pinned %s", id, kind, got, want)
			}
		}
	}
	if h := strings.TrimSpace(mustRun(t, "docker", "exec", b, "hostname")); h != "proto-pod" {
		t.Errorf("hostname in b = %q, want proto-pod", h)
	}
	// docker exec builds the exec's environment from the container's:
	// the wrapper takes the marker out of it too.
	env := strings.TrimSpace(mustRun(t, "docker", "exec", b, "env"))
	if strings.Contains(env, podns.EnvKey) {
		t.Errorf("the container sees netshim's marker: %s", env)
	}
	if out := strings.TrimSpace(mustRun(t, "docker", "inspect", "--format", "{{.HostConfig.Runtime}} {{.HostConfig.NetworkMode}}", a)); out != "netshim-oci none" {
		t.Errorf("docker inspect: %q", out)
	}
}
