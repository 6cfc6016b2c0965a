// Command netshim-oci is the OCI runtime netshim registers in the Docker
// engine as "netshim-oci" (daemon.json "runtimes"; dockerd --add-runtime).
// It gets runc's command line from the engine's containerd shim and execs
// the real runc with the same arguments, so that runc is the process the
// shim talks to. Before that:
//
//   - for `create` and `run`, if the bundle's config.json carries netshim's
//     marker in its environment (podns.EnvKey, which netshim sets on the
//     containers it runs in pinned namespaces), it accepts the marker only
//     if every path it names is in one directory, netshim signed it with
//     that directory's key (podns.KeyFile, which only root can read), and,
//     when the wrapper was given --netshim-netns-dir, that directory is one
//     of those; each path must be a namespace file of the right kind (not
//     a process's under /proc). It then puts the paths in linux.namespaces
//     and removes the marker from the environment. Anything else carrying
//     the marker (an image's ENV, a container created by hand) is refused,
//     with the reason: the container does not start.
//   - for `exec`, it removes the marker from the process file, which Docker
//     builds from the container's environment.
//
// Docker cannot run a container in a network namespace given by path; this
// is how netshim's pods get the namespace netshim made (and CNI set up)
// before their first container started.
//
// Its own flags come first, before runc's (daemon.json "runtimeArgs"):
//
//	--netshim-runc=PATH       the real runc; else the one set at build time
//	                          (go build -ldflags "-X main.runc=PATH"), else
//	                          runc on PATH
//	--netshim-netns-dir=DIR   accept namespaces only in DIR (netshim's
//	                          --netns-dir; may be repeated); without it, in
//	                          any directory holding a key of netshim's
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/netshim/netshim/pkg/podns"
	"github.com/netshim/netshim/pkg/runcwrap"
)

// runc is the real runc, if set at build time (see the package comment).
var runc string

// The wrapper's own flags; they come before runc's.
const (
	runcFlag     = "--netshim-runc="
	netnsDirFlag = "--netshim-netns-dir="
)

func main() {
	path, dirs, args, err := ownFlags(os.Args[1:])
	cmd := runcwrap.Parse(args)
	if err != nil {
		fail(cmd, err)
	}
	if path == "" {
		path = runc
	}
	real, err := runcwrap.RealRunc(path)
	if err != nil {
		fail(cmd, err)
	}
	v := podns.Verifier{Dirs: dirs, ReadKey: podns.ReadKey, Check: podns.Verify}
	if err := edit(cmd, v); err != nil {
		fail(cmd, err)
	}
	fail(cmd, runcwrap.Exec(real, args))
}

// ownFlags takes the wrapper's flags off the front of its arguments.
func ownFlags(args []string) (runcPath string, dirs []string, rest []string, err error) {
	for len(args) > 0 {
		switch a := args[0]; {
		case strings.HasPrefix(a, runcFlag):
			runcPath = strings.TrimPrefix(a, runcFlag)
		case strings.HasPrefix(a, netnsDirFlag):
			d := strings.TrimPrefix(a, netnsDirFlag)
			if !filepath.IsAbs(d) {
				return "", nil, nil, fmt.Errorf("%s%s: want an absolute directory", netnsDirFlag, d)
			}
			dirs = append(dirs, filepath.Clean(d))
		default:
			return runcPath, dirs, args, nil
		}
		args = args[1:]
	}
	return runcPath, dirs, args, nil
}

// edit makes the changes a command needs before runc runs it.
func edit(cmd runcwrap.Command, v podns.Verifier) error {
	switch {
	case cmd.Creates():
		bundle, err := cmd.BundleDir()
		if err != nil {
			return err
		}
		err = runcwrap.EditFile(filepath.Join(bundle, "config.json"), func(b []byte) ([]byte, bool, error) {
			return podns.ApplyToConfig(b, v.Accept)
		})
		if err != nil && cmd.ID != "" {
			return fmt.Errorf("container %s: %w", cmd.ID, err)
		}
		return err
	case cmd.Name == "exec" && cmd.Process != "":
		return runcwrap.EditFile(cmd.Process, podns.StripFromProcess)
	}
	return nil
}

func fail(cmd runcwrap.Command, err error) {
	msg := "netshim-oci: " + err.Error()
	// containerd's shim reports the last error of runc's log file as the
	// runtime's error, which is what `docker start`, Docker's API and
	// netshim's log show; stderr is for a person running the wrapper.
	if lerr := runcwrap.LogError(cmd, msg); lerr != nil {
		fmt.Fprintf(os.Stderr, "netshim-oci: writing runc's log %s: %v\n", cmd.Log, lerr)
	}
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}
