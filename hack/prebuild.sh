#!/usr/bin/env bash
# hack/prebuild.sh: builds, one after the other, what make test's later suites
# build for themselves: crictl and critest, the kubelet v1.37 and the VM
# node's image (e2e-vm starts early), the Docker 29 engine, the kubelet
# v1.36, the v1.36 control plane (with
# kubeadm and kube-proxy), the kubeadm cluster's programs (etcd, flannel,
# CoreDNS: hack/cluster-images.sh bins), the node e2e programs (agnhost,
# which e2e-multinode's workloads run too), Kubernetes' e2e suite
# (conformance-cluster-quick's e2e.test), cri-dockerd and the node e2e
# suite, in the order make test needs them.
#
# Why: on a machine with a cold Go cache these builds take about 30 minutes of
# two cores, while most suites leave the CPU idle waiting for Docker, kubelet or
# a VM. make test starts this script in the background at idle priority (nice
# 19, lowest best-effort I/O class), so the builds use what the suites leave;
# when a suite needs an artefact that is still being built, its own call of
# the same build script waits on that script's lock and then finds the
# artefact made. Every build script here is cached by version stamp, so on a
# warm machine this is a round of version checks.
#
# A step that fails is reported and skipped: the suite that needs the artefact
# builds it again in the foreground, where its error fails that suite. Prints
# one line per step with its time, and `prebuild: done in N s` last.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

# NAME|COMMAND, in the order make test's suites need them (TEST_TARGETS).
STEPS=(
  "crictl and critest|hack/build-crictl.sh all"
  "kubelet v1.37|hack/build-kubelet.sh build v1.37"
  "VM node image|hack/vm-image.sh build"
  "Docker 29|hack/docker29.sh build"
  "kubelet v1.36|hack/build-kubelet.sh build v1.36"
  "control plane v1.36|hack/build-kubelet.sh cluster v1.36"
  "cluster programs|hack/cluster-images.sh bins"
  "node e2e programs|hack/node-e2e-images.sh bins"
  "e2e suite v1.36|hack/build-kubelet.sh e2e v1.36"
  "cri-dockerd|hack/build-cri-dockerd.sh cri-dockerd"
  "node e2e suite v1.36|hack/build-kubelet.sh e2e-node v1.36"
)

start=$SECONDS
failed=0
for step in "${STEPS[@]}"; do
  name=${step%%|*}
  read -r -a cmd <<<"${step#*|}"
  t=$SECONDS
  if "${cmd[@]}" </dev/null; then
    echo "prebuild: $name: ok ($((SECONDS - t)) s)"
  else
    echo "prebuild: $name: FAILED ($((SECONDS - t)) s; the suite that needs it builds it again)"
    failed=$((failed + 1))
  fi
done
echo "prebuild: done in $((SECONDS - start)) s, $failed failed"
