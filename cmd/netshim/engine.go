package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	"github.com/spf13/cobra"

	"github.com/netshim/netshim/pkg/daemonjson"
	"github.com/netshim/netshim/pkg/dockerservice"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
)

// engineAPI is what registering the wrapper asks of the Docker engine.
type engineAPI interface {
	Info(ctx context.Context) (system.Info, error)
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
}

// registrar registers netshim's OCI wrapper in a Docker engine's
// daemon.json and has the engine load it (`netshim engine register`), or
// takes it out again (`unregister`).
type registrar struct {
	file    string             // daemon.json
	rt      daemonjson.Runtime // the wrapper's entry
	docker  engineAPI
	reload  func() error // SIGHUP to dockerd, which rereads daemon.json
	timeout time.Duration
	poll    time.Duration
	out     io.Writer
}

// register merges the wrapper into the file (written only if that changes
// it), reloads the engine and waits until `docker info` lists it as the
// file says.
func (r *registrar) register(ctx context.Context) error {
	data, mode, err := readConfig(r.file)
	if err != nil {
		return err
	}
	out, changed, err := daemonjson.Register(data, dockerservice.OCIWrapperRuntime, r.rt)
	if err != nil {
		return fmt.Errorf("%s: %w", r.file, err)
	}
	if changed || r.loaded(ctx, true) != nil {
		// About to reload: nothing the engine runs may be lost by it.
		if err := r.checkNoRuntimeLost(ctx, out); err != nil {
			return err
		}
	}
	if changed {
		if err := writeConfig(r.file, out, mode); err != nil {
			return err
		}
		fmt.Fprintf(r.out, "%s: runtime %s registered (%s)\n", r.file, dockerservice.OCIWrapperRuntime, r.rt.Path)
	} else if r.loaded(ctx, true) == nil {
		fmt.Fprintf(r.out, "runtime %s is registered and loaded already\n", dockerservice.OCIWrapperRuntime)
		return nil
	}
	if err := r.reload(); err != nil {
		return err
	}
	if err := r.wait(ctx, true); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "the Docker engine runs runtime %s; netshim's --sandbox-netns=auto picks it up within 30 s\n", dockerservice.OCIWrapperRuntime)
	return nil
}

// unregister takes the wrapper out of the file and the engine, unless a
// container still names it: the engine could not start that container
// again (a pinned pod's pause container, a pause-less pod's containers,
// those of pods with hostUsers: false or Strict groups).
func (r *registrar) unregister(ctx context.Context) error {
	users, err := r.wrapperUsers(ctx)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("%d containers run with runtime %s (%s): remove their pods first, or switch netshim to --sandbox-netns=docker and wait until kubelet replaced them", len(users), dockerservice.OCIWrapperRuntime, strings.Join(short(users), ", "))
	}
	data, mode, err := readConfig(r.file)
	if err != nil {
		return err
	}
	out, changed, err := daemonjson.Unregister(data, dockerservice.OCIWrapperRuntime)
	if err != nil {
		return fmt.Errorf("%s: %w", r.file, err)
	}
	if !changed {
		if r.loaded(ctx, false) == nil {
			fmt.Fprintf(r.out, "runtime %s is not registered\n", dockerservice.OCIWrapperRuntime)
			return nil
		}
		return fmt.Errorf("%s does not register runtime %s, but the engine runs it: it comes from dockerd's command line (--add-runtime) or another --config-file", r.file, dockerservice.OCIWrapperRuntime)
	}
	if err := writeConfig(r.file, out, mode); err != nil {
		return err
	}
	if err := r.reload(); err != nil {
		return err
	}
	if err := r.wait(ctx, false); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "runtime %s unregistered\n", dockerservice.OCIWrapperRuntime)
	return nil
}

// engineBuiltinRuntimes are the runtimes dockerd has whatever its
// configuration says.
var engineBuiltinRuntimes = []string{"runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux"}

// checkNoRuntimeLost refuses a reload that would take a runtime from the
// engine: on a reload, dockerd gives itself the runtimes of its file only,
// and drops those of its command line (--add-runtime; seen on Docker 20.10,
// which also lets a file's "runtimes" replace them at start, and on Docker
// 29), so the pods that name one would no longer start.
func (r *registrar) checkNoRuntimeLost(ctx context.Context, file []byte) error {
	info, err := r.docker.Info(ctx)
	if err != nil {
		return fmt.Errorf("docker info: %w", err)
	}
	named, err := daemonjson.Names(file)
	if err != nil {
		return fmt.Errorf("%s: %w", r.file, err)
	}
	var lost []string
	for name := range info.Runtimes {
		if !slices.Contains(named, name) && !slices.Contains(engineBuiltinRuntimes, name) {
			lost = append(lost, name)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	slices.Sort(lost)
	return fmt.Errorf("the Docker engine runs runtime(s) %s, which %s does not name (dockerd's --add-runtime, or another --config-file): dockerd keeps only its file's runtimes when it reloads it, so pods that use them would no longer start. Add them to %s's \"runtimes\" first (their paths and arguments: docker info --format '{{json .Runtimes}}'), then run this again; nothing was changed",
		strings.Join(lost, ", "), r.file, r.file)
}

// wrapperUsers are the containers (running or not) whose runtime is the
// wrapper.
func (r *registrar) wrapperUsers(ctx context.Context) ([]string, error) {
	list, err := r.docker.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, fmt.Errorf("listing the engine's containers: %w", err)
	}
	var ids []string
	for _, c := range list {
		ci, err := r.docker.ContainerInspect(ctx, c.ID)
		if err != nil {
			continue // removed meanwhile
		}
		if ci.HostConfig != nil && ci.HostConfig.Runtime == dockerservice.OCIWrapperRuntime {
			ids = append(ids, c.ID)
		}
	}
	return ids, nil
}

func short(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id[:min(12, len(id))]
	}
	return out
}

