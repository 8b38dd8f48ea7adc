# dualca — make help lists the targets.
#
# Everything is built from the Go module proxy into ./bin (git-ignored):
# dualca itself, and the kube-apiserver, etcd and cert-manager controller the
# tests run against.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO       ?= go
BIN      := $(CURDIR)/bin
FUZZTIME ?= 1m
DURATION ?= 60m
CLIENTS  ?= 100

include test/tools/tools.mk

# Every Go build here is made as the tools are (tools.mk): without cgo and
# with -trimpath. The Go build cache keys a compiled package by its flags,
# so the product's tests reuse the packages kube-apiserver, cert-manager
# and helm compiled already wherever their versions agree (test/tools/
# align.sh keeps them agreeing): a fresh clone compiles k8s.io/api,
# client-go and the rest once, not three or four times. The race detector
# needs cgo, so test-race alone turns it back on.
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)

# The Kubernetes version the tests run against (make test KUBE_VERSION=v1.34.4;
# default: the newest of KUBE_VERSIONS, see test/tools/tools.mk).
export KUBE_VERSION
export KUBEBUILDER_ASSETS := $(ENVTEST_ASSETS)
export HELM := $(BIN)/helm

# dualca's version is the chart's appVersion, so that the image's version
# label, `dualca version` and the chart agree; the revision and the creation
# time are the commit's, so that two builds of a commit are the same image.
VERSION           ?= $(shell awk '$$1 == "appVersion:" { gsub(/"/, "", $$2); print $$2 }' charts/dualca/Chart.yaml)
CHART_VERSION     ?= $(shell awk '$$1 == "version:" { print $$2 }' charts/dualca/Chart.yaml)
REVISION          ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(shell test -z "$$(git status --porcelain 2>/dev/null)" || echo -dirty)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
LDFLAGS           := -s -w -X main.version=$(VERSION) -X main.revision=$(REVISION)
IMAGE_DIR         := $(BIN)/image

# The product's module: what bin/dualca is rebuilt from. The programs of
# test/programs are a module of their own (PROGRAMS: its plotting modules
# stay out of the product's go.mod), the release image builder cmd/ocibuild
# and the tools of test/tools one each.
GO_SOURCES       := $(shell find . -name '*.go' -not -path './test/tools/*' -not -path './test/programs/*' -not -path './cmd/ocibuild/*' -not -path './bin/*') go.mod go.sum
PROGRAMS         := test/programs
PROGRAMS_SOURCES := $(shell find $(PROGRAMS) -name '*.go')

# $(call program,name): go run test/programs/<name>; the programs read and
# write the repository's paths, relative ones included, wherever they run.
program = $(GO) -C $(PROGRAMS) run ./$(1)

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(BIN)/dualca: $(GO_SOURCES)
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./cmd/dualca

.PHONY: build
build: $(BIN)/dualca ## build bin/dualca

.PHONY: image
image: $(BIN)/ocibuild ## build the OCI image index (linux/amd64, linux/arm64) into bin/image/oci, SBOMs in bin/image/sbom; prints its digest last
	@$(BIN)/ocibuild build -out $(IMAGE_DIR) -version $(VERSION) -revision $(REVISION) -created $(SOURCE_DATE_EPOCH)

.PHONY: push
push: image helm ## push the image index (REGISTRY/dualca:VERSION, with its SBOMs) and the chart (oci://REGISTRY/charts) to REGISTRY=host[:port][/path]
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=host[:port][/path]"; exit 2; }
	$(BIN)/ocibuild push -layout $(IMAGE_DIR)/oci -ref $(REGISTRY)/dualca:$(VERSION)
	$(BIN)/helm package charts/dualca --destination $(IMAGE_DIR)/chart
	$(BIN)/helm push $(IMAGE_DIR)/chart/dualca-$(CHART_VERSION).tgz oci://$(REGISTRY)/charts $(HELM_PUSH_FLAGS)

# make test runs in two lanes at once, after the control plane and
# cert-manager both need (make demo has built them on the newcomer's path):
#
#   gateways: Debian's packages, Traefik, then the gateway suite;
#   packages: helm, promtool, prometheus, the image tools, then every other
#             test package, under nice.
#
# The gateway suite spends most of its seven minutes waiting on rotations
# (36 % of two cores when it ran alone, measured from a fresh clone), and
# the other lane's builds and tests keep both cores busy (198 % and 188 %),
# so run one after the other they left a core idle for those minutes. The
# packages lane is niced so that the gateway suite's cert-manager and
# gateways get the cores when they ask: with the gateway suite at the same
# priority beside the end-to-end suite, its cert-manager starved and roots
# were not issued within the suite's waits. Inside a lane, one build at a
# time: the tools that compile the same Kubernetes packages share them
# through the build cache instead of compiling them twice at once.
TEST_NICE := nice -n 10

# The longest packages of make test (end-to-end, soak, the model test).
TEST_FIRST := ./test/e2e ./test/soak ./bundle

