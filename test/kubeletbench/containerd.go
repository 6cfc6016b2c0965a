package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/procutil"
	"github.com/netshim/netshim/test/harness"
)

// The containerd peer: containerd's own CRI plugin, run by the bench as a
// fresh daemon for each of its runs, so that netshim is measured against
// what a node without Docker would run, in the same rotation and under the
// same kubelet, pods and CNI network.

// containerdBinaries are what --containerd-bin-dir must hold
// (hack/docker29.sh build-containerd builds them from the module proxy).
var containerdBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"}

const (
	// criNamespace is the containerd namespace its CRI plugin keeps
	// kubelet's pods and images in: the images are imported there.
	criNamespace = "k8s.io"
	// maxShimSocketDir is the longest shim socket dir containerd takes on
	// Linux: a shim's socket is the dir, "/" and 64 hex digits, within
	// the 108 bytes of a unix socket's path.
	maxShimSocketDir = 42
	// Bounds of the daemon's start (up to CRI Status ready), of its stop
	// on SIGTERM before SIGKILL, of its shims' exit once it stopped, and
	// of the image import.
	containerdStartTimeout = 60 * time.Second
	containerdStopTimeout  = 30 * time.Second
	shimExitTimeout        = 15 * time.Second
	imageImportTimeout     = 2 * time.Minute
)

// hostContainerdImports is the config containerd imports whatever its
// config file says (its default "imports", which the file can only add
// to): a host's file there would change the peer's settings.
const hostContainerdImports = "/etc/containerd/conf.d/*.toml"

// checkNoHostImports refuses a host where containerd would import config
// of the host's (pattern: hostContainerdImports).
func checkNoHostImports(pattern string) error {
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return err
	}
	if len(matches) > 0 {
		return fmt.Errorf("containerd would import %s into the peer's config (it always reads %s): move them away for the bench",
			strings.Join(matches, " "), pattern)
	}
	return nil
}

// containerdConfig is where one containerd run keeps everything, and what
// it runs with. Every path is under the run's directory: nothing of it
// lands in the host's /var/lib/containerd, /run/containerd, /var/run/netns
// or /opt/containerd, and the run's teardown removes it all.
type containerdConfig struct {
	binDir, cniBinDir, pauseImage string
	// dir holds the rest but the shim socket dir.
	dir                    string
	root, state            string
	address, ttrpcAddress  string
	configPath, cniConfDir string
	logPath                string
	// shimSocketDir is short (maxShimSocketDir): beside dir, not in it.
	shimSocketDir string
}

func newContainerdConfig(runDir, binDir, cniBinDir, pauseImage string) containerdConfig {
	dir := filepath.Join(runDir, "containerd")
	return containerdConfig{
		binDir:        binDir,
		cniBinDir:     cniBinDir,
		pauseImage:    pauseImage,
		dir:           dir,
		root:          filepath.Join(dir, "root"),
		state:         filepath.Join(dir, "state"),
		address:       filepath.Join(dir, "containerd.sock"),
		ttrpcAddress:  filepath.Join(dir, "containerd.sock.ttrpc"),
		configPath:    filepath.Join(dir, "config.toml"),
		cniConfDir:    filepath.Join(dir, "net.d"),
		logPath:       filepath.Join(dir, "containerd.log"),
		shimSocketDir: filepath.Join(runDir, "s"),
	}
}

func (w *world) containerdConfig(runDir string) containerdConfig {
	return newContainerdConfig(runDir, w.o.containerdBinDir, w.o.cniBinDir, w.o.pauseImage)
}

func (c containerdConfig) bin(name string) string { return filepath.Join(c.binDir, name) }

// netnsDir is where the CRI plugin pins its pods' network namespaces
// (netns_mounts_under_state_dir).
func (c containerdConfig) netnsDir() string { return filepath.Join(c.state, "netns") }

