// Package multinode is the multi-node cluster suite (make e2e-multinode):
// nodes on this machine made by test/harness (Lan, Node), each running its
// own Docker 29 engine, netshim and kubelet, joined into a cluster with
// kubeadm. Its tests carry the build tag multinode and need root.
package multinode
