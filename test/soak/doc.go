// Package soak is netshim's churn soak (make soak): pod lifecycles of one
// container each, at a steady rate with bursts, against a real dockerd
// and the real CNI plugins, in each sandbox mode, while netshim, dockerd
// and CNI plugins are killed at random moments. It samples netshim's
// resident memory, open descriptors, goroutines and live heap every 10 s
// and fits their growth per 1,000 lifecycles, counts every error a kubelet
// would have seen by its gRPC code, checks that no sandbox is READY without
// an IP, and audits the node for leaks at the end (test/e2e/leak-audit.sh).
//
// The soak itself is behind the "soak" build tag and needs root, a running
// dockerd and the images of hack/images.sh; the arithmetic it reports with
// (slopes, kill schedule, tallies) is plain code with unit tests.
package soak
