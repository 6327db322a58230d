# gpupool Makefile. Every tool is pinned and built from the Go module proxy.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN_DIR ?= $(CURDIR)/bin
CONTROLLER_GEN ?= go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.21.0
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT ?= $(BIN_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION)
GO_TEST_FLAGS ?= -race -count=1 -timeout 30m
HELM_VERSION ?= v3.22.0
HELM ?= $(BIN_DIR)/helm-$(HELM_VERSION)
# The version binaries print (--version) and the image carries: 'git describe'.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS ?= -s -w -X github.com/gpupool/gpupool/internal/version.Version=$(VERSION)
# The image built by 'make image' and the image the install manifest and chart name.
IMAGE_REPO ?= ghcr.io/gpupool/gpupool
IMG ?= $(IMAGE_REPO):$(VERSION)
# The release the committed dist/install.yaml and chart point at.
RELEASE_VERSION ?= v0.1.0
RELEASE_IMG ?= $(IMAGE_REPO):$(RELEASE_VERSION)
PLATFORMS ?= linux/amd64 linux/arm64
DIST_DIR ?= $(CURDIR)/dist
KUSTOMIZE ?= go run sigs.k8s.io/kustomize/kustomize/v5@v5.8.1
# envtest finds kube-apiserver, etcd and kubectl here.
export KUBEBUILDER_ASSETS := $(BIN_DIR)

.PHONY: all
all: build

##@ Development

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Targets:\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: generate
generate: ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: ## Generate the CRD, RBAC role and webhook configuration.
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths=./controllers/... paths=./internal/... output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) webhook paths=./internal/webhook/... output:webhook:artifacts:config=config/webhook
	@# The Cluster API Machine CRD, generated from the pinned Cluster API types, for envtest.
	rm -rf $(BIN_DIR)/capi-crds && $(CONTROLLER_GEN) crd paths=sigs.k8s.io/cluster-api/api/core/v1beta2 output:crd:artifacts:config=$(BIN_DIR)/capi-crds
	mkdir -p test/crds/cluster-api && cp $(BIN_DIR)/capi-crds/cluster.x-k8s.io_machines.yaml test/crds/cluster-api/ && rm -rf $(BIN_DIR)/capi-crds

.PHONY: flags-doc
flags-doc: ## Write the manager's flags, from its --help, into docs/operations.md.
	go run ./hack/gen-flags docs/operations.md

.PHONY: structure
structure: ## Print the pool controller's structure (files, lines, the file graph's cycles and back arrows, the reconciler's methods, who takes the scope and who writes the workers' status).
	go run ./hack/structure ./controllers

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (on test/fluxapply, a module of its own, too).
	$(GOLANGCI_LINT) run ./...
	cd test/fluxapply && $(GOLANGCI_LINT) run ./...

$(HELM):
	mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR)/.helm go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(BIN_DIR)/.helm/helm $@ && rm -rf $(BIN_DIR)/.helm

$(GOLANGCI_LINT):
	mkdir -p $(BIN_DIR)
	GOBIN=$(BIN_DIR)/.golangci go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN_DIR)/.golangci/golangci-lint $@ && rm -rf $(BIN_DIR)/.golangci

VERIFY_PATHS := api config test/crds go.mod go.sum test/fluxapply/go.mod test/fluxapply/go.sum dist/install.yaml dist/install-cert-manager.yaml charts docs/operations.md
.PHONY: verify
verify: ## Fail when generated files (manifests, chart, the flags list in docs/operations.md) or go.mod/go.sum are stale, a relative link in the docs is broken, the chart's values schema and values.yaml disagree, or build-installer ignores INSTALL_IMG.
	$(MAKE) generate manifests build-installer chart flags-doc
	go mod tidy
	cd test/fluxapply && go mod tidy
	@git diff --exit-code -- $(VERIFY_PATHS) || { echo "generated files or go.mod/go.sum are stale: run 'make generate manifests build-installer chart flags-doc' and 'go mod tidy', then commit"; exit 1; }
	@test -z "$$(git status --porcelain -- $(VERIFY_PATHS))" || { git status --porcelain -- $(VERIFY_PATHS); echo "untracked generated files: commit them"; exit 1; }
	@# Every relative link in README.md, CHANGELOG.md and docs/ resolves.
	go run ./hack/check-links
	@# The chart's values.schema.json is written by hand: it must name every key of
	@# values.yaml and no other (TestValuesSchemaMatchesValues). 'make build-installer
	@# INSTALL_IMG=...' renders that image into a temporary directory
	@# (TestInstallerRendersCustomImage).
	go test -count=1 -run '^(TestValuesSchemaMatchesValues|TestInstallerRendersCustomImage)$$' ./test/install/

