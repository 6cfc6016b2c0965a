// Package critest runs the CRI conformance suite, critest from cri-tools
// v1.34.0, against netshim, with no internet: `make conformance`.
//
// hack/conformance.sh installs the packages, builds netshim, critest and
// the test images and starts the Docker engine; the test here (behind the
// "critest" build tag, run as a compiled test binary so that its last line
// is the count line) sets up the world through test/harness: a
// docker-registry on 127.0.0.1:5000 holding critest's images, a CNI
// network of its own (bridge nsconf0, 10.125.0.0/16) and netshim on a temp
// socket. It then runs critest with the skips of skips.go, prints one line
// per spec, critest's summary and, last,
// `conformance: N passed, N failed, N skipped`, and undoes everything.
//
// The files without the build tag (skips, output parsing, the image plan,
// the cleanup helpers) have unit tests that need no root and no Docker.
package critest
