# test/tools/tools.mk -- build the envtest control plane (kube-apiserver and
# etcd) from Go modules, because setup-envtest cannot download binaries here,
# and cert-manager's controller, helm, promtool, prometheus and
# golangci-lint for the tests and the linter.
#
# Include it from the top-level Makefile:
#
#     include test/tools/tools.mk
#
# or use it on its own from the repository root:
#
#     make -f test/tools/tools.mk control-plane
#
# Binaries land in $(BIN) and are only rebuilt when missing or when the tool
# module (go.mod, go.sum, main.go) changed; kube-apiserver lands in
# $(K8S_BIN)/<version> (see KUBE_VERSIONS). Pass $(ENVTEST_ASSETS) to the
# tests as KUBEBUILDER_ASSETS. Override BIN *before* the include.
#
# Everything comes from the Go module proxy: no setup-envtest, no C toolchain
# (CGO is off), no workspace (GOWORK=off).

# Directory of this file, absolute, so that it works whether it is included
# from another Makefile or used with -f, from any working directory.
TOOLS_MK_DIR := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))

# Do not let the targets below become the including Makefile's default goal;
# standalone (make -f test/tools/tools.mk) the default is control-plane.
TOOLS_MK_SAVED_DEFAULT_GOAL := $(.DEFAULT_GOAL)
TOOLS_MK_STANDALONE := $(if $(filter 1,$(words $(MAKEFILE_LIST))),yes)

GO  ?= go
BIN ?= $(CURDIR)/bin

# Versions are read from the tool modules' go.mod files (single source of
# truth); ?= keeps them lazy, so `go.mod` is only read when a build runs.
# $(call tools_mod_version,go.mod file,module path): version required for it.
tools_mod_version = $(shell awk -v m='$(2)' '$$1 == "require" && $$2 == m { print $$3; exit } $$1 == m { print $$2; exit }' $(1))
ETCD_VERSION           ?= $(call tools_mod_version,$(TOOLS_MK_DIR)/etcd/go.mod,go.etcd.io/etcd/server/v3)
CERT_MANAGER_VERSION   ?= $(call tools_mod_version,$(TOOLS_MK_DIR)/certmanager/go.mod,github.com/cert-manager/cert-manager)

# The Kubernetes versions the tests run against are the module files in
# test/tools/kube-apiserver/versions (v1.37.2.mod builds kube-apiserver
# v1.37.2; modfile.sh VERSION adds one): make test runs the newest,
# KUBE_VERSION=v1.34.4 another, make test-compat each. Each version is built
# into $(K8S_BIN)/<version>/ beside a link to etcd (etcd 3.6 serves them
# all), the layout envtest's KUBEBUILDER_ASSETS expects, and only once: a
# version's build never changes, so the module file is an order-only
# prerequisite and a fresh checkout's mtimes rebuild nothing. Point K8S_BIN
# at a folder shared by several checkouts to build each version once per
# machine; remove a version's folder to rebuild it.
KUBE_VERSIONS := $(shell ls $(TOOLS_MK_DIR)/kube-apiserver/versions/ | sed -n 's/\.mod$$//p' | sort -V)
KUBE_VERSION  ?= $(lastword $(KUBE_VERSIONS))
K8S_BIN       ?= $(BIN)/k8s

# $(call kube_ldflags,v1.37.2): without these, kube-apiserver --version
# reports v0.0.0-master+$Format...$.
kube_ldflags = -s -w \
	-X k8s.io/component-base/version.gitVersion=$(1) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(patsubst v%,%,$(1)))) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(patsubst v%,%,$(1))))
ETCD_LDFLAGS ?= -s -w
# Without this, cert-manager's user agent and events say "canary".
CERT_MANAGER_LDFLAGS ?= -s -w \
	-X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$(CERT_MANAGER_VERSION)

# Flags shared by all builds. -mod=readonly and -buildvcs=false on the command
# line win over whatever GOFLAGS the caller exported.
TOOLS_GOBUILD_FLAGS ?= -trimpath -mod=readonly -buildvcs=false
TOOLS_GOENV         ?= GOWORK=off CGO_ENABLED=0

# KUBEBUILDER_ASSETS for envtest: kube-apiserver KUBE_VERSION and etcd.
ENVTEST_ASSETS = $(K8S_BIN)/$(KUBE_VERSION)

