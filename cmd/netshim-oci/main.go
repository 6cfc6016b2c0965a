// Command netshim-oci is the OCI runtime netshim registers in the Docker
// engine as "netshim-oci" (dockerd --add-runtime netshim-oci=PATH, or
// daemon.json "runtimes"). It gets runc's command line from the engine's
// containerd shim and execs the real runc with the same arguments, so that
// runc is the process the shim talks to. Before that:
//
//   - for `create` and `run`, if the bundle's config.json carries netshim's
//     marker in its environment (podns.EnvKey, which netshim sets on the pod
//     sandboxes it runs in pinned-netns mode), it checks that each named
//     path is a pinned namespace of the right kind (a namespace file, not a
//     process's under /proc), puts the paths in linux.namespaces, and
//     removes the marker from the environment;
//   - for `exec`, it removes the marker from the process file, which Docker
//     builds from the container's environment.
//
// Docker cannot run a container in a network namespace given by path; this
// is how netshim's pods get the namespace netshim made (and CNI set up)
// before their first container started.
//
// The real runc is the path given by a first argument --netshim-runc=PATH
// (daemon.json "runtimeArgs"), else the one set at build time (go build
// -ldflags "-X main.runc=PATH"), else runc on PATH.
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

// runcFlag is the wrapper's own flag; it must come first.
const runcFlag = "--netshim-runc="

func main() {
	args := os.Args[1:]
	path := runc
	if len(args) > 0 && strings.HasPrefix(args[0], runcFlag) {
		path, args = strings.TrimPrefix(args[0], runcFlag), args[1:]
	}
	real, err := runcwrap.RealRunc(path)
	if err != nil {
		fail(err)
	}
	if err := edit(runcwrap.Parse(args)); err != nil {
		fail(err)
	}
	fail(runcwrap.Exec(real, args))
}

// edit makes the changes a command needs before runc runs it.
func edit(cmd runcwrap.Command) error {
	switch {
	case cmd.Creates():
		bundle, err := cmd.BundleDir()
		if err != nil {
			return err
		}
		return runcwrap.EditFile(filepath.Join(bundle, "config.json"), func(b []byte) ([]byte, bool, error) {
			return podns.ApplyToConfig(b, podns.Verify)
		})
	case cmd.Name == "exec" && cmd.Process != "":
		return runcwrap.EditFile(cmd.Process, podns.StripFromProcess)
	}
	return nil
}

func fail(err error) {
	// The shim puts runc's output in the error the engine returns, so
	// this is what `docker start` and netshim's log show.
	fmt.Fprintf(os.Stderr, "netshim-oci: %v\n", err)
	os.Exit(1)
}