.PHONY: test-tools
test-tools: control-plane cert-manager gateway-tools helm promtool prometheus image-tools ## build every tool make test needs, and nothing else

.PHONY: test test-lane-gateways test-lane-packages
test: control-plane cert-manager ## run every test: unit, fuzz seeds, model, integration, end-to-end (real kube-apiserver KUBE_VERSION, default the newest; etcd, cert-manager, mTLS), real gateways (nginx, HAProxy, Traefik) and TLS stacks (curl, gnutls-cli) through rotations, and the dashboard against a real Prometheus
	@$(MAKE) --no-print-directory -j2 test-lane-gateways test-lane-packages
test-lane-gateways:
	@$(MAKE) --no-print-directory TOOLS_LANE=gateways gateway-tools
	@# Six scenarios at a time: all twelve at once starved cert-manager on
	@# two cores (roots and clients not issued within the suite's waits).
	$(GO) test -count=1 -timeout 20m -parallel 6 ./test/gateways/
test-lane-packages:
	@$(TEST_NICE) $(MAKE) --no-print-directory TOOLS_LANE=packages helm promtool prometheus image-tools
	@# Three packages at a time, the longest first: the suites spend most of
	@# their time waiting on rotations, so a third keeps the cores busy, and a
	@# long one started last would end the run alone. The programs' module is
	@# tested beside them: mostly compiling, it fills the same idle time.
	$(TEST_NICE) $(GO) -C $(PROGRAMS) test -count=1 -timeout 20m ./... & programs=$$!; \
	$(TEST_NICE) $(GO) test -p 3 -count=1 -timeout 20m $(TEST_FIRST) $$($(GO) list ./... | grep -v '/test/gateways$$' | grep -vxF "$$($(GO) list $(TEST_FIRST))") || { wait $$programs; exit 1; }; \
	wait $$programs
# Inside a lane, one build at a time.
ifdef TOOLS_LANE
.NOTPARALLEL:
endif

.PHONY: test-unit
test-unit: ## run the tests that need no control plane
	$(GO) test -count=1 $$($(GO) list ./... | grep -vE '/test/(integration|e2e|lib/cluster|lib/mtls|chart|alerts|image|dashboard|soak|gateways)')
	$(GO) -C $(PROGRAMS) test -count=1 ./...

.PHONY: test-e2e
test-e2e: control-plane cert-manager helm ## run the end-to-end rotations: cert-manager, dualca, a TLS gateway and clients handshaking
	$(GO) test -count=1 -timeout 15m -v ./test/e2e/... ./test/lib/cluster/ ./test/lib/mtls/ 2>&1 | grep -vE '^\s+\{"level"'

.PHONY: test-integration
test-integration: control-plane ## run the integration tests against the local control plane
	$(GO) test -count=1 -v ./test/integration/ 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go'

.PHONY: test-gateways
test-gateways: control-plane cert-manager gateway-tools ## real gateways (nginx, HAProxy, Traefik) and TLS stacks (curl, gnutls-cli) through root rotations of ECDSA, RSA and Ed25519 roots, both strategies
	$(GO) test -count=1 -timeout 15m -v ./test/gateways/ 2>&1 | grep -vE '^\s+\{"level"'

.PHONY: gateways-report
gateways-report: control-plane cert-manager gateway-tools ## rerun the gateway suite and write its table (gateway x client TLS stack x shape x root key, both strategies) into docs/gateways.md
	$(GO) test -count=1 -timeout 15m -v -run '^TestGateways$$' ./test/gateways/ -args -gateways.report=$(CURDIR)/docs/gateways.md 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|gateways_test.go|report written'

.PHONY: test-image
test-image: control-plane helm image-tools ## build the image, push it to a local registry, install the chart from there and run the image with runc (as root)
	$(GO) test -count=1 -timeout 10m -v ./test/image/ 2>&1 | grep -vE '^\s+(\{"level"|>)'

.PHONY: dashboard-png
dashboard-png: control-plane cert-manager helm prometheus ## rerun the dashboard test against a real Prometheus and draw docs/dashboard.png from the series it queried
	$(GO) test -count=1 -v ./test/dashboard/ -args -dashboard.series=$(BIN)/dashboard.json 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|series written'
	$(call program,figures) dashboard $(BIN)/dashboard.json $(CURDIR)/docs/dashboard.png

.PHONY: test-race
test-race: control-plane cert-manager helm promtool prometheus gateway-tools ## every test under the race detector (the model test shortened)
	CGO_ENABLED=1 $(GO) test -race -short -count=1 -timeout 20m ./...
	CGO_ENABLED=1 $(GO) -C $(PROGRAMS) test -race -short -count=1 -timeout 20m ./...

.PHONY: test-chart
test-chart: control-plane helm promtool ## lint and render the Helm chart, check its schema and alerts, dry-run, install, upgrade and uninstall it on a real API server
	$(GO) test -count=1 -v ./test/chart/ ./test/alerts/

