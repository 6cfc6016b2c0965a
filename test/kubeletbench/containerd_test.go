package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/test/harness"
)

// tomlKeys reads the simple TOML the bench writes (tables, key = value,
// comments) into "table.key" -> value, failing on any other line or a key
// given twice.
func tomlKeys(t *testing.T, text string) map[string]string {
	t.Helper()
	out := map[string]string{}
	table := ""
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			table = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, " = ")
			if !ok {
				t.Fatalf("line %d: %q is neither a table nor key = value", n+1, line)
			}
			key := k
			if table != "" {
				key = table + "." + k
			}
			if _, dup := out[key]; dup {
				t.Fatalf("line %d: %s given twice", n+1, key)
			}
			out[key] = v
		}
	}
	return out
}

func TestContainerdConfigRender(t *testing.T) {
	c := newContainerdConfig("/tmp/nskbench.123/containerd-r1", "/w/_output/docker29/bin", "/usr/lib/cni", "registry.k8s.io/pause:3.10")
	text, err := c.render()
	if err != nil {
		t.Fatal(err)
	}
	keys := tomlKeys(t, text)
	const (
		images  = `plugins."io.containerd.cri.v1.images"`
		rt      = `plugins."io.containerd.cri.v1.runtime"`
		runc    = rt + `.containerd.runtimes.runc`
		dir     = `"/tmp/nskbench.123/containerd-r1/containerd`
		binDir  = `"/w/_output/docker29/bin`
		cniConf = dir + `/net.d"`
	)
	for k, want := range map[string]string{
		"version":                               "3",
		"root":                                  dir + `/root"`,
		"state":                                 dir + `/state"`,
		"grpc.address":                          dir + `/containerd.sock"`,
		"ttrpc.address":                         dir + `/containerd.sock.ttrpc"`,
		images + ".snapshotter":                 `"overlayfs"`,
		images + ".pinned_images.sandbox":       `"registry.k8s.io/pause:3.10"`,
		rt + ".restrict_oom_score_adj":          "true",
		rt + ".netns_mounts_under_state_dir":    "true",
		rt + ".containerd.default_runtime_name": `"runc"`,
		runc + ".runtime_type":                  `"io.containerd.runc.v2"`,
		runc + ".runtime_path":                  binDir + `/containerd-shim-runc-v2"`,
		runc + ".options.BinaryName":            binDir + `/runc"`,
		runc + ".options.Root":                  dir + `/state/runc"`,
		runc + ".options.SystemdCgroup":         "false",
		rt + ".cni.bin_dirs":                    `["/usr/lib/cni"]`,
		rt + ".cni.conf_dir":                    cniConf,
		rt + ".cni.max_conf_num":                "1",
		`plugins."io.containerd.shim.v1.manager".socket_dir`: `"/tmp/nskbench.123/containerd-r1/s"`,
		`plugins."io.containerd.nri.v1.nri".socket_path`:     dir + `/state/nri.sock"`,
		`plugins."io.containerd.internal.v1.opt".path`:       dir + `/root/opt"`,
	} {
		if got, ok := keys[k]; !ok || got != want {
			t.Errorf("%s = %q (set: %v), want %q", k, got, ok, want)
		}
	}
	// Nothing of the CRI plugins is disabled (hack/docker29.sh's engine
	// turns them off; here they are the point).
	if strings.Contains(text, "disabled_plugins") {
		t.Errorf("config disables plugins:\n%s", text)
	}
	// Every path containerd is given is under the run's dir.
	for k, v := range keys {
		if strings.HasPrefix(v, `"/`) && !strings.HasPrefix(v, `"/tmp/nskbench.123/containerd-r1/`) &&
			!strings.HasPrefix(v, binDir) {
			t.Errorf("%s = %s is outside the run's dir", k, v)
		}
	}
}

func TestContainerdConfigRefuses(t *testing.T) {
	long := newContainerdConfig("/tmp/a-rather-long-temporary-directory/containerd-r1", "/b", "/usr/lib/cni", "p:1")
	if _, err := long.render(); err == nil || !strings.Contains(err.Error(), "TMPDIR") {
		t.Errorf("a %d-byte shim socket dir: err = %v, want a TMPDIR hint", len(long.shimSocketDir), err)
	}
	quoted := newContainerdConfig("/tmp/x", "/b", "/usr/lib/cni", `p"ause`)
	if _, err := quoted.render(); err == nil {
		t.Error("a quote in the pause image: no error")
	}
	for _, s := range []string{`a\b`, "a\nb", "a\x7fb"} {
		if _, err := tomlString(s); err == nil {
			t.Errorf("tomlString(%q): no error", s)
		}
	}
}

