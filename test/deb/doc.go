// Package deb tests netshim's Debian package, `make test-deb`: the test
// behind the "deb" build tag installs the package `make deb` built into this
// machine with dpkg -i, checks its files, units and version, reinstalls it
// over an operator's edits, removes and purges it, and checks that the
// machine is left as it was found. It needs root and the package's Depends
// (docker.io or docker-ce) installed, but no Docker daemon and no systemd
// running.
//
// The files without the build tag (the machine-state snapshot, unit and
// dpkg parsing, the version mapping of hack/version.sh) have unit tests that
// need no root.
package deb