.PHONY: test-compat
test-compat: control-planes cert-manager helm ## against each supported Kubernetes version in turn: integration, e2e rotations (both strategies), RBAC e2e, the chart on the API server; writes docs/compatibility.md (about 7 min; each kube-apiserver not built yet adds 7 to 9 min, once)
	$(call program,compat) -k8s-bin $(K8S_BIN) -versions '$(KUBE_VERSIONS)' -cert-manager $(CERT_MANAGER_VERSION) -etcd $(ETCD_VERSION) -out docs/compatibility.md

.PHONY: fuzz
fuzz: ## fuzz the PEM parser, root validation, decisions on a hand-edited gateway Secret and what is kept of a client's leaf for FUZZTIME each (default 1m)
	$(GO) test ./bundle/ -run '^$$' -fuzz '^FuzzParseCertificates$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bundle/ -run '^$$' -fuzz '^FuzzValidateRoot$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bundle/ -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bundle/ -run '^$$' -fuzz '^FuzzClientLeaf$$' -fuzztime $(FUZZTIME)

.PHONY: lint
lint: golangci-lint ## go vet, gofmt and golangci-lint with the linters of .golangci.yml (errorlint, gosec, importas, revive...)
	$(GO) vet ./...
	$(GO) -C $(PROGRAMS) vet ./...
	@out=$$(gofmt -l $(filter %.go,$(GO_SOURCES)) $(PROGRAMS_SOURCES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(BIN)/golangci-lint run ./...
	cd $(PROGRAMS) && $(BIN)/golangci-lint run ./...

.PHONY: demo
demo: control-plane cert-manager $(BIN)/dualca ## cert-manager, dualca, an mTLS gateway and 30 clients: two overlapping root rotations shown live, then a summary; fails if a handshake failed (LEGACY=1: the legacy strategy)
	$(call program,demo) -dualca $(BIN)/dualca $(if $(LEGACY),-legacy)

# fresh-dualca rebuilds bin/dualca unless it is this revision's: make
# rebuilds only when a Go file changed, and a report names the binary's
# revision as the commit it measured.
define fresh-dualca
@$(BIN)/dualca version | grep -qF '(commit $(REVISION),' || $(MAKE) --no-print-directory --always-make $(BIN)/dualca
endef

# soak-run runs TestSoak for DURATION with CLIENTS clients, its report to
# docs/$(1).md and docs/$(1).png, with the extra flags $(2). The suite
# writes the plot's series to bin/$(1).json and test/programs/figures draws
# them, also after a failed run, whose report links the plot too.
# PROFILES=folder also writes the leader's heap profile there every minute
# (see test/soak/profiles_test.go), for what a leak the judge saw is made of.
define soak-run
$(fresh-dualca)
@rm -f docs/$(1).json
status=0; DUALCA_BINARY=$(BIN)/dualca $(GO) test -count=1 -timeout 0 -v -run '^TestSoak$$' ./test/soak \
	-soak.duration=$(DURATION) -soak.clients=$(CLIENTS) -soak.rotate=30s-2m0s $(2) -soak.report=$(CURDIR)/docs/$(1).md \
	-soak.plot=$(CURDIR)/docs/$(1).png -soak.series=$(CURDIR)/docs/$(1).json $(if $(PROFILES),-soak.profiles=$(abspath $(PROFILES))) \
	2>&1 | grep -vE '^\s+\{"level"' || status=$$?; \
	if [ -f docs/$(1).json ]; then $(call program,figures) soak $(CURDIR)/docs/$(1).json $(CURDIR)/docs/$(1).png; fi; \
	exit $$status
endef

.PHONY: soak
soak: control-plane cert-manager $(BIN)/dualca ## root rotations and faults at random moments for DURATION (60m), two replicas, CLIENTS (100) clients loading their Secrets 1-10 s late; writes docs/soak.md, docs/soak.png and the samples behind them, docs/soak.json (each replica's memory, leadership and bundle roots: the leak judge can be re-run on them)
	$(call soak-run,soak,)

.PHONY: soak-leaks
soak-leaks: control-plane cert-manager $(BIN)/dualca ## the soak without kills or kube-apiserver restarts, for leaks: the leader lives the whole DURATION (60m) and is judged alone; writes docs/soak-leaks.md, docs/soak-leaks.png and docs/soak-leaks.json
	$(call soak-run,soak-leaks,-soak.kills=false)

.PHONY: bench
bench: control-plane cert-manager trust-manager $(BIN)/dualca ## measure the targets side by side with trust-manager and a trivial copier on the local control plane; writes docs/benchmarks.md, docs/benchmarks.png and the raw samples in docs/benchmarks/raw (about 70 min on 2 cores: 1h11m6s at fadcb78; QUICK=1: a few minutes, not a final report); fails on a dirty tree unless QUICK
	@# The report names the binary's revision and fails on another one.
	$(fresh-dualca)
	$(call program,bench) -dualca $(BIN)/dualca -out docs/benchmarks.md -plot docs/benchmarks.png $(if $(QUICK),-quick)

.PHONY: clean
clean: ## remove ./bin
	rm -rf $(BIN)