// tomlString quotes s as a TOML basic string. The values are paths and an
// image reference: one with a quote, a backslash or a control character
// is refused rather than escaped.
func tomlString(s string) (string, error) {
	if strings.ContainsFunc(s, func(r rune) bool { return r == '"' || r == '\\' || r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf("%q: no quotes, backslashes or control characters in containerd's config", s)
	}
	return `"` + s + `"`, nil
}

// containerdTOML is the config template; %[n]s are tomlString values.
// Only what differs from containerd 2.4's defaults for the CRI plugin is
// set, each for the reason given.
const containerdTOML = `# containerd's own CRI plugin, the peer test/kubeletbench measures netshim
# against. Written by the bench for one run; everything under the run's dir.
# (2.4 reads version 3 as it is: its migrations to 4 rename plugins this file
# does not set.)
version = 3
root = %[1]s
state = %[2]s
# containerd also imports /etc/containerd/conf.d/*.toml, whatever this file
# says; the bench refuses to run where that matches a file.

[grpc]
  address = %[3]s

[ttrpc]
  address = %[4]s

[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"

    # The pause image the pods' sandboxes run: the one netshim runs, imported
    # from the private dockerd (the key moved here from sandbox_image in 2.x).
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = %[5]s

  [plugins."io.containerd.cri.v1.runtime"]
    # root lacks CAP_SYS_RESOURCE on these machines: runc cannot lower a
    # sandbox's oom_score_adj to the plugin's -998, so it is held at
    # containerd's own (kubelet's oomScoreAdj is 0 for the same reason).
    restrict_oom_score_adj = true
    # Pods' network namespaces under the state dir, not the host's
    # /var/run/netns.
    netns_mounts_under_state_dir = true

    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = %[6]s

        # runc 1.4.3 (Debian's 1.1.5 is too old for what the plugin asks);
        # cgroupfs, as kubelet here (cgroup v1); runc's state under ours.
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = %[7]s
          Root = %[8]s
          SystemdCgroup = false

    # The same plugins and network (one conflist) as netshim's runs.
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = [%[9]s]
      conf_dir = %[10]s
      max_conf_num = 1

  # Shim sockets under the run's dir, not the host's /run/containerd/s.
  [plugins."io.containerd.shim.v1.manager"]
    socket_dir = %[11]s

  # NRI stays on, as by default, with its socket ours (no plugins run).
  [plugins."io.containerd.nri.v1.nri"]
    socket_path = %[12]s

  [plugins."io.containerd.internal.v1.opt"]
    path = %[13]s
`

// render is the config file's content.
func (c containerdConfig) render() (string, error) {
	if len(c.shimSocketDir) > maxShimSocketDir {
		return "", fmt.Errorf("shim socket dir %s is longer than the %d bytes containerd takes: set TMPDIR to a shorter directory",
			c.shimSocketDir, maxShimSocketDir)
	}
	var args []any
	for _, v := range []string{
		c.root, c.state, c.address, c.ttrpcAddress, c.pauseImage,
		c.bin("containerd-shim-runc-v2"), c.bin("runc"), filepath.Join(c.state, "runc"),
		c.cniBinDir, c.cniConfDir, c.shimSocketDir, filepath.Join(c.state, "nri.sock"), filepath.Join(c.root, "opt"),
	} {
		q, err := tomlString(v)
		if err != nil {
			return "", err
		}
		args = append(args, q)
	}
	return fmt.Sprintf(containerdTOML, args...), nil
}

// containerdRuntime is one run's containerd, started and stopped by the
// bench (its own session; SIGTERM if the bench dies).
type containerdRuntime struct {
	w   *world
	cfg containerdConfig

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error // set before exited is closed
	cri     *harness.CRI
}

// start writes the config and the conflist, starts containerd, waits until
// its CRI is ready and imports the images.
func (c *containerdRuntime) start(ctx context.Context) error {
	if err := c.writeFiles(); err != nil {
		return err
	}
	if err := c.launch(); err != nil {
		return err
	}
	if err := c.waitReady(ctx); err != nil {
		return fmt.Errorf("containerd: %w\n%s", err, tail(c.cfg.logPath, 20))
	}
	if err := c.importImages(ctx); err != nil {
		return fmt.Errorf("containerd: %w\n%s", err, tail(c.cfg.logPath, 20))
	}
	return nil
}

func (c *containerdRuntime) writeFiles() error {
	for _, d := range []string{c.cfg.root, c.cfg.state, c.cfg.cniConfDir, c.cfg.shimSocketDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	text, err := c.cfg.render()
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.cfg.configPath, []byte(text), 0o644); err != nil {
		return err
	}
	return writeConflist(c.cfg.cniConfDir, c.w.cniOptions())
}

// writeConflist writes the conflist the harness writes for netshim
// (WithCNIConfig), under the same file name.
func writeConflist(dir string, opts []harness.ConflistOption) error {
	data, err := harness.Conflist(opts...)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "10-"+networkName+".conflist"), data, 0o644)
}

// launch starts containerd and records it in the host guard, so that a
// bench killed before the run's stop has it stopped by the next (its
// shims are then found by the guard as strays under the world's dir).
func (c *containerdRuntime) launch() error {
	logf, err := os.OpenFile(c.cfg.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.cfg.bin("containerd"), "--config", c.cfg.configPath)
	// The bin dir first on PATH, as hack/docker29.sh runs its containerd:
	// what containerd or a shim looks up by name is the build's.
	cmd.Env = append(os.Environ(), "PATH="+c.cfg.binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: a Ctrl-C meant for the bench does not reach it
	// before the bench has stopped kubelet.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting containerd: %w", err)
	}
	c.cmd, c.exited = cmd, make(chan struct{})
	go func() {
		c.waitErr = cmd.Wait()
		logf.Close()
		close(c.exited)
	}()
	return c.w.guard.RecordProcess("containerd", cmd.Process.Pid, c.cfg.configPath)
}