// The conflist containerd gets is the file netshim's runs get, under the
// harness's file name.
func TestWriteConflist(t *testing.T) {
	dir := t.TempDir()
	w := &world{ipamDir: "/tmp/nskbench.1/ipam"}
	if err := writeConflist(dir, w.cniOptions()); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "10-"+networkName+".conflist"))
	if err != nil {
		t.Fatal(err)
	}
	want := harness.WriteConflist(t, t.TempDir(), w.cniOptions()...)
	wantData, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(want) != "10-"+networkName+".conflist" || !bytes.Equal(got, wantData) {
		t.Errorf("conflist %s differs from the harness's %s:\n%s\n%s", dir, want, got, wantData)
	}
	for _, s := range []string{`"bridge": "` + bridgeName + `"`, `"subnet": "` + subnetCIDR + `"`, `"dataDir": "/tmp/nskbench.1/ipam"`, `"type": "portmap"`, `"type": "firewall"`} {
		if !bytes.Contains(got, []byte(s)) {
			t.Errorf("conflist lacks %s:\n%s", s, got)
		}
	}
}

func TestConditionsReady(t *testing.T) {
	cond := func(typ string, ok bool) *runtimeapi.RuntimeCondition {
		return &runtimeapi.RuntimeCondition{Type: typ, Status: ok, Reason: "R", Message: "m"}
	}
	if ok, msg := conditionsReady([]*runtimeapi.RuntimeCondition{cond("RuntimeReady", true), cond("NetworkReady", true)}); !ok {
		t.Errorf("both ready: not ok (%s)", msg)
	}
	ok, msg := conditionsReady([]*runtimeapi.RuntimeCondition{cond("RuntimeReady", true), cond("NetworkReady", false)})
	if ok || !strings.Contains(msg, "NetworkReady false (R: m)") {
		t.Errorf("network not ready: %v, %q", ok, msg)
	}
	if ok, msg := conditionsReady(nil); ok || !strings.Contains(msg, "RuntimeReady missing") {
		t.Errorf("no conditions: %v, %q", ok, msg)
	}
}

func TestMissingImages(t *testing.T) {
	images := []*runtimeapi.Image{
		{Id: "sha256:1", RepoTags: []string{"registry.k8s.io/pause:3.10"}},
		{Id: "sha256:2", RepoDigests: []string{"netshim.local/busybox@sha256:2"}},
	}
	got := missingImages(images, []string{"registry.k8s.io/pause:3.10", "netshim.local/busybox:latest"})
	if !slices.Equal(got, []string{"netshim.local/busybox:latest"}) {
		t.Errorf("missing = %q, want the busybox tag only", got)
	}
}

func TestMountsUnder(t *testing.T) {
	info := filepath.Join(t.TempDir(), "mountinfo")
	data := `22 1 0:21 / / rw - ext4 /dev/sda1 rw
40 22 0:45 / /tmp/nskbench.1/containerd-r1/containerd/state/netns/cni-1 rw - nsfs nsfs rw
41 22 0:46 / /tmp/nskbench.1/containerd-r10/x rw - tmpfs tmpfs rw
42 22 0:47 / /tmp/nskbench.1/containerd-r1/s rw - tmpfs tmpfs rw
43 22 0:48 / /tmp/nskbench.1/containerd-r1/with\040space rw - tmpfs tmpfs rw
`
	if err := os.WriteFile(info, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := mountsUnder(info, "/tmp/nskbench.1/containerd-r1/containerd", "/tmp/nskbench.1/containerd-r1/s/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/tmp/nskbench.1/containerd-r1/containerd/state/netns/cni-1", "/tmp/nskbench.1/containerd-r1/s"}
	if !slices.Equal(got, want) {
		t.Errorf("mounts = %q, want %q (not a sibling dir whose name starts the same)", got, want)
	}
	if got, _ := mountsUnder(info, "/tmp/nskbench.1/containerd-r1"); len(got) != 3 {
		t.Errorf("under the run dir: %q, want 3 (one with an escaped space)", got)
	}
}

func TestRemoveRunDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "default-r1")
	if err := os.MkdirAll(filepath.Join(dir, "kubelet", "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := removeRunDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
	if err := removeRunDir(""); err != nil {
		t.Errorf("no run dir: %v", err)
	}
}

func TestCheckNoHostImports(t *testing.T) {
	dir := t.TempDir()
	pattern := filepath.Join(dir, "conf.d", "*.toml")
	if err := checkNoHostImports(pattern); err != nil {
		t.Errorf("no conf.d: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conf.d", "x.toml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkNoHostImports(pattern); err == nil || !strings.Contains(err.Error(), "x.toml") {
		t.Errorf("a file in conf.d: err = %v", err)
	}
}
