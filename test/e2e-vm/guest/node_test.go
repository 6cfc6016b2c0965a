package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kubelet runs with its defaults for a cgroup v2 systemd node: nothing
// about the cgroup driver or cgroup v1.
func TestKubeletConfigKeepsTheDefaults(t *testing.T) {
	conf := kubeletConfig(nil)
	for _, bad := range []string{"cgroupDriver", "failCgroupV1", "featureGates"} {
		if strings.Contains(conf, bad) {
			t.Errorf("kubelet config sets %s:\n%s", bad, conf)
		}
	}
	for _, want := range []string{"containerRuntimeEndpoint: unix:///run/netshim/netshim.sock", "staticPodPath: /etc/kubernetes/manifests"} {
		if !strings.Contains(conf, want) {
			t.Errorf("kubelet config lacks %q:\n%s", want, conf)
		}
	}
	if conf := kubeletConfig(map[string]bool{criStatsGate: true}); !strings.Contains(conf, "featureGates:\n  PodAndContainerStatsFromCRI: true\n") {
		t.Errorf("kubelet config with the CRI stats gate:\n%s", conf)
	}
}

// The package's /etc/default/netshim keeps its comments; only the
// NETSHIM_OPTS line changes.
func TestWithNetshimOpts(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "default", "netshim"))
	if err != nil {
		t.Fatal(err)
	}
	got := withNetshimOpts(string(b), "--sandbox-netns=pauseless")
	if !strings.Contains(got, "\nNETSHIM_OPTS=\"--sandbox-netns=pauseless\"\n") || strings.Count(got, "\nNETSHIM_OPTS=") != 1 {
		t.Errorf("NETSHIM_OPTS not set once:\n%s", got)
	}
	if strings.Count(got, "\n#") != strings.Count(string(b), "\n#") {
		t.Error("comments lost")
	}
	if got := withNetshimOpts("# none\n", "-v=2"); got != "# none\nNETSHIM_OPTS=\"-v=2\"\n" {
		t.Errorf("without a NETSHIM_OPTS line: %q", got)
	}
}

// Every static pod the checks name has a manifest, under its file name.
func TestStaticPods(t *testing.T) {
	for _, name := range append(runningPods, "oom") {
		body, ok := staticPods[name+".yaml"]
		if !ok || !strings.Contains(body, "\n  name: "+name+"\n") {
			t.Errorf("no manifest for pod %s", name)
		}
		if !strings.Contains(body, "imagePullPolicy: Never") {
			t.Errorf("pod %s may pull: the node has no registry", name)
		}
	}
}
