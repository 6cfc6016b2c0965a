//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// `netshim engine register` on a real engine whose configuration file it
// edits: the wrapper is merged into the file (its other keys kept), dockerd
// reloads it on SIGHUP, and netshim then pins pods' namespaces through
// it; a second run changes nothing; `unregister` is refused while a
// pod's container runs under the wrapper, and takes it out once none does.
func TestEngineRegisterCommand(t *testing.T) {
	requireWorkloadImage(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(file, []byte(`{"max-concurrent-uploads": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	d := harness.StartPrivateDockerd(t, harness.WithImages(pauseImage, workloadImage), harness.WithoutOCIWrapper(), harness.WithDockerdArgs("--config-file", file))
	// pinned, whatever NETSHIM_SANDBOX_NETNS says: it looks for the
	// wrapper again when a pod asks for it (auto rereads the engine's
	// runtimes only every 30 s).
	e := newEnv(t, envOptions{dockerEndpoint: d.Endpoint(), extraFlags: []string{"--sandbox-netns=pinned"}})
	e.start()
	wrapper := harness.OCIWrapperBin()
	if wrapper == "" {
		t.Fatal("no netshim-oci beside NETSHIM_BIN (make build makes both)")
	}
	engineCmd := func(verb string) (string, error) {
		return runCmd(e.cfg.netshim, "engine", verb, "--daemon-json", file, "--wrapper", wrapper, "--netns-dir", e.ns.NetNSDir,
			"--docker-endpoint", d.Endpoint(), "--docker-pidfile", filepath.Join(d.Dir, "docker.pid"))
	}
	runtimes := func() map[string]struct{ Path string } {
		var rts map[string]struct{ Path string }
		out := mustRun(t, "docker", "-H", d.Endpoint(), "info", "--format", "{{json .Runtimes}}")
		if err := json.Unmarshal([]byte(out), &rts); err != nil {
			t.Fatalf("docker info runtimes %q: %v", out, err)
		}
		return rts
	}
	if _, ok := runtimes()["netshim-oci"]; ok {
		t.Fatal("the engine has the wrapper before register")
	}
	if out, err := engineCmd("register"); err != nil {
		t.Fatalf("netshim engine register: %v\n%s", err, out)
	}
	if rt, ok := runtimes()["netshim-oci"]; !ok || rt.Path != wrapper {
		t.Fatalf("after register: docker info runtimes %v, want netshim-oci at %s", runtimes(), wrapper)
	}
	content, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(content), `"max-concurrent-uploads": 3`) || !strings.Contains(string(content), "--netshim-netns-dir="+e.ns.NetNSDir) {
		t.Errorf("daemon.json after register:\n%s", content)
	}
	if out, err := engineCmd("register"); err != nil || !strings.Contains(out, "already") {
		t.Errorf("a second register: %v\n%s", err, out)
	}
	// netshim finds the wrapper and pins the pod's netns, its pause
	// container under the wrapper (a pod sharing its PID namespace keeps
	// one in every mode).
	// netshim reads the engine's runtimes again at most once a second
	// for pods that ask for the wrapper; kubelet retries as this does.
	var podID string
	var runErr error
	if !harness.Eventually(startDeadline, func() bool {
		ctx, cancel := e.rpcCtx()
		defer cancel()
		resp, err := e.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: e.podConfig("reg", withPauseContainer)})
		podID, runErr = resp.GetPodSandboxId(), err
		return err == nil
	}) {
		t.Fatalf("RunPodSandbox once the wrapper is registered: %v\n%s", runErr, e.logTail(20))
	}
	if cp := e.readCheckpoint(podID); cp.Data.NetNS == "" {
		t.Errorf("the pod's checkpoint names no pinned netns: the wrapper was not used")
	}
	if out, err := engineCmd("unregister"); err == nil || !strings.Contains(out+err.Error(), "run with runtime netshim-oci") {
		t.Errorf("unregister with a pod's container under the wrapper: %v\n%s", err, out)
	}
	if _, ok := runtimes()["netshim-oci"]; !ok {
		t.Error("the refused unregister took the wrapper out")
	}
	e.mustCrictl("stopp", podID)
	e.mustCrictl("rmp", podID)
	if out, err := engineCmd("unregister"); err != nil {
		t.Fatalf("netshim engine unregister: %v\n%s", err, out)
	}
	if _, ok := runtimes()["netshim-oci"]; ok {
		t.Error("the engine still has the wrapper after unregister")
	}
	if content, _ := os.ReadFile(file); strings.Contains(string(content), "netshim-oci") || !strings.Contains(string(content), "max-concurrent-uploads") {
		t.Errorf("daemon.json after unregister:\n%s", content)
	}
}