func (c *containerdRuntime) running() bool {
	if c.exited == nil {
		return false
	}
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// waitReady waits for the socket, CRI Version, then CRI Status saying
// the runtime and the network (the conflist loaded) are ready: kubelet
// then starts on a runtime as ready as netshim is when its Start returns.
func (c *containerdRuntime) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, containerdStartTimeout)
	defer cancel()
	if err := c.poll(ctx, "listen on "+c.cfg.address, func() (bool, error) {
		conn, err := net.DialTimeout("unix", c.cfg.address, time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	}); err != nil {
		return err
	}
	cri, err := harness.DialCRI(c.cfg.address)
	if err != nil {
		return err
	}
	c.cri = cri
	if _, err := cri.Runtime.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("CRI Version: %w", err)
	}
	var last string
	err = c.poll(ctx, "be ready (CRI Status)", func() (bool, error) {
		st, err := cri.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		var ok bool
		ok, last = conditionsReady(st.GetStatus().GetConditions())
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)", err, last)
	}
	return nil
}

// conditionsReady says whether CRI Status's RuntimeReady and NetworkReady
// are both true, and, when not, what they say.
func conditionsReady(conds []*runtimeapi.RuntimeCondition) (bool, string) {
	var notReady []string
	for _, want := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		i := slices.IndexFunc(conds, func(c *runtimeapi.RuntimeCondition) bool { return c.GetType() == want })
		switch {
		case i < 0:
			notReady = append(notReady, want+" missing")
		case !conds[i].GetStatus():
			notReady = append(notReady, fmt.Sprintf("%s false (%s: %s)", want, conds[i].GetReason(), conds[i].GetMessage()))
		}
	}
	return len(notReady) == 0, strings.Join(notReady, "; ")
}

// poll calls done every 100 ms until it says so, fails, containerd exits
// or ctx ends.
func (c *containerdRuntime) poll(ctx context.Context, what string, done func() (bool, error)) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if ok, err := done(); err != nil || ok {
			return err
		}
		select {
		case <-c.exited:
			return fmt.Errorf("containerd exited before it did %s: %v", what, c.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("containerd did not %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// importImages fills the fresh image store with the pause and pod images
// the netshim runs use, from the private dockerd (w.imagesTar, `docker
// save`), and waits for the CRI plugin to list them (it learns of images
// from containerd's events).
func (c *containerdRuntime) importImages(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, imageImportTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.cfg.bin("ctr"), "--address", c.cfg.address, "--namespace", criNamespace,
		"images", "import", c.w.imagesTar).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", c.w.imagesTar, err, out)
	}
	want := []string{c.cfg.pauseImage, c.w.o.image}
	var missing []string
	err = c.poll(ctx, "list the imported images", func() (bool, error) {
		resp, err := c.cri.Image.ListImages(ctx, &runtimeapi.ListImagesRequest{})
		if err != nil {
			return false, nil
		}
		missing = missingImages(resp.GetImages(), want)
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%w: CRI ListImages lacks %s after `ctr images import`:\n%s", err, strings.Join(missing, ", "), out)
	}
	return nil
}

// missingImages are the references of want that no image's tags name.
func missingImages(images []*runtimeapi.Image, want []string) []string {
	var out []string
	for _, ref := range want {
		if !slices.ContainsFunc(images, func(im *runtimeapi.Image) bool { return slices.Contains(im.GetRepoTags(), ref) }) {
			out = append(out, ref)
		}
	}
	return out
}

func (c *containerdRuntime) endpoint() string { return c.cfg.address }

func (c *containerdRuntime) runtimeClient() runtimeapi.RuntimeServiceClient { return c.cri.Runtime }

func (c *containerdRuntime) stack(kubelet int) stack {
	pid := 0
	if c.cmd != nil {
		pid = c.cmd.Process.Pid
	}
	return containerdStack(pid, kubelet, c.cfg.address)
}

func (c *containerdRuntime) netshimURL() string { return "" }

// stop removes the sandboxes kubelet left through the CRI, stops
// containerd, makes sure its shims are gone, keeps its log and audits.
func (c *containerdRuntime) stop(artifacts string) error {
	if c.cmd == nil {
		return nil
	}
	var errs []error
	if c.running() && c.cri != nil {
		errs = append(errs, c.removeSandboxes())
	}
	if c.cri != nil {
		c.cri.Conn.Close()
	}
	errs = append(errs, c.terminate(), c.reapShims())
	if artifacts != "" {
		copyFile(c.cfg.logPath, filepath.Join(artifacts, "containerd.log"))
	}
	errs = append(errs, c.audit())
	return errors.Join(errs...)
}

// removeSandboxes stops and removes every sandbox (and so its containers)
// left in this containerd, all of which are the bench's; any is an error,
// kubelet should have removed them.
func (c *containerdRuntime) removeSandboxes() error {
	ctx, cancel := context.WithTimeout(context.Background(), harness.RPCTimeout)
	defer cancel()
	rt := c.cri.Runtime
	resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing the sandboxes left: %w", err)
	}
	if len(resp.Items) == 0 {
		return nil
	}
	errs := []error{fmt.Errorf("kubelet left %d sandbox(es); removing them through containerd's CRI", len(resp.Items))}
	for _, sb := range resp.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("StopPodSandbox %s: %w", short(sb.Id), err))
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("RemovePodSandbox %s: %w", short(sb.Id), err))
		}
	}
	return errors.Join(errs...)
}

