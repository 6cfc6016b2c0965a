// Package faults is netshim's fault-injection suite: a real dockerd, the
// real CNI plugins and netshim as a real process, hurt on purpose (SIGKILL
// mid-RPC, a slow or hanging or lying CNI plugin, dockerd restarted under
// load, damaged checkpoints, a full disk, duplicate requests, a CNI GC
// that hangs in its plugin while pods start, an image pull whose registry
// connection stalls or crawls). After each scenario the leak audit
// (test/e2e/leak-audit.sh) runs on what the scenario made, and every
// sandbox a client was told exists must still exist unless that client
// removed it.
//
// The tests are behind the "faults" build tag and need root, a running
// dockerd, the images of hack/images.sh, Debian's docker-registry and
// the CNI 1.1 plugins of hack/cni-plugins.sh (CNI_V11_BIN_DIR): run
// `make e2e-faults`. FAULTS_ONLY=name,name runs only the scenarios named
// (the names of the `faults:` lines); unset, all run.
package faults
