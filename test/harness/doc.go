// Package harness sets up the world netshim's end-to-end tests, faults
// suite and benchmark run in: the netshim daemon as a real process, CNI
// network configs in a conf dir of their own, a private dockerd the test may
// stop and restart, a CRI client, bounded polls, and a real kubelet
// (Kubelet) with a HostGuard that saves and restores the host state kubelet
// changes (sysctls, kubepods cgroups, directories, mounts).
//
// Everything is built from options (StartNetshim(t, WithKubenet(...),
// WithArgs(...))) and, in the testing.TB forms, removed again through
// t.Cleanup. The error-returning forms (NewNetshim, Netshim.Start) serve
// callers that are not tests, such as the benchmark command.
//
// The CRI configs the tests send are built the same way: Pod(name,
// InNamespace(ns), WithHostPort(80, 8080, TCP)) and Container(name, image,
// WithCommand(...)) give the defaults every suite shares, so a test states
// only what it is about.
//
// The package needs no build tag: it only starts processes when asked, so
// its own unit tests run without root or Docker.
package harness
