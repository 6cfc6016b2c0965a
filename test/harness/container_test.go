package harness

import (
	"encoding/json"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestContainer(t *testing.T) {
	// base is the default config with the fields of c set on top.
	base := func(c *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig {
		if c.Metadata == nil {
			c.Metadata = &runtimeapi.ContainerMetadata{Name: "app"}
		}
		c.Image = &runtimeapi.ImageSpec{Image: "busybox:1"}
		if c.LogPath == "" {
			c.LogPath = "app.log"
		}
		if c.Linux == nil {
			c.Linux = &runtimeapi.LinuxContainerConfig{}
		}
		return c
	}
	ro := &runtimeapi.Mount{HostPath: "/src", ContainerPath: "/data", Readonly: true}
	for _, c := range []struct {
		name string
		opts []ContainerOption
		want *runtimeapi.ContainerConfig
	}{
		{
			name: "defaults",
			want: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "busybox:1"},
				LogPath: "app.log", Linux: &runtimeapi.LinuxContainerConfig{},
			},
		},
		{
			name: "attempt, command, args, working dir",
			opts: []ContainerOption{WithContainerAttempt(3), WithCommand("sh", "-c"), WithArgsList("echo hi"), WithWorkingDir("/w")},
			want: base(&runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: 3},
				Command:  []string{"sh", "-c"}, Args: []string{"echo hi"}, WorkingDir: "/w",
			}),
		},
		{
			name: "a later command replaces an earlier one",
			opts: []ContainerOption{WithCommand("a"), WithCommand("b", "c")},
			want: base(&runtimeapi.ContainerConfig{Command: []string{"b", "c"}}),
		},
		{
			name: "environment and mounts add up in order",
			opts: []ContainerOption{WithEnv("A", "1"), WithMounts(ro), WithEnv("B", "2"), WithMounts(&runtimeapi.Mount{HostPath: "/x", ContainerPath: "/y"})},
			want: base(&runtimeapi.ContainerConfig{
				Envs:   []*runtimeapi.KeyValue{{Key: "A", Value: []byte("1")}, {Key: "B", Value: []byte("2")}},
				Mounts: []*runtimeapi.Mount{ro, {HostPath: "/x", ContainerPath: "/y"}},
			}),
		},
		{
			name: "log path",
			opts: []ContainerOption{WithLogPath("app/0.log")},
			want: base(&runtimeapi.ContainerConfig{LogPath: "app/0.log"}),
		},
		{
			name: "labels and annotations add up, a later value wins",
			opts: []ContainerOption{
				WithContainerLabels(map[string]string{"a": "1"}), WithContainerLabels(map[string]string{"a": "2", "b": "1"}),
				WithContainerAnnotations(map[string]string{"restartCount": "0"}),
			},
			want: base(&runtimeapi.ContainerConfig{Labels: map[string]string{"a": "2", "b": "1"}, Annotations: map[string]string{"restartCount": "0"}}),
		},
		{
			name: "tty and stdin once",
			opts: []ContainerOption{WithTTY(), WithStdin(true)},
			want: base(&runtimeapi.ContainerConfig{Tty: true, Stdin: true, StdinOnce: true}),
		},
		{
			name: "stdin kept open",
			opts: []ContainerOption{WithStdin(false)},
			want: base(&runtimeapi.ContainerConfig{Stdin: true}),
		},
		{
			name: "resources",
			opts: []ContainerOption{WithResources(&runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 64 << 20})},
			want: base(&runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{
				Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 64 << 20},
			}}),
		},
		{
			name: "security context, twice",
			opts: []ContainerOption{
				WithSecurityContext(func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.ReadonlyRootfs = true }),
				WithSecurityContext(func(sc *runtimeapi.LinuxContainerSecurityContext) { sc.RunAsUser = &runtimeapi.Int64Value{Value: 1000} }),
			},
			want: base(&runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{
				SecurityContext: &runtimeapi.LinuxContainerSecurityContext{ReadonlyRootfs: true, RunAsUser: &runtimeapi.Int64Value{Value: 1000}},
			}}),
		},
		{
			name: "a Linux option after the section was removed makes it again",
			opts: []ContainerOption{func(c *runtimeapi.ContainerConfig) { c.Linux = nil }, WithResources(&runtimeapi.LinuxContainerResources{CpuQuota: 1})},
			want: base(&runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuQuota: 1}}}),
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			requireProtoEqual(t, Container("app", "busybox:1", c.opts...), c.want)
		})
	}
}

// TestContainerSharesNothing: as TestPodSharesNothing, for containers.
func TestContainerSharesNothing(t *testing.T) {
	cmd := []string{"sleep", "1"}
	m := &runtimeapi.Mount{HostPath: "/src", ContainerPath: "/data"}
	res := &runtimeapi.LinuxContainerResources{CpuShares: 2}
	labels := map[string]string{"a": "1"}
	opts := []ContainerOption{WithCommand(cmd...), WithMounts(m), WithResources(res), WithContainerLabels(labels)}
	first, second := Container("one", "img", opts...), Container("two", "img", opts...)

	first.Command[0] = "changed"
	first.Mounts[0].Readonly = true
	first.Linux.Resources.CpuShares = 9
	first.Labels["a"] = "changed"
	cmd[1], m.HostPath, res.CpuQuota, labels["b"] = "2", "/other", 5, "added"

	requireProtoEqual(t, second, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "two"},
		Image:    &runtimeapi.ImageSpec{Image: "img"},
		Command:  []string{"sleep", "1"},
		Mounts:   []*runtimeapi.Mount{{HostPath: "/src", ContainerPath: "/data"}},
		LogPath:  "two.log",
		Labels:   map[string]string{"a": "1"},
		Linux:    &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{CpuShares: 2}},
	})
}

// TestContainerJSONForCrictl: as TestPodJSONForCrictl, for crictl's
// container config files.
func TestContainerJSONForCrictl(t *testing.T) {
	in := Container("app", "busybox:1", WithCommand("sh", "-c", "true"), WithContainerLabels(map[string]string{"k": "v"}), WithStdin(true))
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(data, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"metadata", "image", "command", "log_path", "labels", "stdin", "stdin_once", "linux"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("JSON %s has no key %q (crictl's field name)", data, k)
		}
	}
	var out runtimeapi.ContainerConfig
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	requireProtoEqual(t, &out, in)
}