// loaded says (nil) whether the engine runs the wrapper as registered
// (want) or not at all (!want).
func (r *registrar) loaded(ctx context.Context, want bool) error {
	info, err := r.docker.Info(ctx)
	if err != nil {
		return fmt.Errorf("docker info: %w", err)
	}
	rt, ok := info.Runtimes[dockerservice.OCIWrapperRuntime]
	switch {
	case want && !ok:
		return fmt.Errorf("docker info lists no runtime %s", dockerservice.OCIWrapperRuntime)
	case want && rt.Path != r.rt.Path:
		return fmt.Errorf("docker info lists runtime %s with path %s, not %s", dockerservice.OCIWrapperRuntime, rt.Path, r.rt.Path)
	case !want && ok:
		return fmt.Errorf("docker info still lists runtime %s", dockerservice.OCIWrapperRuntime)
	}
	return nil
}

// wait polls docker info until the engine has reloaded the file.
func (r *registrar) wait(ctx context.Context, want bool) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	for {
		err := r.loaded(ctx, want)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Docker engine did not load %s within %s (%v): dockerd logs why it refused the file on SIGHUP (journalctl -u docker)", r.file, r.timeout, err)
		case <-time.After(r.poll):
		}
	}
}

// readConfig reads daemon.json: empty when the file does not exist.
func readConfig(path string) ([]byte, os.FileMode, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0o644, nil
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	return data, st.Mode().Perm(), nil
}

// writeConfig replaces the file whole (a reader never sees half of it),
// keeping its mode.
func writeConfig(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".daemon.json.")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// reloadDockerd sends SIGHUP to the dockerd whose pid file is pidFile,
// which makes it reread its configuration file (runtimes among what it
// reloads). The pid must be a dockerd's.
func reloadDockerd(pidFile string) error {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("finding dockerd: %w (give its pid file with --docker-pidfile)", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("%s holds no pid (%q)", pidFile, bytes.TrimSpace(b))
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "dockerd" {
		return fmt.Errorf("pid %d of %s is not a running dockerd", pid, pidFile)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("reloading dockerd (pid %d): %w", pid, err)
	}
	return nil
}

// defaultWrapper is the netshim-oci beside this netshim (the package puts
// both in /usr/bin), else /usr/bin/netshim-oci.
func defaultWrapper() string {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), dockerservice.OCIWrapperRuntime)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "/usr/bin/" + dockerservice.OCIWrapperRuntime
}

// newEngineCommand is `netshim engine`: register netshim's OCI wrapper in
// the node's Docker engine, or take it out.
func newEngineCommand() *cobra.Command {
	var (
		file, wrapper, netnsDir, runc, endpoint, pidFile string
		timeout                                          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "engine",
		Short: "Register netshim's OCI runtime wrapper in the node's Docker engine (the pinned and pause-less sandbox modes, user namespaces)",
	}
	fs := cmd.PersistentFlags()
	fs.StringVar(&file, "daemon-json", "/etc/docker/daemon.json", "The Docker engine's configuration file")
	fs.StringVar(&wrapper, "wrapper", defaultWrapper(), "netshim's OCI runtime wrapper")
	fs.StringVar(&netnsDir, "netns-dir", "/run/netshim/netns", "netshim's --netns-dir: the wrapper accepts namespaces only there (--netshim-netns-dir); empty: in any directory holding netshim's key (several netshims on one engine, as the tests run)")
	fs.StringVar(&runc, "runc", "", "The runc the wrapper execs (--netshim-runc); empty: runc on the engine's PATH. Pods with hostUsers: false need runc 1.2 or later")
	fs.StringVar(&endpoint, "docker-endpoint", "unix:///var/run/docker.sock", "The Docker engine's endpoint")
	fs.StringVar(&pidFile, "docker-pidfile", "/var/run/docker.pid", "dockerd's pid file: register and unregister send it SIGHUP to reload the configuration")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "How long to wait for the engine to load the configuration")
	newRegistrar := func() (*registrar, error) {
		if !filepath.IsAbs(wrapper) || (netnsDir != "" && !filepath.IsAbs(netnsDir)) || (runc != "" && !filepath.IsAbs(runc)) {
			return nil, errors.New("--wrapper, --netns-dir and --runc take absolute paths")
		}
		c, err := engine.NewClient(endpoint)
		if err != nil {
			return nil, err
		}
		rt := daemonjson.Runtime{Path: wrapper}
		if netnsDir != "" {
			rt.RuntimeArgs = append(rt.RuntimeArgs, "--netshim-netns-dir="+filepath.Clean(netnsDir))
		}
		if runc != "" {
			rt.RuntimeArgs = append(rt.RuntimeArgs, "--netshim-runc="+runc)
		}
		return &registrar{file: file, rt: rt, docker: c, reload: func() error { return reloadDockerd(pidFile) },
			timeout: timeout, poll: 200 * time.Millisecond, out: cmd.OutOrStdout()}, nil
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "register",
		Short: "Add the wrapper to the engine's daemon.json (every other key kept), reload dockerd and wait until it runs it",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			r, err := newRegistrar()
			if err != nil {
				return err
			}
			return r.register(c.Context())
		},
	}, &cobra.Command{
		Use:   "unregister",
		Short: "Take the wrapper out of daemon.json and the engine, if no container runs with it",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			r, err := newRegistrar()
			if err != nil {
				return err
			}
			return r.unregister(c.Context())
		},
	})
	return cmd
}
