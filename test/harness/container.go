package harness

import (
	"slices"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerOption changes a container config Container builds. Options
// apply in order; a later one overrides what an earlier one set, except
// the map and list options (labels, annotations, environment, mounts),
// which add to what is there.
type ContainerOption func(*runtimeapi.ContainerConfig)

// Container builds the CRI config of a container named name running
// image: logging to "<name>.log" in its pod's log directory, with an
// empty Linux section (every netshim path reads it), changed by opts.
// Without WithCommand it runs the image's entrypoint and command.
func Container(name, image string, opts ...ContainerOption) *runtimeapi.ContainerConfig {
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		LogPath:  name + ".log",
		Linux:    &runtimeapi.LinuxContainerConfig{},
	}
	for _, o := range opts {
		o(cfg)
	}
	return cfg
}

// WithContainerAttempt sets the container's attempt number (kubelet's
// restart count).
func WithContainerAttempt(n uint32) ContainerOption {
	return func(c *runtimeapi.ContainerConfig) { c.Metadata.Attempt = n }
}

// WithCommand replaces the image's entrypoint with args (the CRI's
// command; Docker's entrypoint).
func WithCommand(args ...string) ContainerOption {
	return func(c *runtimeapi.ContainerConfig) { c.Command = slices.Clone(args) }
}

// WithArgsList replaces the image's command with args (the CRI's args;
// Docker's cmd), given to the entrypoint.
func WithArgsList(args ...string) ContainerOption {
	return func(c *runtimeapi.ContainerConfig) { c.Args = slices.Clone(args) }
}

// WithWorkingDir sets the directory the container's process starts in.
func WithWorkingDir(dir string) ContainerOption {
	return func(c *runtimeapi.ContainerConfig) { c.WorkingDir = dir }
}

// WithEnv adds the environment variable key=value.
func WithEnv(key, value string) ContainerOption {
	return func(c *runtimeapi.ContainerConfig) {
		c.Envs = append(c.Envs, &runtimeapi.KeyValue{Key: key, Value: []byte(value)})
	}
}

// WithMounts adds copies of mounts to the container's.
func WithMounts(mounts ...*runtimeapi.Mount) ContainerOption {
	return func(c *runtimeapi.ContainerConfig) { c.Mounts = appendClones(c.Mounts, mounts) }
}

// WithLogPath sets the container's log file, relative to its pod's log
// directory ("" for none).
func WithLogPath(p string) ContainerOption {
	return func(c *runtimeapi.ContainerConfig) { c.LogPath = p }
}

// WithContainerLabels adds labels to the container's (a copy).
func WithContainerLabels(labels map[string]string) ContainerOption {
	return func(c *runtimeapi.ContainerConfig) { c.Labels = mergeInto(c.Labels, labels) }
}

// WithContainerAnnotations adds annotations to the container's (a copy).
func WithContainerAnnotations(annotations map[string]string) ContainerOption {
	return func(c *runtimeapi.ContainerConfig) { c.Annotations = mergeInto(c.Annotations, annotations) }
}

// WithTTY gives the container a terminal.
func WithTTY() ContainerOption {
	return func(c *runtimeapi.ContainerConfig) { c.Tty = true }
}

// WithStdin keeps the container's stdin open for attach; with once, it is
// closed after the first attach session ends (kubectl run -i --rm).
func WithStdin(once bool) ContainerOption {
	return func(c *runtimeapi.ContainerConfig) { c.Stdin, c.StdinOnce = true, once }
}

// WithResources sets (a copy of) the container's Linux resources.
func WithResources(r *runtimeapi.LinuxContainerResources) ContainerOption {
	return WithContainerLinux(func(l *runtimeapi.LinuxContainerConfig) {
		l.Resources = proto.Clone(r).(*runtimeapi.LinuxContainerResources)
	})
}

// WithSecurityContext calls f on the container's Linux security context,
// made first if the config has none.
func WithSecurityContext(f func(*runtimeapi.LinuxContainerSecurityContext)) ContainerOption {
	return WithContainerLinux(func(l *runtimeapi.LinuxContainerConfig) {
		if l.SecurityContext == nil {
			l.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
		}
		f(l.SecurityContext)
	})
}

// WithContainerLinux calls f on the container's Linux section (made first
// if an earlier option removed it): the way to set what no other option
// does.
func WithContainerLinux(f func(*runtimeapi.LinuxContainerConfig)) ContainerOption {
	return func(c *runtimeapi.ContainerConfig) {
		if c.Linux == nil {
			c.Linux = &runtimeapi.LinuxContainerConfig{}
		}
		f(c.Linux)
	}
}