##@ Test

.PHONY: controlplane
controlplane: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl from source into bin/ (cached).
	BIN_DIR=$(BIN_DIR) hack/build-controlplane.sh

# Kueue's own controller for the tests of the Kueue bridge (controllers/kueue_envtest_test.go).
KUEUE_VERSION ?= v0.17.0
.PHONY: kueue
kueue: ## Build Kueue's manager (pinned) from source into bin/kueue-$(KUEUE_VERSION) and copy its CRDs (cached).
	BIN_DIR=$(BIN_DIR) KUEUE_VERSION=$(KUEUE_VERSION) hack/build-kueue.sh

# Prometheus's promtool, for the tests of the alert rules (test/monitoring). A Prometheus
# release; hack/build-promtool.sh builds its Go module (v0.3xx.y for release 3.xx.y).
PROMTOOL_VERSION ?= v3.16.0
PROMTOOL ?= $(BIN_DIR)/promtool-$(PROMTOOL_VERSION)
.PHONY: promtool
promtool: ## Build Prometheus's promtool (pinned) from source into bin/promtool-$(PROMTOOL_VERSION) (cached).
	BIN_DIR=$(BIN_DIR) PROMTOOL_VERSION=$(PROMTOOL_VERSION) hack/build-promtool.sh

.PHONY: test-alerts
test-alerts: promtool ## Check the alert rules and run their promtool unit tests (test/monitoring/rules_test.yaml), and check the metric names the alerts and the dashboard query (part of make test).
	PROMTOOL=$(PROMTOOL) go test -count=1 ./test/monitoring/

# TEST_CLOCK_BASE (RFC 3339) moves the date of the suites' fake clocks, such as
# 'make test TEST_CLOCK_BASE=2031-03-15T07:00:00+01:00' (internal/testclock).
.PHONY: test
test: controlplane kueue promtool $(HELM) ## Run the unit, envtest, chart, install and alert-rule tests with -race, the differential tests and the fault matrix (not test-e2e nor the benchmarks), building the control plane, Kueue, promtool and helm first if needed.
	HELM=$(HELM) PROMTOOL=$(PROMTOOL) go test $(GO_TEST_FLAGS) -skip '^(TestFaultMatrix|TestDifferential.*)$$' ./...
	@# The differential tests compare the planner with vgpusim over many random worlds: the
	@# models, not concurrency, are under test (vgpusim's concurrency is tested with -race
	@# above), and the race detector made them the slowest part of the suite.
	go test -count=1 -timeout 30m -run '^TestDifferential' ./test/vgpusim/
	@# The fault matrix on its own, verbose, so that its table of counts is printed.
	go test $(GO_TEST_FLAGS) -run '^TestFaultMatrix$$' -v ./controllers/ | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|fault matrix'

.PHONY: bench
bench: controlplane ## Run the benchmarks and print a table (BenchmarkPass: a pass's own cost at 320, 1,280 and 5,000 VMs; see docs/scale.md).
	go test -run '^$$' -bench . -benchmem ./internal/plan/ ./vsphere/
	go test -run '^$$' -bench BenchmarkPass -benchmem -benchtime 5x ./controllers/

DEMAND_SEEDS ?= 20
BENCH_MEMORY_PODS ?= 20000,100000
.PHONY: bench-memory
bench-memory: controlplane build ## Measure the manager's RSS and Go heap at 20,000 and 100,000 pods (1 % GPU pods), with and without spec.demand, on a real API server, and print a table (BENCH_MEMORY_FLAGS: more flags, such as -manager before=<old binary>).
	go run ./hack/bench-memory -pods $(BENCH_MEMORY_PODS) -manager after=$(BIN_DIR)/manager $(BENCH_MEMORY_FLAGS)

.PHONY: bench-demand
bench-demand: ## Simulate a week of a day/night pool on the pure demand decision, schedule only, with demand, and with demand sizing a layout by count, and print a table.
	go run ./hack/bench-demand -seeds $(DEMAND_SEEDS)

##@ Build

