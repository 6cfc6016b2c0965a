// Package takeover proves that netshim takes over a node that ran its pods
// on cri-dockerd (issue 12): kubelet runs static pods on cri-dockerd
// v0.4.3, both stop, netshim starts with --adopt-cri-dockerd and kubelet
// restarts on netshim's socket; the pods keep their sandbox and container
// ids, attempts, restart counts, labels, annotations and IPs, keep
// answering on their pod IPs and hostPort, their logs go on in CRI format
// at the path kubelet reads, and removing them through netshim frees
// everything their network held.
//
// The end-to-end test is behind the "takeover" build tag and needs root:
// run `make e2e-takeover`. The comparison and log checks it is made of
// (compare.go) are unit-tested without it.
package takeover
