package dockerservice

import (
	"context"
	"encoding/json"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kubeadm's preflight (cmd/kubeadm/app/util/runtime, SandboxImage) asks for a
// verbose Status and decodes info["config"] into exactly this struct; it
// warns when the image differs from the pause image it deploys, and cannot
// compare at all when the key or the field is missing.
func TestVerboseStatusNamesTheSandboxImageAsKubeadmReadsIt(t *testing.T) {
	const image = "10.0.0.1:5000/k8s/pause:3.10.2"
	e := newTestEnv(t, func(c *Config) { c.PodInfraImage = image })
	resp, err := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := resp.GetInfo()["config"]
	if !ok {
		t.Fatalf("verbose Status info has no \"config\": %v", resp.GetInfo())
	}
	var c struct {
		SandboxImage string `json:"sandboxImage,omitempty"`
	}
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatalf("info config %q: %v", raw, err)
	}
	if c.SandboxImage != image {
		t.Errorf("config.sandboxImage = %q, want %q", c.SandboxImage, image)
	}
}

func TestRuntimeVersion(t *testing.T) {
	for _, c := range []struct{ engine, netshim, want string }{
		{"29.0.0-moby-2.0.0-beta.24", "1.2.0", "29.0.0-moby-2.0.0-beta.24+netshim.1.2.0"},
		{"29.0.0", "0.0~git20261206.66e91fe+dirty", "29.0.0+netshim.0.0-git20261206.66e91fe-dirty"},
		{"20.10.24+dfsg1", "1.2.0", "20.10.24+dfsg1.netshim.1.2.0"},
		{"29.0.0", "dev", "29.0.0+netshim.dev"},
		{"29.0.0", "", "29.0.0"},
		{"", "1.2.0", ""},
	} {
		if got := runtimeVersion(c.engine, c.netshim); got != c.want {
			t.Errorf("runtimeVersion(%q, %q) = %q, want %q", c.engine, c.netshim, got, c.want)
		}
	}
}