$(BIN)/etcd: $(TOOLS_MK_DIR)/etcd/go.mod $(TOOLS_MK_DIR)/etcd/go.sum $(TOOLS_MK_DIR)/etcd/main.go
	@mkdir -p $(@D)
	@echo "building etcd $(ETCD_VERSION) from Go modules (under a minute, once)"
	cd $(TOOLS_MK_DIR)/etcd && $(TOOLS_GOENV) $(GO) build $(TOOLS_GOBUILD_FLAGS) -ldflags '$(ETCD_LDFLAGS)' -o $@.tmp . && mv -f $@.tmp $@

# One main.go builds every version, each with its own module file
# (-modfile reads versions/<version>.mod and .sum; go.mod only marks the
# module's root).
$(K8S_BIN)/%/kube-apiserver: | $(TOOLS_MK_DIR)/kube-apiserver/versions/%.mod
	@mkdir -p $(@D)
	@echo "building kube-apiserver $* from Go modules (a few minutes, once)"
	cd $(TOOLS_MK_DIR)/kube-apiserver && $(TOOLS_GOENV) $(GO) build -modfile=versions/$*.mod $(TOOLS_GOBUILD_FLAGS) -ldflags '$(call kube_ldflags,$*)' -o $@.tmp . && mv -f $@.tmp $@

# An absolute link, so that a shared K8S_BIN works; remade when it dangles.
$(K8S_BIN)/%/etcd: | $(BIN)/etcd
	@mkdir -p $(@D)
	ln -sfn $(BIN)/etcd $@

# $(call kube_apiserver,v1.37.2): what running against that version needs.
kube_apiserver = $(K8S_BIN)/$(1)/kube-apiserver $(K8S_BIN)/$(1)/etcd

.PHONY: control-plane
control-plane: $(call kube_apiserver,$(KUBE_VERSION)) ## build kube-apiserver KUBE_VERSION (default: the newest) and etcd into ./bin from Go modules

.PHONY: control-planes
control-planes: $(foreach v,$(KUBE_VERSIONS),$(call kube_apiserver,$(v))) ## build every supported kube-apiserver (see KUBE_VERSIONS) and etcd into ./bin

# Not upstream's cmd/controller (a separate module the proxy does not serve)
# but a small main running the controllers that SelfSigned and CA issuers need.
$(BIN)/cert-manager-controller: $(TOOLS_MK_DIR)/certmanager/go.mod $(TOOLS_MK_DIR)/certmanager/go.sum $(TOOLS_MK_DIR)/certmanager/main.go
	@mkdir -p $(@D)
	@echo "building cert-manager-controller $(CERT_MANAGER_VERSION) from Go modules (a few minutes, once)"
	cd $(TOOLS_MK_DIR)/certmanager && $(TOOLS_GOENV) $(GO) build $(TOOLS_GOBUILD_FLAGS) -ldflags '$(CERT_MANAGER_LDFLAGS)' -o $@.tmp . && mv -f $@.tmp $@

.PHONY: cert-manager
cert-manager: $(BIN)/cert-manager-controller ## build cert-manager's controller into ./bin from Go modules (for the e2e tests)

# --- helm (for the chart tests in test/chart and test/e2e) -------------------
# helm.sh/helm/v4/cmd/helm is a main package: test/tools/helm/tools.go pins it
# behind the `tools` build tag and it is built by import path from inside that
# module, with the version helm would otherwise only know as "v4.3".
HELM_VERSION ?= $(call tools_mod_version,$(TOOLS_MK_DIR)/helm/go.mod,helm.sh/helm/v4)
HELM_LDFLAGS ?= -s -w -X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)

$(BIN)/helm: $(TOOLS_MK_DIR)/helm/go.mod $(TOOLS_MK_DIR)/helm/go.sum $(TOOLS_MK_DIR)/helm/tools.go
	@mkdir -p $(@D)
	@echo "building helm $(HELM_VERSION) from Go modules (two to three minutes on two cores, once)"
	cd $(TOOLS_MK_DIR)/helm && $(TOOLS_GOENV) $(GO) build $(TOOLS_GOBUILD_FLAGS) -ldflags '$(HELM_LDFLAGS)' -o $@.tmp helm.sh/helm/v4/cmd/helm && mv -f $@.tmp $@

