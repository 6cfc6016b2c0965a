// Package faults is netshim's fault-injection suite: a real dockerd, the
// real CNI plugins and netshim as a real process, hurt on purpose (SIGKILL
// mid-RPC, a slow or hanging or lying CNI plugin, dockerd restarted under
// load, damaged checkpoints, a full disk, duplicate requests). After each
// scenario the leak audit (test/e2e/leak-audit.sh) runs on what the
// scenario made, and every sandbox a client was told exists must still
// exist unless that client removed it.
//
// The tests are behind the "faults" build tag and need root, a running
// dockerd and the images of hack/images.sh: run `make e2e-faults`.
package faults
