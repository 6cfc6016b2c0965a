# netshim: a CRI runtime daemon that runs Kubernetes pods on a Docker engine.
# See README.md. Targets that touch the system (deps, images, e2e, test, run) need root.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

OUT := $(CURDIR)/_output
GO ?= go
# VERSION: from `git describe --tags --always --dirty`, in Debian's form (hack/version.sh:
# v1.2.3-4-gabc1234 is 1.2.3+4.gabc1234, a checkout without tags 0.0~gitYYYYMMDD.HASH), the
# same string in the binary and in the package, so `netshim version` and `dpkg -s netshim` agree.
# Computed when a target uses it (LDFLAGS is recursive too), so a tag it cannot map fails only the
# targets that need a version.
VERSION ?= $(or $(shell hack/version.sh),$(error hack/version.sh failed))
LDFLAGS = -X github.com/netshim/netshim/pkg/version.Version=$(VERSION)
STATICCHECK_VERSION := 0.8.2
STATICCHECK := $(OUT)/bin/staticcheck
# Build tags that select extra files: lint checks them too.
LINT_TAGS := e2e,kubelet,faults,critest,cluster,nodeconformance,deb,takeover,vm,soak,multinode,conformancecluster

# ENGINE: the Docker engine e2e and conformance run against.
#   docker20  the system's Docker 20.10 (Debian's docker.io; hack/dockerd.sh)
#   docker20-runc143  a private Docker 20.10 with runc 1.4.3 as its default runtime (RUNC=1.4.3 hack/dockerd.sh)
#   docker29  a private Docker 29 (moby v2.0.0-beta.24, containerd v2.4.2, runc v1.4.3,
#             built from the Go module proxy into _output/docker29; hack/docker29.sh)
# The tests and scripts reach the engine through DOCKER_HOST (the docker CLI, the
# leak audit) and netshim through --docker-endpoint $$DOCKER_HOST (test/harness).
ENGINE ?= docker20
ifeq ($(ENGINE),docker20)
ENGINE_SCRIPT := hack/dockerd.sh
ENGINE_HOST := unix:///var/run/docker.sock
ENGINE_DOCKERD :=
else ifeq ($(ENGINE),docker20-runc143)
ENGINE_SCRIPT := RUNC=1.4.3 hack/dockerd.sh
ENGINE_HOST := unix:///run/netshim-docker20-runc143/docker.sock
ENGINE_DOCKERD :=
else ifeq ($(ENGINE),docker29)
ENGINE_SCRIPT := hack/docker29.sh
ENGINE_HOST := unix:///run/netshim-docker29/docker.sock
ENGINE_DOCKERD := $(OUT)/docker29/bin/dockerd
else
$(error ENGINE=$(ENGINE): want docker20, docker20-runc143 or docker29)
endif

.PHONY: build build-release install deb test-deb deps images crictl critest unit fuzz lint staticcheck conformance-userns e2e e2e-docker-netns e2e-faults soak e2e-kubelet e2e-takeover e2e-cluster e2e-multinode test test-pinned test-pauseless run clean bench bench-kubelet dockerd-start dockerd-stop docker29 test-docker29 node-conformance node-conformance-quick node-e2e-images e2e-vm

## build: compile the daemon into _output/netshim and its OCI runtime wrapper into _output/netshim-oci
# (registered in the engine as runtime netshim-oci for --sandbox-netns=pinned; README "Pinned netns")
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(OUT)/netshim ./cmd/netshim
	$(GO) build -ldflags "$(LDFLAGS)" -o $(OUT)/netshim-oci ./cmd/netshim-oci

## build-release: the binary make install and make deb ship, in _output/release, with its man page
# (made from its own --help). Linked against glibc like make build's (cgo: the system's resolver), so
# the tested binary and the shipped one do not differ in that: a static one (CGO_ENABLED=0) draws
# lintian's statically-linked-binary error, which it waives only for packages built from Debian's Go
# sources. -trimpath for a reproducible build; stripped (-s -w; lintian's unstripped-binary-or-object is
# an error; panics and pprof keep their symbols, which live in pclntab); hardened as Debian builds C
# (lintian's hardening-* tags): PIE, full RELRO, fortified and stack-protected cgo C code.
RELEASE_DIR := $(OUT)/release
RELEASE_LDFLAGS = -s -w -linkmode=external -extldflags '-Wl,-z,relro,-z,now' $(LDFLAGS)
build-release:
	CGO_ENABLED=1 CGO_CPPFLAGS='-D_FORTIFY_SOURCE=2' CGO_CFLAGS='-O2 -fstack-protector-strong' \
		$(GO) build -trimpath -buildmode=pie -ldflags "$(RELEASE_LDFLAGS)" -o $(RELEASE_DIR)/netshim ./cmd/netshim
	CGO_ENABLED=1 CGO_CPPFLAGS='-D_FORTIFY_SOURCE=2' CGO_CFLAGS='-O2 -fstack-protector-strong' \
		$(GO) build -trimpath -buildmode=pie -ldflags "$(RELEASE_LDFLAGS)" -o $(RELEASE_DIR)/netshim-oci ./cmd/netshim-oci
	@hack/manpage.sh $(RELEASE_DIR)/netshim '$(VERSION)' \
		"$$(TZ=UTC0 git show -s --format=%cd --date=format-local:%Y-%m-%d HEAD 2>/dev/null || date -u +%Y-%m-%d)" \
		>$(RELEASE_DIR)/netshim.8.tmp
	@mv $(RELEASE_DIR)/netshim.8.tmp $(RELEASE_DIR)/netshim.8
	@sed -e 's|@VERSION@|$(VERSION)|' \
		-e "s|@DATE@|$$(TZ=UTC0 git show -s --format=%cd --date=format-local:%Y-%m-%d HEAD 2>/dev/null || date -u +%Y-%m-%d)|" \
		deploy/man/netshim-oci.8.in >$(RELEASE_DIR)/netshim-oci.8