.PHONY: helm
helm: $(BIN)/helm ## build helm into ./bin from Go modules (for the chart tests)

# --- promtool and the Prometheus server (test/alerts, test/dashboard) -------
# Both are built inside the downloaded github.com/prometheus/prometheus
# module, with that module's own go.mod and go.sum: its replace directives
# make `go install` refuse it, and building it as a dependency of another
# module would drop them. test/tools/promtool/go.mod pins the one version
# both come from and its go.sum the checksum, so the download is verified.
# Only -o is written, so the read-only module cache does not get in the way.
# The server is built without the builtinassets tag: the tests use its HTTP
# API, not its web UI. Both are built with remove_all_sd, Prometheus's own tag
# for leaving out its service discoveries (cloud SDKs, Kubernetes and the
# rest; static, file and HTTP stay): the tests scrape static targets, and
# promtool compiles in half the time without them (98 s instead of 227 s on
# two cores with an empty build cache).
PROMETHEUS_VERSION ?= $(call tools_mod_version,$(TOOLS_MK_DIR)/promtool/go.mod,github.com/prometheus/prometheus)
# The Go module v0.315.0 is Prometheus 3.15.0, which --version prints.
PROMETHEUS_RELEASE = $(shell echo '$(PROMETHEUS_VERSION)' | awk -F. '{ printf "%d.%d.%s", $$2 / 100, $$2 % 100, $$3 }')
PROMETHEUS_LDFLAGS ?= -s -w -X github.com/prometheus/common/version.Version=$(PROMETHEUS_RELEASE)

# $(call prometheus_build,command): build ./cmd/<command> of the module into $@.
prometheus_build = cd $(TOOLS_MK_DIR)/promtool && $(TOOLS_GOENV) $(GO) mod download github.com/prometheus/prometheus && \
	dir=$$($(TOOLS_GOENV) $(GO) list -m -f '{{.Dir}}' github.com/prometheus/prometheus) && \
	cd "$$dir" && $(TOOLS_GOENV) $(GO) build $(TOOLS_GOBUILD_FLAGS) -tags remove_all_sd -ldflags '$(PROMETHEUS_LDFLAGS)' -o $@.tmp ./cmd/$(1) && mv -f $@.tmp $@

$(BIN)/promtool: $(TOOLS_MK_DIR)/promtool/go.mod $(TOOLS_MK_DIR)/promtool/go.sum
	@mkdir -p $(@D)
	@echo "building promtool $(PROMETHEUS_RELEASE) from Go modules (about two minutes on two cores, once)"
	$(call prometheus_build,promtool)

$(BIN)/prometheus: $(TOOLS_MK_DIR)/promtool/go.mod $(TOOLS_MK_DIR)/promtool/go.sum
	@mkdir -p $(@D)
	@echo "building prometheus $(PROMETHEUS_RELEASE) from Go modules (a few minutes on two cores, once)"
	$(call prometheus_build,prometheus)

.PHONY: promtool
promtool: $(BIN)/promtool ## build promtool into ./bin from Go modules (for the alert tests)

.PHONY: prometheus
prometheus: $(BIN)/prometheus ## build the Prometheus server into ./bin from Go modules (for the dashboard test)

# --- golangci-lint (for make lint) ------------------------------------------
# cmd/golangci-lint is a main package: test/tools/golangci-lint/tools.go pins
# it behind the `tools` build tag and it is built by import path from inside
# that module. Built that way its build info only knows our tool module, so
# the version, and the release date the proxy reports for it, are passed in
# (without main.date it would print "(devel)").
GOLANGCI_LINT_VERSION ?= $(call tools_mod_version,$(TOOLS_MK_DIR)/golangci-lint/go.mod,github.com/golangci/golangci-lint/v2)
GOLANGCI_LINT_LDFLAGS ?= -s -w -X main.version=$(patsubst v%,%,$(GOLANGCI_LINT_VERSION)) -X main.commit=$(GOLANGCI_LINT_VERSION)

