package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// netshim's --sandbox-netns values the bench measures.
const (
	modeDocker = "docker" // the pause container's own netns, CNI ADD after the start
	modePinned = "pinned" // netshim makes and pins the netns, CNI ADD in parallel with the start
	// modePauseless is pinned without a pause container: netshim pins the
	// pod's net, IPC and UTS namespaces and /dev/shm itself, for pods that
	// do not share a PID namespace (the bench's, as kubelet's).
	modePauseless = "pauseless"
	// ociRuntime is the engine runtime the pinned mode starts the pause
	// container under (cmd/netshim-oci, registered by hack/dockerd.sh).
	ociRuntime = "netshim-oci"
)

// pinnedUnavailable says why the pinned sandbox netns mode cannot be
// measured, or "" when it can: the engine must have the runtime netshim
// starts pause containers under in that mode. The pause-less mode needs
// the same (its pods' containers run under it), so it is measured exactly
// when the pinned one is.
func pinnedUnavailable(engineRuntimes []string) string {
	if !slices.Contains(engineRuntimes, ociRuntime) {
		slices.Sort(engineRuntimes)
		return fmt.Sprintf("the Docker engine has no runtime %s (it has: %s); hack/dockerd.sh registers _output/%s on the dockerd it starts "+
			"(stop a dockerd started without it: hack/dockerd.sh stop), or add it under \"runtimes\" in /etc/docker/daemon.json and send dockerd SIGHUP",
			ociRuntime, strings.Join(engineRuntimes, ", "), ociRuntime)
	}
	return ""
}

// wrapperNote says, when it matters, that the engine's netshim-oci is
// not the one built with the netshim under test: the engine runs the path
// registered when it started (e.g. another checkout's _output), and the
// pinned- and pause-less-mode figures are that binary's. Each is named with the revision
// it was built from. "" when the engine runs this build (the same path,
// or a copy), or when there is no build to compare with.
func wrapperNote(enginePath, built string) string {
	if built == "" {
		return ""
	}
	if _, err := os.Stat(built); err != nil {
		return "" // no build to compare with (e.g. netshim-bench run by hand)
	}
	if same, err := sameContents(enginePath, built); err != nil {
		return fmt.Sprintf("could not compare the engine's runtime %s (%s) with %s: %v", ociRuntime, enginePath, built, err)
	} else if same {
		return ""
	}
	return fmt.Sprintf("the engine's runtime %s is %s (%s), not %s built with this netshim (%s): the pinned- and pause-less-mode figures are the engine's binary's (hack/dockerd.sh stop, then run again, to have the engine use this build)",
		ociRuntime, enginePath, buildDesc(enginePath), built, buildDesc(built))
}

// buildDesc says what a binary is: the revision it was built from, from
// the VCS stamp go build embeds (none with -buildvcs=false), and when the
// file was written.
func buildDesc(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	desc := "written " + st.ModTime().UTC().Format("2006-01-02 15:04:05 MST")
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return desc
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return desc
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += " (modified)"
	}
	return "revision " + rev + ", " + desc
}

func sameContents(a, b string) (bool, error) {
	ha, err := fileSum(a)
	if err != nil {
		return false, err
	}
	hb, err := fileSum(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ha, hb), nil
}

func fileSum(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return h.Sum(nil), nil
}

// modeLogPath is where the netshim of the run named name ("pinned",
// "pauseless") logs: beside the default one's --netshim-log
// (bench-netshim.log -> bench-netshim-pinned.log), or in its directory in
// the run's temporary directory.
func modeLogPath(defaultLog, dir, name string) string {
	if defaultLog == "" {
		return filepath.Join(dir, name, "netshim.log")
	}
	return strings.TrimSuffix(defaultLog, ".log") + "-" + name + ".log"
}

// modesLine is the report header's line about what was compared.
func (b *bench) modesLine() string {
	var s string
	switch {
	case b.pinnedSkip != "":
		s = "sandbox netns: the default mode only; the pinned and pause-less modes were not measured (see the notes)"
	default:
		s = fmt.Sprintf("sandbox netns: `--sandbox-netns=%s` for every scenario; `--sandbox-netns=%s` (pause under the engine runtime %s, %s) and `--sandbox-netns=%s` (no pause container) in the sequential rounds, a netshim each with its own proxy",
			b.mode, modePinned, ociRuntime, b.wrapperPath, modePauseless)
	}
	if b.slowList != nil {
		s += fmt.Sprintf("; slow chain: the same conflist with %s appended (ADD sleeps %s)", filepath.Base(b.opts.cniSleep), b.opts.slowSleep)
	}
	return s
}

// unmountUnder detaches the mounts a netshim left in its netns dir (a pod
// netns is pinned by a bind mount, and the dir itself may be made a
// mount), so that the temporary directory can be removed after a netshim
// died. Entries that are not mounts are left to os.RemoveAll.
func unmountUnder(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, detach(filepath.Join(dir, e.Name())))
	}
	errs = append(errs, detach(dir))
	return errors.Join(errs...)
}

func detach(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil // unmounted, or not a mount point
	}
	return fmt.Errorf("unmounting %s: %w", path, err)
}