.PHONY: build
build: ## Build the manager, vgpusim, the local-environment launcher, govc and the kubectl plugin (and its completion script) into bin/.
	go build -ldflags "$(LDFLAGS)" -o $(BIN_DIR)/manager ./cmd/manager
	go build -o $(BIN_DIR)/vgpusim ./cmd/vgpusim
	go build -o $(BIN_DIR)/gpupool-local ./cmd/gpupool-local
	go build -o $(BIN_DIR)/govc ./test/vgpusim/internal/govc
	go build -ldflags "$(LDFLAGS)" -o $(BIN_DIR)/kubectl-gpupool ./cmd/kubectl-gpupool
	install -m 0755 hack/kubectl_complete-gpupool $(BIN_DIR)/kubectl_complete-gpupool

# The image dist/install*.yaml name: the release by default, so that the committed files
# stay stable between commits ('make build-installer INSTALL_IMG=$(IMG)' for your own).
INSTALL_IMG ?= $(RELEASE_IMG)
# Note: config/manager already renames the image 'controller' to the release image, so
# the rename below must match that name, not 'controller', or it matches nothing.
MANIFEST_IMAGE := $(shell sed -n 's/^ *newName: *//p' config/manager/kustomization.yaml)
.PHONY: build-installer
build-installer: ## Render dist/install.yaml (self-managed webhook certificates) and dist/install-cert-manager.yaml.
	@mkdir -p $(DIST_DIR)
	@# INSTALL_IMG as kustomize's fields: a digest after '@', a tag after the last ':' of
	@# the last path element (a ':' before it is a registry's port).
	@img='$(INSTALL_IMG)'; digest=; tag=; \
	case "$$img" in *@*) digest=$${img#*@}; img=$${img%%@*};; esac; \
	case "$${img##*/}" in *:*) tag=$${img##*:}; img=$${img%:*};; esac; \
	for overlay in default:install cert-manager:install-cert-manager; do \
	  dir=$(DIST_DIR)/.installer-$${overlay%%:*}; rm -rf $$dir && mkdir -p $$dir; \
	  { printf 'resources:\n- %s\nimages:\n- name: %s\n  newName: %s\n' \
	      "$$(realpath --relative-to=$$dir config/$${overlay%%:*})" "$(MANIFEST_IMAGE)" "$$img"; \
	    [ -z "$$tag" ] || printf '  newTag: %s\n' "$$tag"; \
	    [ -z "$$digest" ] || printf '  digest: %s\n' "$$digest"; } >$$dir/kustomization.yaml; \
	  { echo "# gpupool $(RELEASE_VERSION): generated by 'make build-installer' from config/$${overlay%%:*}. Do not edit."; \
	    $(KUSTOMIZE) build $$dir; } >$(DIST_DIR)/$${overlay#*:}.yaml; \
	  rm -rf $$dir; echo "wrote $(DIST_DIR)/$${overlay#*:}.yaml"; \
	done

PLUGIN_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
.PHONY: plugin-archives
plugin-archives: ## Build the kubectl plugin's release archives (hack/krew/gpupool.yaml names them) into dist/plugin/.
	@rm -rf $(DIST_DIR)/plugin && mkdir -p $(DIST_DIR)/plugin
	@for p in $(PLUGIN_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; ext=; [ $$os = windows ] && ext=.exe; \
	  dir=$(DIST_DIR)/plugin/.build-$$os-$$arch; mkdir -p $$dir; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -ldflags "$(LDFLAGS)" -o $$dir/kubectl-gpupool$$ext ./cmd/kubectl-gpupool; \
	  cp LICENSE $$dir/; files="kubectl-gpupool$$ext LICENSE"; \
	  [ $$os = windows ] || { install -m 0755 hack/kubectl_complete-gpupool $$dir/; files="$$files kubectl_complete-gpupool"; }; \
	  tar -C $$dir -czf $(DIST_DIR)/plugin/kubectl-gpupool_$(VERSION)_$${os}_$${arch}.tar.gz $$files; \
	  rm -rf $$dir; echo "wrote $(DIST_DIR)/plugin/kubectl-gpupool_$(VERSION)_$${os}_$${arch}.tar.gz"; \
	done

CHART_DIR := charts/gpupool
.PHONY: chart
chart: ## Copy the generated CRD, RBAC rules, webhook rules, alerts and dashboard from config/ into the Helm chart.
	cp config/crd/bases/gpupool.dev_gpupoolprofiles.yaml config/crd/bases/gpupool.dev_gpupoolrequests.yaml config/crd/bases/gpupool.dev_gpupoolusages.yaml $(CHART_DIR)/crds/
	cp config/rbac/role.yaml $(CHART_DIR)/files/manager-role.yaml
	cp config/rbac/leader_election_role.yaml $(CHART_DIR)/files/leader-election-role.yaml
	cp config/rbac/gpupool_viewer_role.yaml $(CHART_DIR)/files/viewer-role.yaml
	cp config/rbac/gpupool_editor_role.yaml $(CHART_DIR)/files/editor-role.yaml
	cp config/rbac/gpupool_requester_role.yaml $(CHART_DIR)/files/requester-role.yaml
	cp config/webhook/manifests.yaml $(CHART_DIR)/files/webhook.yaml
	cp config/prometheus/rules.yaml $(CHART_DIR)/files/prometheus-rules.yaml
	cp config/prometheus/dashboard.json $(CHART_DIR)/files/dashboard.json

HOST_PLATFORM := linux/$(shell go env GOARCH)
.PHONY: image-host
image-host: ## Build the image for this machine's platform only (what the local environment runs).
	$(MAKE) image PLATFORMS=$(HOST_PLATFORM)

CA_CERTS ?= /etc/ssl/certs/ca-certificates.crt
.PHONY: image
image: ## Build the manager's OCI image (linux/amd64, linux/arm64) from scratch into dist/: no daemon, no base image.
	@test -s $(CA_CERTS) || { echo "$(CA_CERTS) is missing: install Debian's ca-certificates (apt-get install -y ca-certificates)"; exit 1; }
	@for p in $(PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; \
	  echo "go build $$p"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags "$(LDFLAGS)" -o $(DIST_DIR)/bin/$${os}_$${arch}/manager ./cmd/manager; \
	done
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) go run ./hack/image --out $(DIST_DIR) --image $(IMG) \
	  --version $(VERSION) --revision $$(git rev-parse HEAD 2>/dev/null) --ca-certs $(CA_CERTS) \
	  $(foreach p,$(PLATFORMS),--binary $(p)=$(DIST_DIR)/bin/$(subst /,_,$(p))/manager)

##@ Local environment

.PHONY: demo
demo: controlplane kueue build image-host ## Show a day -> night -> day switch on a local cluster, then stop everything.
	$(BIN_DIR)/gpupool-local demo $(DEMO_FLAGS)

.PHONY: demo-demand
demo-demand: controlplane build image-host ## Show demand at work: a training Job submitted by day brings night in early, runs, and day comes back; prints the latency to the first drain.
	$(BIN_DIR)/gpupool-local demo-demand $(DEMO_FLAGS)

.PHONY: demo-count-demand
demo-count-demand: controlplane build image-host ## Show demand sizing a partial switch: on two GPUs, one training Job brings night in with one GPU converted to 16Q; the other GPU's day VMs keep running.
	$(BIN_DIR)/gpupool-local demo-count-demand $(DEMO_FLAGS)

LOCAL_DIR ?= $(CURDIR)/.local-env
.PHONY: up
up: controlplane kueue build image-host ## Start the local environment in LOCAL_DIR and return when it is ready.
	$(BIN_DIR)/gpupool-local up --dir $(LOCAL_DIR)

.PHONY: down
down: ## Stop the local environment in LOCAL_DIR.
	@if [ -x $(BIN_DIR)/gpupool-local ]; then $(BIN_DIR)/gpupool-local down --dir $(LOCAL_DIR); fi

.PHONY: test-e2e
BENCH_HOSTS ?= 4,16,64
BENCH_FLAGS ?=
# BENCH_JSON, when set, is a file the results are also written to as JSON (for CI).
BENCH_JSON ?=
.PHONY: bench-transition
bench-transition: controlplane build image-host ## Benchmark day -> night -> day on the local environment at BENCH_HOSTS hosts and print a table (not part of make test).
	$(BIN_DIR)/gpupool-local bench --bin-dir $(BIN_DIR) --hosts $(BENCH_HOSTS) --timeout 30m $(if $(BENCH_JSON),--json $(BENCH_JSON)) $(BENCH_FLAGS)

test-e2e: controlplane kueue build image-host ## Run the end-to-end tests on the local environment (the manager from the image): the demand demos (the count demo among them), the demo scenario, then the fault test.
	go test -tags e2e -count=1 -v -timeout 40m ./test/e2e/