$(BIN)/golangci-lint: $(TOOLS_MK_DIR)/golangci-lint/go.mod $(TOOLS_MK_DIR)/golangci-lint/go.sum $(TOOLS_MK_DIR)/golangci-lint/tools.go
	@mkdir -p $(@D)
	@echo "building golangci-lint $(GOLANGCI_LINT_VERSION) from Go modules (about a minute on two cores, once)"
	cd $(TOOLS_MK_DIR)/golangci-lint && \
	date=$$($(TOOLS_GOENV) $(GO) list -m -f '{{.Time.Format "2006-01-02T15:04:05Z"}}' github.com/golangci/golangci-lint/v2) && \
	$(TOOLS_GOENV) $(GO) build $(TOOLS_GOBUILD_FLAGS) -ldflags "$(GOLANGCI_LINT_LDFLAGS) -X main.date=$$date" -o $@.tmp github.com/golangci/golangci-lint/v2/cmd/golangci-lint && mv -f $@.tmp $@

.PHONY: golangci-lint
golangci-lint: $(BIN)/golangci-lint ## build golangci-lint into ./bin from Go modules (for make lint)

# --- image tools (make image, make push, and the tests in test/image) -------
# ocibuild (cmd/ocibuild, release tooling with a module of its own) builds
# dualca's OCI image index with github.com/google/go-containerregistry and
# pushes it; registry is the CNCF
# distribution registry with its filesystem driver only
# (test/tools/registry), started by the image tests on 127.0.0.1; runc runs
# the image there. runc is the only tool that needs cgo (its nsenter part is
# C): the machine's gcc builds it, and no libseccomp is needed since the
# seccomp build tag is off.
REGISTRY_VERSION ?= $(call tools_mod_version,$(TOOLS_MK_DIR)/registry/go.mod,github.com/distribution/distribution/v3)
RUNC_VERSION     ?= $(call tools_mod_version,$(TOOLS_MK_DIR)/runc/go.mod,github.com/opencontainers/runc)

OCIBUILD_DIR := $(abspath $(TOOLS_MK_DIR)/../../cmd/ocibuild)