## install: install build-release's binary and man page, the systemd units and /etc/default/netshim
# under DESTDIR (empty: this machine, root), without a package. PREFIX=/usr puts the binary in /usr/bin
# and the units in /lib/systemd/system, as the package does; PREFIX=/usr/local puts them in
# /usr/local/bin and /usr/local/lib/systemd/system (systemd reads both) and points the units' ExecStart
# there. An /etc/default/netshim that differs from deploy/default/netshim is kept, not overwritten: it
# is the operator's configuration (dpkg treats it as a conffile likewise). Nothing is enabled or
# started: after installing, systemctl daemon-reload and enable what you need. make deb stages with it,
# so the package and make install ship one file list.
PREFIX ?= /usr
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR ?= $(if $(filter /usr,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)
install: build-release
	install -d -m 0755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/default $(DESTDIR)$(MANDIR)/man8
	install -m 0755 $(RELEASE_DIR)/netshim $(DESTDIR)$(BINDIR)/netshim
	install -m 0755 $(RELEASE_DIR)/netshim-oci $(DESTDIR)$(BINDIR)/netshim-oci
	for unit in netshim.service netshim.socket; do \
		sed 's|/usr/bin/netshim|$(BINDIR)/netshim|g' deploy/systemd/$$unit >$(RELEASE_DIR)/$$unit; \
		install -m 0644 $(RELEASE_DIR)/$$unit $(DESTDIR)$(UNITDIR)/$$unit; \
	done
	for page in netshim netshim-oci; do \
		gzip -9n <$(RELEASE_DIR)/$$page.8 >$(RELEASE_DIR)/$$page.8.gz; \
		install -m 0644 $(RELEASE_DIR)/$$page.8.gz $(DESTDIR)$(MANDIR)/man8/$$page.8.gz; \
	done
	@conf=$(DESTDIR)$(SYSCONFDIR)/default/netshim; \
	if [[ -e $$conf ]] && ! cmp -s deploy/default/netshim "$$conf"; then \
		echo "install: kept $$conf: it differs from deploy/default/netshim (an operator's edits)"; \
	else \
		echo "install -m 0644 deploy/default/netshim $$conf"; install -m 0644 deploy/default/netshim "$$conf"; \
	fi

## deb: build _output/netshim_<version>_<arch>.deb with dpkg-deb from make install's files (hack/deb.sh),
# then check it with lintian (fails on an error)
DEB_ARCH = $(shell dpkg --print-architecture)
DEB_FILE = $(OUT)/netshim_$(VERSION)_$(DEB_ARCH).deb
DEB_STAGING := $(OUT)/deb/root
deb:
	@$(MAKE) --no-print-directory deps
	rm -rf $(DEB_STAGING)
	@$(MAKE) --no-print-directory install DESTDIR=$(DEB_STAGING) PREFIX=/usr VERSION='$(VERSION)'
	@VERSION='$(VERSION)' hack/deb.sh $(DEB_STAGING) '$(DEB_FILE)'

## test-deb: make deb, then install the package into this machine with dpkg -i, check its files, units
# and version, upgrade it over an edited conffile, and purge it, leaving nothing behind (root; test/deb;
# refuses to run if a netshim package is installed already)
test-deb:
	@if [[ $$(id -u) -ne 0 ]]; then echo "test-deb: must run as root" >&2; exit 1; fi
	@$(MAKE) --no-print-directory deb
	NETSHIM_DEB='$(DEB_FILE)' $(GO) test -count=1 -tags deb -v ./test/deb/

## deps: install the missing Debian packages (docker.io, CNI plugins, iptables, ...)
deps:
	@hack/install-deps.sh

## dockerd-start / dockerd-stop: start dockerd if none answers / stop the one hack/dockerd.sh started
dockerd-start:
	@hack/dockerd.sh start

dockerd-stop:
	@hack/dockerd.sh stop

## docker29: build the private Docker 29 engine into _output/docker29/bin (cached)
docker29:
	@hack/docker29.sh build

## images: build the local pause and busybox images (starts dockerd if needed)
images: dockerd-start
	@hack/images.sh

## crictl / critest: build cri-tools v1.34.0 from the Go module proxy into _output/
crictl:
	@hack/build-crictl.sh crictl

critest:
	@hack/build-crictl.sh critest

## conformance: critest v1.34.0 against netshim, offline (root; registry on 127.0.0.1:5000; hack/conformance.sh installs and builds, test/critest runs it)
# Extra critest flags: make conformance CRITEST_ARGS="-ginkgo.focus=Image". ENGINE=docker29 for Docker 29.
.PHONY: conformance
conformance:
	@ENGINE=$(ENGINE) hack/conformance.sh $(CRITEST_ARGS)

## unit: unit tests with the race detector
unit:
	$(GO) test -race -count=1 ./pkg/... ./cmd/... ./internal/... ./test/bench/... ./test/kubeletbench/... ./test/harness/... ./test/node-conformance/... ./test/deb/... ./test/takeover/... ./test/tools/... ./test/soak/... ./test/vmnode/... ./test/e2e-vm/guest/... ./test/multinode/...

## fuzz: run every Go fuzz target under pkg/ for FUZZTIME each (default 30s)
# go test takes one -fuzz target per run, so the targets (func FuzzX in a
# _test.go file) are found with grep and run one by one, all of them even
# if one fails; -parallel keeps the CPU use modest. A failing input is
# written to the package's testdata/fuzz/ for `go test -run`.
# Go before 1.27 can fail a target with a bare "context deadline exceeded"
# when -fuzztime ends (a race in its fuzz coordinator, go.dev/issue/75804,
# seen in CI); a run that fails that way and writes no failing input is
# reported and not counted as a failure.
FUZZTIME ?= 30s
FUZZPARALLEL ?= 2
fuzz:
	@targets=$$(grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' pkg | \
		sed 's|^\(.*\)/[^/]*:func \(.*\)$$|./\1 \2|' | sort -u); \
	if [[ -z "$$targets" ]]; then echo "fuzz: no fuzz targets under pkg/" >&2; exit 1; fi; \
	failed=0; log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	while read -r dir target; do \
		echo "==> fuzz $$dir $$target ($(FUZZTIME))"; \
		before=$$({ ls "$$dir/testdata/fuzz/$$target" 2>/dev/null || true; } | wc -l); \
		rc=0; $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -parallel $(FUZZPARALLEL) $$dir 2>&1 | tee "$$log" || rc=$$?; \
		[[ $$rc -eq 0 ]] && continue; \
		after=$$({ ls "$$dir/testdata/fuzz/$$target" 2>/dev/null || true; } | wc -l); \
		if [[ $$after -eq $$before ]] && grep -qx '    context deadline exceeded' "$$log" && \
			! grep -q 'Failing input written' "$$log"; then \
			echo "fuzz: $$target: Go's fuzz coordinator failed at the end of -fuzztime with no failing input (go.dev/issue/75804); not counted"; \
		else failed=1; fi; \
	done <<< "$$targets"; \
	exit $$failed

## lint: gofmt, go vet, staticcheck and the systemd units (systemd-analyze verify, hack/verify-units.sh)
lint: staticcheck
	@unformatted=$$(find . \( -path ./_output -o -path ./.git -o -path ./vendor \) -prune -o -name '*.go' -print0 | \
		xargs -0 -r gofmt -l); \
	if [[ -n "$$unformatted" ]]; then \
		echo "lint: these files need gofmt -w:" >&2; echo "$$unformatted" >&2; exit 1; \
	fi
	$(GO) vet -tags $(LINT_TAGS) ./...
	$(STATICCHECK) -tags $(LINT_TAGS) ./...
	@hack/verify-units.sh

# staticcheck: install the pinned staticcheck into _output/bin unless it is there already
staticcheck:
	@if ! { [[ -x $(STATICCHECK) ]] && $(STATICCHECK) -version 2>/dev/null | grep -F "($(STATICCHECK_VERSION))" >/dev/null; }; then \
		GOBIN=$(OUT)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v$(STATICCHECK_VERSION); \
	fi

## e2e: end-to-end tests against a real dockerd and the Debian CNI plugins (root)
# The engine (ENGINE, above) is stopped afterwards (also on failure) if this target started
# it. The leak audit (test/e2e/leak-audit.sh) runs after the tests, also when they failed,
# against the same engine; the target fails if either does.
e2e:
	@if [[ $$(id -u) -ne 0 ]]; then echo "e2e: must run as root" >&2; exit 1; fi
	@$(MAKE) --no-print-directory deps build crictl
	@export DOCKER_HOST=$(ENGINE_HOST) E2E_DOCKERD=$(ENGINE_DOCKERD) E2E_ENGINE=$(ENGINE); \
	if ! $(ENGINE_SCRIPT) status >/dev/null 2>&1; then trap '$(ENGINE_SCRIPT) stop' EXIT; fi; \
	$(ENGINE_SCRIPT) start; \
	hack/images.sh; \
	hack/cni-plugins.sh; \
	NETSHIM_BIN=$(OUT)/netshim CRICTL_BIN=$(OUT)/crictl CNI_BIN_DIR=/usr/lib/cni CNI_V11_BIN_DIR=$(OUT)/cni-1.9.1 \
		$(GO) test -race -count=1 -tags e2e -v -timeout 20m ./test/e2e/... || rc=$$?; \
	test/e2e/leak-audit.sh --e2e-tmp || rc=1; \
	exit $${rc:-0}

## e2e-faults: fault injection against a real dockerd, the Debian CNI plugins and netshim as a
# process (SIGKILL mid-RPC, slow/hanging/lying CNI plugins, dockerd restarted, damaged
# checkpoints, full disk, duplicate requests, a hanging CNI GC, a stalled image pull);
# test/faults, leak audit after every scenario; prints `faults: <scenario>: PASS|FAIL (...)`
# and a summary line; FAULTS_ONLY=name,name runs only those scenarios (root). The CNI GC
# scenario needs the CNI 1.1 plugins of hack/cni-plugins.sh (CNI_V11_BIN_DIR)
e2e-faults:
	@if [[ $$(id -u) -ne 0 ]]; then echo "e2e-faults: must run as root" >&2; exit 1; fi
	@$(MAKE) --no-print-directory deps build
	@if ! hack/dockerd.sh status >/dev/null 2>&1; then trap 'hack/dockerd.sh stop' EXIT; fi; \
	hack/dockerd.sh start; \
	hack/images.sh; \
	hack/cni-plugins.sh; \
	NETSHIM_BIN=$(OUT)/netshim CNI_BIN_DIR=/usr/lib/cni CNI_V11_BIN_DIR=$(OUT)/cni-1.9.1 LEAK_AUDIT=$(CURDIR)/test/e2e/leak-audit.sh \
		$(GO) test -race -count=1 -tags faults -v -timeout 15m ./test/faults/... 2>&1 | \
		tee $(OUT)/e2e-faults.log | grep -E '^(faults: |--- FAIL|FAIL|ok|panic)|_test.go:[0-9]+:' || rc=$$?; \
	exit $${rc:-0}

## soak: a churn soak (test/soak): in each sandbox mode (SOAK_MODES, default docker pinned pauseless) for
# SOAK_MINUTES each (default 3, as in make test; docs/benchmarks.md has 60-minute runs), pod lifecycles of one
# container each at SOAK_RATE a second (default 1) with a burst of SOAK_BURST (8) every minute, on a private dockerd
# and the CNI plugins, while netshim, dockerd and CNI plugins are SIGKILLed at random moments (one of each per started
# 10 minutes). Prints per mode `soak: MODE: PASS|FAIL` with the lifecycles, kills, failed calls by code, READY
# sandboxes without an IP, netshim's RSS, live heap, fds and goroutines per 1,000 lifecycles, and the leak audit;
# fails on a leak, a READY sandbox without an IP, a stuck lifecycle or a slope above its bound. The table goes to
# _output/soak.md, the whole log to _output/soak.log (root)
SOAK_MINUTES ?= 3
SOAK_MODES ?= docker pinned pauseless
soak:
	@if [[ $$(id -u) -ne 0 ]]; then echo "soak: must run as root" >&2; exit 1; fi
	@$(MAKE) --no-print-directory deps build
	@if ! hack/dockerd.sh status >/dev/null 2>&1; then trap 'hack/dockerd.sh stop' EXIT; fi; \
	hack/dockerd.sh start; \
	hack/images.sh; \
	modes=($(SOAK_MODES)); timeout=$$(awk -v m='$(SOAK_MINUTES)' -v n=$${#modes[@]} 'BEGIN { printf "%d", n * (m + 10) + 5 }'); \
	NETSHIM_BIN=$(OUT)/netshim CNI_BIN_DIR=/usr/lib/cni LEAK_AUDIT=$(CURDIR)/test/e2e/leak-audit.sh \
	SOAK_MINUTES='$(SOAK_MINUTES)' SOAK_MODES='$(SOAK_MODES)' SOAK_RATE='$(SOAK_RATE)' SOAK_BURST='$(SOAK_BURST)' \
	SOAK_WORKERS='$(SOAK_WORKERS)' SOAK_SEED='$(SOAK_SEED)' SOAK_AUDIT_LOCK='$(SOAK_AUDIT_LOCK)' SOAK_REPORT=$(OUT)/soak.md SOAK_STATE=$(OUT)/soak.state \
		$(GO) test -race -count=1 -tags soak -v -timeout "$${timeout}m" ./test/soak/ 2>&1 | \
		tee $(OUT)/soak.log | grep --line-buffered -E '^(soak: |--- FAIL|FAIL|ok|panic)|_test.go:[0-9]+:' || rc=$$?; \
	exit $${rc:-0}

## e2e-kubelet: real kubelets v1.36 and v1.37 (built from the module proxy into _output/kubelet-v1.3x)
# run a static pod on netshim, with default gates and with PodAndContainerStatsFromCRI+EventedPLEG;
# prints PASS/FAIL per check and a summary line last (root)
e2e-kubelet:
	@E2E_KUBELET_MINORS='$(E2E_KUBELET_MINORS)' hack/e2e-kubelet.sh

## e2e-takeover: netshim takes over a node that ran its pods on cri-dockerd (issue 12; root)
# kubelet v1.36 (_output/kubelet-v1.36) runs two static pods on cri-dockerd v0.4.3 (built from
# the Go module proxy into _output/cri-dockerd-v0.4.3 by hack/build-cri-dockerd.sh, cached) over a
# private dockerd whose default runtime is test/tools/oomclamp (cri-dockerd asks oom_score_adj
# -998, which runc cannot set without CAP_SYS_RESOURCE); kubelet and cri-dockerd stop, netshim
# starts with --adopt-cri-dockerd and kubelet restarts on its socket; test/takeover checks that
# ids, attempts, restart counts, the CRI answers, IPs, hostPort and logs carry over, removes the
# pods through netshim and audits the node. Artifacts (logs, both runtimes' answers) in
# _output/e2e-takeover/. E2E_TAKEOVER_ONLY_CRI_DOCKERD=1 runs the world on cri-dockerd alone
# (pods up, checked, torn down through cri-dockerd, audited): no netshim involved.
e2e-takeover:
	@if [[ $$(id -u) -ne 0 ]]; then echo "e2e-takeover: must run as root" >&2; exit 1; fi
	@$(MAKE) --no-print-directory deps build
	@hack/build-kubelet.sh build v1.36
	@hack/build-cri-dockerd.sh all
	@if ! hack/dockerd.sh status >/dev/null 2>&1; then trap 'hack/dockerd.sh stop' EXIT; fi; \
	hack/dockerd.sh start; \
	hack/images.sh; \
	rm -rf $(OUT)/e2e-takeover; mkdir -p $(OUT)/e2e-takeover; \
	NETSHIM_BIN=$(OUT)/netshim KUBELET_BIN=$(OUT)/kubelet-v1.36 \
	CRI_DOCKERD_BIN=$(OUT)/cri-dockerd-v0.4.3/cri-dockerd OOMCLAMP_BIN=$(OUT)/oomclamp \
	CNI_BIN_DIR=/usr/lib/cni LEAK_AUDIT=$(CURDIR)/test/e2e/leak-audit.sh \
	E2E_TAKEOVER_ARTIFACTS=$(OUT)/e2e-takeover E2E_TAKEOVER_STATE=$(OUT)/e2e-takeover.state \
	E2E_TAKEOVER_ONLY_CRI_DOCKERD=$(E2E_TAKEOVER_ONLY_CRI_DOCKERD) \
		$(GO) test -count=1 -tags takeover -v -timeout 15m ./test/takeover/ 2>&1 | tee $(OUT)/e2e-takeover.log

## e2e-cluster: a single-node Kubernetes v1.36 cluster on the loopback device with netshim as its runtime (root)
# etcd (Debian's etcd-server, unpacked into _output/etcd), kube-apiserver,
# kube-controller-manager, kube-scheduler and kubectl (built from the Go module
# proxy into _output/k8s-v1.36 by hack/build-kubelet.sh cluster, cached) and the
# kubelet (_output/kubelet-v1.36) on netshim (kubenet, bridge nsclu0, the Node's
# podCIDR out of 10.177.0.0/16 arriving through UpdateRuntimeConfig) on a
# private dockerd; the kubelet listens on 10.180.0.1, an address put on lo for
# the run. test/e2e-cluster builds and tears down that world itself,
# runs one named test per check, audits the host afterwards, and prints
# `e2e-cluster: N passed, N failed`; logs in _output/e2e-cluster/.
e2e-cluster:
	@if [[ $$(id -u) -ne 0 ]]; then echo "e2e-cluster: must run as root" >&2; exit 1; fi
	@$(MAKE) --no-print-directory deps build
	@hack/build-kubelet.sh build v1.36
	@hack/build-kubelet.sh cluster v1.36
	@if ! hack/dockerd.sh status >/dev/null 2>&1; then trap 'hack/dockerd.sh stop' EXIT; fi; \
	hack/dockerd.sh start; \
	hack/images.sh; \
	log=$(OUT)/e2e-cluster.log; \
	NETSHIM_BIN=$(OUT)/netshim KUBELET_BIN=$(OUT)/kubelet-v1.36 K8S_BIN_DIR=$(OUT)/k8s-v1.36 ETCD_BIN=$(OUT)/etcd/etcd \
	CNI_BIN_DIR=/usr/lib/cni LEAK_AUDIT=$(CURDIR)/test/e2e/leak-audit.sh \
	E2E_CLUSTER_STATE=$(OUT)/e2e-cluster.state E2E_CLUSTER_ARTIFACTS=$(OUT)/e2e-cluster \
		$(GO) test -count=1 -tags cluster -v -timeout 30m ./test/e2e-cluster 2>&1 | tee "$$log" || rc=$$?; \
	passed=$$(grep -cE '^(--- PASS: Test|PASS teardown)' "$$log" || true); \
	failed=$$(grep -cE '^(--- FAIL: Test|FAIL (teardown|setup))' "$$log" || true); \
	if [[ $${rc:-0} -ne 0 && $$failed -eq 0 ]]; then echo "FAIL run: go test exited $$rc without a failed test (timeout? panic?)"; failed=1; fi; \
	echo "e2e-cluster: $$passed passed, $$failed failed"; \
	[[ $$failed -eq 0 && $${rc:-0} -eq 0 ]]

## e2e-multinode: nodes on one machine, each a real node (issue 24; root): a "lan" network namespace
# with a bridge, and per node a netns plus a persistent mount namespace (test/harness Lan and Node:
# its own /var/lib/kubelet, /etc/kubernetes, /var/lib/docker, ... a tmpfs /run, a machine-id, a
# cgroup root), its own Docker 29 engine (hack/docker29.sh build) and netshim from the built tree;
# the kubeadm files the cluster is built with, checked by kubeadm v1.36 (hack/build-kubelet.sh cluster);
# then a cluster as an operator builds one: the images of hack/cluster-images.sh in a registry on the
# lan, kubeadm init on node1 (the control plane as static pods on netshim), flannel, kubeadm join.
# On that cluster, before the drain, it runs conformance-cluster-quick's subset (E2E_MULTINODE_CONFORMANCE,
# default quick; empty: none), which saves make test a second cluster; results in
# _output/conformance-cluster-quick/. Everything is recorded in a HostGuard (_output/e2e-multinode.state)
# and undone, also after a killed run. Last line `e2e-multinode: N passed, N failed`; log _output/e2e-multinode.log.
E2E_MULTINODE_CONFORMANCE ?= quick
e2e-multinode: dockerd-start
	@if [[ $$(id -u) -ne 0 ]]; then echo "e2e-multinode: must run as root" >&2; exit 1; fi
	@$(MAKE) --no-print-directory deps build
	@hack/docker29.sh build
	@hack/build-kubelet.sh build v1.36
	@if [[ -n '$(E2E_MULTINODE_CONFORMANCE)' ]]; then hack/build-kubelet.sh e2e v1.36; fi
	@hack/cluster-images.sh build
	@hack/node-e2e-images.sh build $(if $(filter full,$(E2E_MULTINODE_CONFORMANCE)),cluster)
	@log=$(OUT)/e2e-multinode.log; \
	NETSHIM_BIN=$(OUT)/netshim NETSHIM_OCI_BIN=$(OUT)/netshim-oci E2E_DOCKERD=$(OUT)/docker29/bin/dockerd \
	KUBEADM_BIN=$(OUT)/k8s-v1.36/kubeadm KUBECTL_BIN=$(OUT)/k8s-v1.36/kubectl KUBELET_BIN=$(OUT)/kubelet-v1.36 \
	CLUSTER_IMAGES=$(CURDIR)/hack/cluster-images.sh LEAK_AUDIT=$(CURDIR)/test/e2e/leak-audit.sh \
	E2E_MULTINODE_CONFORMANCE='$(E2E_MULTINODE_CONFORMANCE)' NODE_E2E_IMAGES=$(CURDIR)/hack/node-e2e-images.sh \
	E2E_TEST_BIN=$(OUT)/k8s-v1.36/e2e.test GINKGO_BIN=$(OUT)/node-e2e-images/bin/ginkgo \
	CONFORMANCE_PROCS=$(CONFORMANCE_PROCS) CONFORMANCE_OUT=$(OUT)/conformance-cluster-$(E2E_MULTINODE_CONFORMANCE) \
	KUBE_VERSION=$$(hack/build-kubelet.sh versions | awk '$$1 == "v1.36" { print $$2 }') \
	E2E_MULTINODE_STATE=$(OUT)/e2e-multinode.state \
		$(GO) test -count=1 -race -tags multinode -v -timeout 60m ./test/multinode 2>&1 | tee "$$log" || rc=$$?; \
	passed=$$(grep -cE '^--- PASS: Test' "$$log" || true); \
	failed=$$(grep -cE '^--- FAIL: Test' "$$log" || true); \
	if [[ $${rc:-0} -ne 0 && $$failed -eq 0 ]]; then echo "FAIL run: go test exited $$rc without a failed test (timeout? panic?)"; failed=1; fi; \
	want=$$(grep -l '^//go:build multinode$$' test/multinode/*_test.go | xargs cat | grep -c '^func Test'); \
	if [[ $$passed -lt $$want ]]; then echo "FAIL run: $$passed of the suite's $$want tests passed (skipped or not run?)"; failed=$$((failed + 1)); fi; \
	echo "e2e-multinode: $$passed passed, $$failed failed"; \
	[[ $$failed -eq 0 && $${rc:-0} -eq 0 ]]

## conformance-cluster: Kubernetes' conformance suite (k8s.io/kubernetes v1.36.3 test/e2e, e2e.test,
# built by hack/build-kubelet.sh e2e) against e2e-multinode's kubeadm cluster of two netshim nodes,
# offline (--provider=skeleton; its images from the lan's registry through KUBE_TEST_REPO_LIST); specs
# this machine cannot pass are skipped by the reviewed list in test/multinode/skips.go. One line per
# spec, last line `conformance-cluster: N passed, N failed, N skipped`; artifacts in
# _output/conformance-cluster/. conformance-cluster-quick runs QuickFocus there (sig-network's
# [Conformance] specs and the multi-node ones). CONFORMANCE_PROCS ginkgo processes (default 8: the suite mostly waits),
# CONFORMANCE_FOCUS=REGEXP narrows a run, CONFORMANCE_TIMEOUT bounds the suite. (root)
CONFORMANCE_PROCS ?= 8
CONFORMANCE_TIMEOUT ?= 150m
conformance-cluster conformance-cluster-quick: dockerd-start
	@if [[ $$(id -u) -ne 0 ]]; then echo "$@: must run as root" >&2; exit 1; fi
	@$(MAKE) --no-print-directory deps build
	@hack/docker29.sh build
	@hack/build-kubelet.sh build v1.36
	@hack/build-kubelet.sh e2e v1.36
	@hack/cluster-images.sh build
	@hack/node-e2e-images.sh build $(if $(filter conformance-cluster-quick,$@),,cluster)
	@NETSHIM_BIN=$(OUT)/netshim NETSHIM_OCI_BIN=$(OUT)/netshim-oci E2E_DOCKERD=$(OUT)/docker29/bin/dockerd \
	KUBEADM_BIN=$(OUT)/k8s-v1.36/kubeadm KUBECTL_BIN=$(OUT)/k8s-v1.36/kubectl KUBELET_BIN=$(OUT)/kubelet-v1.36 \
	CLUSTER_IMAGES=$(CURDIR)/hack/cluster-images.sh LEAK_AUDIT=$(CURDIR)/test/e2e/leak-audit.sh \
	NODE_E2E_IMAGES=$(CURDIR)/hack/node-e2e-images.sh E2E_TEST_BIN=$(OUT)/k8s-v1.36/e2e.test \
	GINKGO_BIN=$(OUT)/node-e2e-images/bin/ginkgo CONFORMANCE_PROCS=$(CONFORMANCE_PROCS) \
	CONFORMANCE_TIMEOUT=$(CONFORMANCE_TIMEOUT) CONFORMANCE_FOCUS='$(CONFORMANCE_FOCUS)' \
	CONFORMANCE_SUBSET=$(if $(filter conformance-cluster-quick,$@),quick,full) \
	CONFORMANCE_OUT=$(OUT)/$@ \
	KUBE_VERSION=$$(hack/build-kubelet.sh versions | awk '$$1 == "v1.36" { print $$2 }') \
	E2E_MULTINODE_STATE=$(OUT)/e2e-multinode.state \
		$(GO) test -count=1 -tags multinode,conformancecluster -v -timeout 180m -run '^TestConformance$$' ./test/multinode

## node-conformance: kubelet's node e2e suite (k8s.io/kubernetes v1.36.3 test/e2e_node, e2e_node.test)
# with --focus='\[NodeConformance\]' against netshim on a private dockerd, offline: the test images
# are built here (hack/node-e2e-images.sh) and served by a loopback registry on 127.0.0.1:5000;
# specs this machine cannot pass are skipped by the reviewed list in test/node-conformance/skips.go.
# Prints one line per spec and `node-conformance: N passed, N failed, N skipped`; artifacts in
# _output/node-conformance/. node-conformance-quick runs the reviewed CI subset (QuickFocus there).
# K8S_BIN_DIR holds e2e_node.test and kubelet of the same release; NODE_CONFORMANCE_PROCS ginkgo
# processes (the [Serial] specs run alone at the end); NODE_CONFORMANCE_FOCUS=REGEXP narrows a run;
# NODE_CONFORMANCE_TIMEOUT bounds the suite (ginkgo --timeout). (root)
K8S_BIN_DIR ?= $(OUT)/k8s-v1.36
NODE_CONFORMANCE_PROCS ?= 5
NODE_CONFORMANCE_TIMEOUT ?= 120m
node-conformance node-conformance-quick:
	@if [[ $$(id -u) -ne 0 ]]; then echo "$@: must run as root" >&2; exit 1; fi
	@$(MAKE) --no-print-directory deps build
	@if [[ "$(K8S_BIN_DIR)" == "$(OUT)/k8s-v1.36" ]]; then \
		hack/build-kubelet.sh build v1.36 && hack/build-kubelet.sh e2e-node v1.36 && \
		ln -sfn ../kubelet-v1.36 $(OUT)/k8s-v1.36/kubelet; fi
	@for b in e2e_node.test kubelet; do if [[ ! -x "$(K8S_BIN_DIR)/$$b" ]]; then \
		echo "$@: no $(K8S_BIN_DIR)/$$b (build e2e_node.test and kubelet of one release there)" >&2; exit 1; fi; done
	@hack/docker29.sh build-runc
	@if ! hack/dockerd.sh status >/dev/null 2>&1; then trap 'hack/dockerd.sh stop' EXIT; fi; \
	hack/dockerd.sh start; \
	hack/node-e2e-images.sh build; \
	NETSHIM_BIN=$(OUT)/netshim CNI_BIN_DIR=/usr/lib/cni NETSHIM_ROOT=$(CURDIR) NODE_CONFORMANCE_OCI_RUNC=$(OUT)/docker29/bin/runc \
	NODE_E2E_BIN=$(K8S_BIN_DIR)/e2e_node.test K8S_BIN_DIR=$(K8S_BIN_DIR) \
	GINKGO_BIN=$(OUT)/node-e2e-images/bin/ginkgo NODE_CONFORMANCE_PROCS=$(NODE_CONFORMANCE_PROCS) \
	NODE_CONFORMANCE_SUBSET=$(if $(filter node-conformance-quick,$@),quick,full) \
	NODE_CONFORMANCE_FOCUS='$(NODE_CONFORMANCE_FOCUS)' NODE_CONFORMANCE_TIMEOUT=$(NODE_CONFORMANCE_TIMEOUT) \
	NODE_CONFORMANCE_OUT=$(OUT)/node-conformance$(if $(filter node-conformance-quick,$@),-quick,) \
		$(GO) test -count=1 -tags nodeconformance -v -timeout 150m ./test/node-conformance/

## e2e-vm: netshim on a real Debian 12 node in a VM under qemu (cgroup v2, systemd as PID 1, Docker's
# systemd cgroup driver, kubelet v1.37 with its defaults, two reboots; test/e2e-vm, test/vmnode, hack/e2e-vm.sh).
# The node image is built once and cached in /var/cache/netshim-vm (hack/vm-image.sh). Artefacts in
# _output/e2e-vm/; last line `e2e-vm: N passed, N failed` (root)
e2e-vm:
	@if [[ $$(id -u) -ne 0 ]]; then echo "e2e-vm: must run as root" >&2; exit 1; fi
	@hack/install-deps.sh vm
	@$(MAKE) --no-print-directory deb
	@hack/build-kubelet.sh build v1.37
	@NETSHIM_DEB='$(DEB_FILE)' KUBELET_BIN=$(OUT)/kubelet-v1.37 hack/e2e-vm.sh

## node-e2e-images: build the images of make node-conformance into the host's engine (root)
node-e2e-images: dockerd-start
	@hack/node-e2e-images.sh build

## test: lint, unit, test-deb, fuzz, e2e, e2e-docker-netns, e2e-faults, then e2e-vm in the background while soak (3 minutes a mode),
# conformance (critest), test-pinned (e2e and critest), e2e-kubelet (kubelet v1.37), test-docker29 (e2e and critest on Docker 29),
# e2e-cluster, e2e-multinode (with conformance-cluster-quick's subset on its cluster), e2e-takeover and node-conformance-quick run (all
# run; fails if any failed; in the order the background builds finish what each needs); the summary gives each one's
# time. What it leaves to the targets themselves, because another suite of make test covers it: e2e-kubelet on kubelet
# v1.36 (which e2e-takeover, e2e-cluster and node-conformance-quick run), test-pinned's kubelet e2e (the kubelet e2e's
# pods that share a PID namespace are pinned in every suite) and test-pauseless (the default, auto, is the pause-less
# mode for every pod that allows it). `make e2e-kubelet test-pinned` runs them all.
# Two things keep a cold Go cache's builds (about 30 min of two cores) and the VM's emulation (about 12 min of two
# cores) from adding up with the suites that mostly wait for Docker, kubelet or a VM:
# - the later suites' builds (kubelets, Docker 29, VM image, cri-dockerd, control plane, node e2e suite) run in the
#   background at idle priority from the start (hack/prebuild.sh; log in _output/prebuild.log, its lines at the end); a
#   suite that needs one still being built waits for it. The packages every suite needs are installed first, as the
#   builds need some of them;
# - a target written bg:NAME runs in the background from that point on, its output in _output/test-NAME.out, shown at
#   the end: e2e-vm, whose node touches nothing of the host's (engine, cgroups, network), so it cannot disturb the
#   suites beside it.
# e2e-vm starts before the soak, which leaves the CPU mostly to the VM's emulation and the background builds: started
# after e2e-kubelet it was the last to end in a cold make test (23 min of emulation); started here it ends about 14 min
# before the last suite (cold run of 2026-12-06: 52 min in all).
TEST_TARGETS := lint unit test-deb fuzz e2e e2e-docker-netns e2e-faults bg:e2e-vm soak conformance test-pinned e2e-kubelet \
	test-docker29 conformance-userns e2e-cluster e2e-multinode e2e-takeover node-conformance-quick
TEST_ARGS := E2E_KUBELET_MINORS=v1.37 TEST_MODE_TARGETS='e2e conformance' SOAK_MINUTES=3 FUZZTIME=10s
# PREBUILD=true runs no background builds (each suite builds what it needs itself).
PREBUILD ?= hack/prebuild.sh
test:
	@hack/install-deps.sh vm
	@mkdir -p $(OUT); stop_dockerd=0; bg=(); \
	if ! hack/dockerd.sh status >/dev/null 2>&1; then stop_dockerd=1; fi; \
	setsid nice -n 19 ionice -c 2 -n 7 $(PREBUILD) >$(OUT)/prebuild.log 2>&1 & prebuild=$$!; \
	trap 'kill -- -$$prebuild 2>/dev/null || true; for b in "$${bg[@]}"; do kill -- -$${b#*:} 2>/dev/null || true; done; wait; \
		if [[ $$stop_dockerd -eq 1 ]]; then hack/dockerd.sh stop; fi' EXIT; \
	run_bg() { local t=$$1 start=$$SECONDS r=ok; $(MAKE) --no-print-directory "$$t" $(TEST_ARGS) || r=FAILED; \
		echo "$$t=$$r($$((SECONDS - start))s)" >$(OUT)/test-$$t.result; }; export -f run_bg; \
	summary=(); failed=0; \
	for t in $(TEST_TARGETS); do \
		if [[ $$t == bg:* ]]; then \
			t=$${t#bg:}; echo "==> make $$t (in the background; output in $(OUT)/test-$$t.out, shown at the end)"; \
			rm -f $(OUT)/test-$$t.result; \
			setsid bash -c 'run_bg "$$1"' _ "$$t" >$(OUT)/test-$$t.out 2>&1 </dev/null & \
			bg+=("$$t:$$!"); continue; \
		fi; \
		echo "==> make $$t"; start=$$SECONDS; \
		if $(MAKE) --no-print-directory $$t $(TEST_ARGS); then summary+=("$$t=ok($$((SECONDS - start))s)"); \
		else summary+=("$$t=FAILED($$((SECONDS - start))s)"); failed=1; fi; \
	done; \
	for b in "$${bg[@]}"; do \
		t=$${b%%:*}; echo "==> make $$t (background): waiting for it"; start=$$SECONDS; wait $${b#*:} || true; \
		echo "==> make $$t (background; waited $$((SECONDS - start))s): its output"; cat $(OUT)/test-$$t.out; \
		r=$$(cat $(OUT)/test-$$t.result 2>/dev/null || echo "$$t=FAILED(no result)"); summary+=("$$r"); \
		[[ $$r == "$$t=ok("* ]] || failed=1; \
	done; bg=(); \
	grep '^prebuild: ' $(OUT)/prebuild.log || true; \
	echo "make test: $${summary[*]} in $$((SECONDS / 60)) min"; \
	exit $$failed

## e2e-docker-netns: make e2e with NETSHIM_SANDBOX_NETNS=docker: netshim in the docker sandbox netns
# mode (the pause container's own), while most other suites of make test run netshim's default
# --sandbox-netns=auto, which is the pause-less mode (pinned for pods that share a PID namespace) on the
# engines hack/dockerd.sh and hack/docker29.sh start (they register netshim-oci). NETSHIM_SANDBOX_NETNS=docker|pinned|pauseless|auto on make's command
# line (e.g. make test NETSHIM_SANDBOX_NETNS=docker) sets the mode of every suite's netshim.
e2e-docker-netns:
	@$(MAKE) --no-print-directory e2e NETSHIM_SANDBOX_NETNS=docker

## conformance-userns: critest's UserNamespaces (6) and SupplementalGroupsPolicy (2) specs on Docker
# 20.10 whose OCI wrapper execs runc 1.4.3 (ENGINE=docker20-runc143, the pinned mode); all 8 must
# pass (root; part of `make test`). Debian's runc 1.1.5 makes no idmapped mounts: on the plain
# Docker 20.10 netshim does not offer user namespaces, and make conformance skips those 6.
conformance-userns:
	@$(MAKE) --no-print-directory conformance ENGINE=docker20-runc143 NETSHIM_SANDBOX_NETNS=pinned CRITEST_WANT_PASSED=8 \
		CRITEST_ARGS="'-ginkgo.focus=UserNamespaces|SupplementalGroupsPolicy'"

## test-pinned / test-pauseless: e2e, critest and the kubelet e2e with NETSHIM_SANDBOX_NETNS=pinned / pauseless
# (root). make test runs test-pinned's e2e and critest: every other suite runs netshim's default, auto, which on
# these engines (they register netshim-oci) is the pause-less mode for each pod that allows it (all of kubelet's
# but those sharing a PID namespace) and pinned for the rest, so test-pauseless repeats them; it is kept for
# nodes set to that mode.
TEST_MODE_TARGETS ?= e2e conformance e2e-kubelet
test-pinned test-pauseless:
	@mode=$(@:test-%=%); summary=(); failed=0; \
	for t in $(TEST_MODE_TARGETS); do \
		echo "==> make $$t NETSHIM_SANDBOX_NETNS=$$mode"; \
		if $(MAKE) --no-print-directory $$t NETSHIM_SANDBOX_NETNS=$$mode; then summary+=("$$t=ok"); \
		else summary+=("$$t=FAILED"); failed=1; fi; \
	done; \
	echo "make $@: $${summary[*]}"; \
	exit $$failed

## test-docker29: e2e and conformance on the private Docker 29 engine (root; part of `make test`)
test-docker29:
	@summary=(); failed=0; \
	for t in e2e conformance; do \
		echo "==> make $$t ENGINE=docker29"; \
		if $(MAKE) --no-print-directory $$t ENGINE=docker29; then summary+=("$$t=ok"); \
		else summary+=("$$t=FAILED"); failed=1; fi; \
	done; \
	echo "make test-docker29: $${summary[*]}"; \
	exit $$failed

## run: start netshim in the foreground on unix:///run/netshim/netshim.sock (root)
# Zero-config: the built-in kubenet network (bridge cbr0) over RUN_POD_CIDR; no CNI
# config file is read or written. (hack/cni-config.sh writes a dev config for
# --network-plugin=cni; its 10.88.0.0/16 is why RUN_POD_CIDR differs.) The engine it starts
# gets netshim's OCI wrapper from `netshim engine register` (REGISTER=1 hack/dockerd.sh), so
# pods run in the pause-less or pinned mode as on a node set up that way.
RUN_POD_CIDR ?= 10.89.0.0/16
run:
	@if [[ $$(id -u) -ne 0 ]]; then echo "run: must run as root" >&2; exit 1; fi
	@$(MAKE) --no-print-directory deps build
	@REGISTER=1 hack/dockerd.sh start
	@hack/images.sh
	exec $(OUT)/netshim --network-plugin=kubenet --pod-cidr=$(RUN_POD_CIDR) --cni-bin-dir=/opt/cni/bin,/usr/lib/cni -v=2

## bench: netshim vs the Docker+CNI floor; prints the table, also in _output/bench.md (root)
bench:
	@hack/bench.sh $(BENCH_FLAGS)

## bench-kubelet: netshim under a real kubelet with 50 static pods (test/kubeletbench, issues 13 and 27): drop ->
# all running, per-pod container start p50/p99, PLEG relist mean, the runtime stack's CPU over a 2-minute hold and
# its PSS, teardown; one column per netshim configuration (default, plus BENCH_KUBELET_FLAGS="--mode NAME='--flag
# ...'") and one for containerd 2.4.2's own CRI (built from the module proxy; BENCH_KUBELET_CONTAINERD=0 leaves it
# out), with ratios to containerd; larger runs: BENCH_KUBELET_FLAGS="--pods 250 --max-pods 250 --up-timeout 10m".
# Prints the table, also in _output/bench-kubelet.md (root; run it under flock /tmp/netshim-docker.lock)
bench-kubelet:
	@hack/bench-kubelet.sh $(BENCH_KUBELET_FLAGS)

## clean: stop the engines hack/dockerd.sh and hack/docker29.sh started, remove _output/
# (the private engines' data in /var/lib/netshim-docker29 and /var/lib/netshim-docker20-runc143 stays)
clean: dockerd-stop
	@hack/docker29.sh stop
	@RUNC=1.4.3 hack/dockerd.sh stop
	rm -rf $(OUT)