// terminate sends SIGTERM and waits, then SIGKILL; an exit before the run
// asked for it is an error too.
func (c *containerdRuntime) terminate() error {
	if !c.running() {
		return fmt.Errorf("containerd exited before the run stopped it: %v", c.waitErr)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return nil
	case <-time.After(containerdStopTimeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("containerd (pid %d) did not exit within %s of SIGTERM; killed", c.cmd.Process.Pid, containerdStopTimeout)
	}
}

// reapShims waits for this containerd's shims to exit (a shim exits once
// its last task is deleted, which removing the sandboxes did); any still
// there after shimExitTimeout is killed with its children, and reported.
func (c *containerdRuntime) reapShims() error {
	p := c.w.procs
	deadline := time.Now().Add(shimExitTimeout)
	for {
		shims := shimPids(p, c.cfg.address)
		if len(shims) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			n := killShims(p, shims)
			return fmt.Errorf("%d containerd shim(s) still ran %s after containerd stopped; killed %d process(es)", len(shims), shimExitTimeout, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// killShims kills the shims' children (their containers) and then the
// shims, with SIGKILL, and returns how many processes it signalled.
func killShims(p procFS, shims []int) int {
	pids, _ := p.pids()
	n := 0
	for _, shim := range shims {
		for _, pid := range pids {
			if st, err := p.stat(pid); err == nil && st.ppid == shim && syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
		if syscall.Kill(shim, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// audit checks what a containerd run can leave: the network's leftovers
// (as for netshim), pinned network namespaces and mounts under its dirs.
// The mounts are then unmounted by the run's teardown (removeRunDir).
func (c *containerdRuntime) audit() error {
	leaks := c.w.networkLeaks()
	if nss, _ := os.ReadDir(c.cfg.netnsDir()); len(nss) > 0 {
		leaks = append(leaks, fmt.Sprintf("%d network namespace(s) left in %s", len(nss), c.cfg.netnsDir()))
	}
	if mps, err := mountsUnder("/proc/self/mountinfo", c.cfg.dir, c.cfg.shimSocketDir); err != nil {
		leaks = append(leaks, fmt.Sprintf("reading mounts: %v", err))
	} else if len(mps) > 0 {
		leaks = append(leaks, fmt.Sprintf("%d mount(s) left under %s: %s", len(mps), c.cfg.dir, strings.Join(firstN(mps, 5), " ")))
	}
	return leakError(leaks)
}

// mountsUnder lists the mount points at or under any of dirs.
func mountsUnder(mountinfo string, dirs ...string) ([]string, error) {
	ms, err := procutil.ReadMountinfo(mountinfo)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		if slices.ContainsFunc(dirs, func(d string) bool { return under(m.MountPoint, d) }) {
			out = append(out, m.MountPoint)
		}
	}
	return out, nil
}

// under says whether path is dir or below it.
func under(path, dir string) bool {
	dir = filepath.Clean(dir)
	return path == dir || strings.HasPrefix(path, dir+"/")
}

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), "...")
}

// removeRunDir unmounts what is left mounted under a run's dir (kubelet's
// root, a runtime's leftovers), only there, then removes it. A mount that
// cannot go keeps the dir: removing files through it could reach beyond.
func removeRunDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := harness.UnmountUnder(dir); err != nil {
		return fmt.Errorf("run dir %s kept: %w", dir, err)
	}
	return os.RemoveAll(dir)
}

// tail is the last n lines of a log, headed by its path, for an error
// message.
func tail(path string, n int) string {
	return "---- last lines of " + path + " ----\n" + harness.FileTail(path, n)
}