$(BIN)/ocibuild: $(OCIBUILD_DIR)/go.mod $(OCIBUILD_DIR)/go.sum $(wildcard $(OCIBUILD_DIR)/*.go)
	@mkdir -p $(@D)
	@echo "building ocibuild (go-containerregistry) from Go modules (under a minute, once)"
	cd $(OCIBUILD_DIR) && $(TOOLS_GOENV) $(GO) build $(TOOLS_GOBUILD_FLAGS) -ldflags '-s -w' -o $@.tmp . && mv -f $@.tmp $@

$(BIN)/registry: $(TOOLS_MK_DIR)/registry/go.mod $(TOOLS_MK_DIR)/registry/go.sum $(TOOLS_MK_DIR)/registry/main.go
	@mkdir -p $(@D)
	@echo "building the distribution registry $(REGISTRY_VERSION) from Go modules (a few minutes, once)"
	cd $(TOOLS_MK_DIR)/registry && $(TOOLS_GOENV) $(GO) build $(TOOLS_GOBUILD_FLAGS) -ldflags '-s -w -X github.com/distribution/distribution/v3/version.version=$(REGISTRY_VERSION)' -o $@.tmp . && mv -f $@.tmp $@

$(BIN)/runc: $(TOOLS_MK_DIR)/runc/go.mod $(TOOLS_MK_DIR)/runc/go.sum $(TOOLS_MK_DIR)/runc/tools.go
	@mkdir -p $(@D)
	@echo "building runc $(RUNC_VERSION) from Go modules (about a minute, once)"
	cd $(TOOLS_MK_DIR)/runc && GOWORK=off CGO_ENABLED=1 $(GO) build $(TOOLS_GOBUILD_FLAGS) -ldflags '-s -w -X main.version=$(patsubst v%,%,$(RUNC_VERSION))' -o $@.tmp github.com/opencontainers/runc && mv -f $@.tmp $@

.PHONY: image-tools
image-tools: $(BIN)/ocibuild $(BIN)/registry $(BIN)/runc ## build ocibuild, the distribution registry and runc into ./bin from Go modules (for make image and the image tests)

# --- trust-manager (for make bench only) -------------------------------------
# cert-manager trust-manager's Bundle controller (test/tools/trustmanager:
# upstream's command without its webhook, every server on the address given),
# what the benchmarks compare dualca with. The benchmarks install its Bundle
# CRD from the same module, found in the module cache.
TRUST_MANAGER_VERSION ?= $(call tools_mod_version,$(TOOLS_MK_DIR)/trustmanager/go.mod,github.com/cert-manager/trust-manager)

$(BIN)/trust-manager: $(TOOLS_MK_DIR)/trustmanager/go.mod $(TOOLS_MK_DIR)/trustmanager/go.sum $(TOOLS_MK_DIR)/trustmanager/main.go
	@mkdir -p $(@D)
	@echo "building trust-manager $(TRUST_MANAGER_VERSION) from Go modules (about a minute, once)"
	cd $(TOOLS_MK_DIR)/trustmanager && $(TOOLS_GOENV) $(GO) build $(TOOLS_GOBUILD_FLAGS) -ldflags '-s -w' -o $@.tmp . && mv -f $@.tmp $@

.PHONY: trust-manager
trust-manager: $(BIN)/trust-manager ## build cert-manager trust-manager into ./bin from Go modules (for make bench)

# --- gateways (test/gateways) -----------------------------------------------
# Traefik v3, the gateway that reads Kubernetes itself, is built like
# Prometheus: inside the downloaded github.com/traefik/traefik/v3 module,
# with its own go.mod and go.sum (its replace directives make `go install`
# refuse it); test/tools/traefik/go.mod pins the version, so bin/traefik is
# rebuilt only when that changes. nginx, HAProxy, curl and gnutls-cli are
# Debian's packages, installed when missing (as root; apt-get update once
# first). Debian's packages start nginx and haproxy as system services where
# an init system runs them: the suite's gateways are its own processes on
# 127.0.0.1, so any such service is stopped and kept from starting again.
TRAEFIK_VERSION ?= $(call tools_mod_version,$(TOOLS_MK_DIR)/traefik/go.mod,github.com/traefik/traefik/v3)
TRAEFIK_LDFLAGS ?= -s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$(TRAEFIK_VERSION)
GATEWAY_COMMANDS := nginx haproxy curl gnutls-cli
GATEWAY_PACKAGES := nginx haproxy curl gnutls-bin

$(BIN)/traefik: $(TOOLS_MK_DIR)/traefik/go.mod $(TOOLS_MK_DIR)/traefik/go.sum
	@mkdir -p $(@D)
	@echo "building traefik $(TRAEFIK_VERSION) from Go modules (several minutes on two cores, once)"
	cd $(TOOLS_MK_DIR)/traefik && $(TOOLS_GOENV) $(GO) mod download github.com/traefik/traefik/v3 && \
	dir=$$($(TOOLS_GOENV) $(GO) list -m -f '{{.Dir}}' github.com/traefik/traefik/v3) && \
	cd "$$dir" && $(TOOLS_GOENV) $(GO) build $(TOOLS_GOBUILD_FLAGS) -ldflags '$(TRAEFIK_LDFLAGS)' -o $@.tmp ./cmd/traefik && mv -f $@.tmp $@

.PHONY: traefik
traefik: $(BIN)/traefik ## build Traefik v3 into ./bin from Go modules (for the gateway suite)

.PHONY: gateway-packages
gateway-packages: ## install nginx, HAProxy, curl and gnutls-cli from Debian's packages when missing (as root), and stop the system services they start
	@missing=""; for c in $(GATEWAY_COMMANDS); do PATH="$$PATH:/usr/sbin:/sbin" command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing $(GATEWAY_PACKAGES) from Debian's packages (missing:$$missing)"; \
		if [ "$$(id -u)" != 0 ]; then echo "missing$$missing: run \`apt-get install -y $(GATEWAY_PACKAGES)\` as root"; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(GATEWAY_PACKAGES) >/dev/null; \
	fi
	@for s in nginx haproxy; do \
		if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then \
			systemctl disable --now $$s >/dev/null 2>&1 || true; \
		elif [ -x /etc/init.d/$$s ] && /etc/init.d/$$s status >/dev/null 2>&1; then \
			/etc/init.d/$$s stop >/dev/null 2>&1 || true; \
		fi; \
	done

.PHONY: gateway-tools
gateway-tools: gateway-packages $(BIN)/traefik ## the gateways and clients of test/gateways: Debian's nginx, HAProxy, curl, gnutls-cli, and Traefik built into ./bin

.DEFAULT_GOAL := $(if $(TOOLS_MK_STANDALONE),control-plane,$(TOOLS_MK_SAVED_DEFAULT_GOAL))
