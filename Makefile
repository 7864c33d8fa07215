# Switchboard — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

MODULES := pkg proto services/decider services/edge services/provsim tests
PKGS := $(addprefix ./,$(addsuffix /...,$(MODULES)))
BIN := $(CURDIR)/bin
TOOLBIN := $(CURDIR)/.bin
# buf, the protoc plugins and golangci-lint are pinned in tools/go.mod and built
# from source (go build of the pinned module, never a downloaded binary).
TOOLS := GOWORK=off go -C tools
BUF := PATH="$(TOOLBIN):$$PATH" $(TOOLBIN)/buf
GOLANGCI_LINT := $(TOOLBIN)/golangci-lint
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/decider, bin/edge, bin/provsim and bin/switchboard (the operator's command).
	go build -ldflags "-X github.com/switchboard-ai/switchboard/services/decider/app.Version=$(VERSION)" -o $(BIN)/decider ./services/decider/cmd/decider
	go build -ldflags "-X github.com/switchboard-ai/switchboard/services/decider/internal/cli.Version=$(VERSION)" -o $(BIN)/switchboard ./services/decider/cmd/switchboard
	go build -ldflags "-X github.com/switchboard-ai/switchboard/services/edge/app.Version=$(VERSION)" -o $(BIN)/edge ./services/edge/cmd/edge
	go build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/provsim ./services/provsim/cmd/provsim

.PHONY: run
run: build ## Run the whole system on loopback: embedded etcd, decider, edge, four simulated providers; Ctrl-C stops it.
	@# Job control (set -m) runs run.sh as the terminal's foreground process
	@# group, so Ctrl-C reaches run.sh and its components, which stop and exit
	@# 0, and not make, which would otherwise die by the signal (status 130).
	set -m; ./deploy/local/run.sh; status=$$?; exit $$status

.PHONY: drill
drill: build ## Fault drills on loopback: pause, SIGTERM and kill -9 the decider, hostile input to the edge.
	./deploy/local/drill.sh

.PHONY: k8s
k8s: ## Render every Kubernetes overlay (deploy/k8s/overlays) with kustomize's Go API to build/k8s/<overlay>.yaml.
	go run ./tests/cmd/k8srender -out build/k8s deploy/k8s

# The coding-agent CLIs the tests module runs (Claude Code, Codex CLI),
# pinned by tests/agents/package-lock.json. npm ci runs again only when the
# lock is newer than the last install (or node_modules is gone).
AGENTS := tests/agents
AGENTS_STAMP := $(AGENTS)/node_modules/.installed

$(AGENTS_STAMP): $(AGENTS)/package.json $(AGENTS)/package-lock.json
	npm ci --prefix $(AGENTS) --no-audit --no-fund
	touch $@

.PHONY: agents
agents: $(AGENTS_STAMP) ## Install the coding-agent CLIs the tests run (npm ci of tests/agents, when its lock changed).

# make test is the short run: every behaviour test, with the race detector
# and -short. A test that is long and asserts nothing a short one does not
# (a load test, a smoke build of the binaries, a run that only prints
# figures, the chaos test's short form) skips under -short
# (testing.Short()) and is named in LONG_TESTS, which make test-long runs.
# The tests module runs in SHARDS processes at once (tests/shards.sh, the
# tests dealt out by their time in tests/shards.weights), while the other
# modules' tests run, up to 4 of a package's parallel tests at once: most
# of them wait on the systems they start. COVERPROFILE=file writes
# the coverage of every module but tests (the end-to-end module measures
# no package of its own).
UNIT_PKGS := $(filter-out ./tests/...,$(PKGS))
SHARDS ?= 4
# The short run's builds (GOFLAGS, so tests/shards.sh's build has them too):
# -trimpath keeps the clone's directory out of the build cache's keys, so a
# fresh clone anywhere reuses what an earlier one compiled; -ldflags=-w
# links the test binaries without DWARF (a third less link time; stack
# traces and race reports read the symbol table, not DWARF). go test's vet
# is off: make lint runs go vet, with every check, on every package. The
# race detector's 1 s sleep at each test binary's exit goes
# (atexit_sleep_ms=0): a race during a test fails that test without it.
TEST_GOFLAGS := $(strip $(GOFLAGS) -trimpath -ldflags=-w)
TEST_GORACE := $(strip atexit_sleep_ms=0 $(GORACE))
LONG_TESTS := \
	./services/edge/cmd/edgebench:TestSmoke \
	./tests:TestBrokerLoadShort \
	./tests:TestChaosShort \
	./tests:TestLocalRunStopsCleanly \
	./tests:TestBinariesVersionAndHelp

.PHONY: test
test: nodesdk agents clients ## Short run (-race -short): every behaviour test of every module; the long ones skip (make test-long). COVERPROFILE=f writes coverage.
	@# The modules' own tests, CPU-bound, run while the tests module's shards
	@# mostly wait: both at once, each's failure failing the run.
	export GOFLAGS="$(TEST_GOFLAGS)" GORACE="$(TEST_GORACE)"; \
	go test -race -count=1 -short -vet=off -parallel=4 -timeout=30m $(if $(COVERPROFILE),-coverprofile=$(COVERPROFILE)) $(UNIT_PKGS) & unit=$$!; \
	  SHARDS=$(SHARDS) ./tests/shards.sh -test.short; e2e=$$?; wait $$unit; u=$$?; \
	  [ $$u -eq 0 ] || echo "make test: the modules' own tests FAILED"; [ $$e2e -eq 0 ] || echo "make test: the tests module FAILED"; \
	  [ $$u -eq 0 ] && [ $$e2e -eq 0 ]

.PHONY: test-long
test-long: ## The long tests only (LONG_TESTS, -v so figure-only runs print): load test, smoke builds, the chaos short form.
	@# The same build flags as make test, so both share the build cache.
	@export GOFLAGS="$(TEST_GOFLAGS)" GORACE="$(TEST_GORACE)"; \
	for pt in $(LONG_TESTS); do pkg=$${pt%%:*}; name=$${pt##*:}; \
	  echo "go test -race -count=1 -v -run '^$$name\$$' $$pkg"; \
	  go test -race -count=1 -timeout=30m -v -run "^$$name\$$" $$pkg || exit 1; done

# The official Node SDKs tests/nodesdk_test.go drives, at the versions
# tests/nodesdk/package-lock.json pins; reinstalled only when the lock is
# newer than what npm ci last installed (its node_modules/.package-lock.json).
NODESDK := tests/nodesdk

.PHONY: nodesdk
nodesdk: $(NODESDK)/node_modules/.package-lock.json ## Install the Node SDKs of the tests (npm ci --prefix tests/nodesdk) if missing or older than the lock.

$(NODESDK)/node_modules/.package-lock.json: $(NODESDK)/package.json $(NODESDK)/package-lock.json
	npm ci --prefix $(NODESDK) --no-audit --no-fund
	@touch $@

# The TypeScript client's packages (clients/typescript/package-lock.json:
# protobuf-es, connect-node, tsc), for its tests and its code generation;
# npm ci again only when the lock changes. The Python client needs no
# install but Debian's python3-grpcio and python3-protobuf (.ci/run).
CLIENTS_TS := clients/typescript

.PHONY: clients
clients: $(CLIENTS_TS)/node_modules/.package-lock.json ## Install the TypeScript client's packages (npm ci --prefix clients/typescript) if missing or older than the lock.

$(CLIENTS_TS)/node_modules/.package-lock.json: $(CLIENTS_TS)/package.json $(CLIENTS_TS)/package-lock.json
	npm ci --prefix $(CLIENTS_TS) --no-audit --no-fund
	@touch $@

.PHONY: clients-proto
clients-proto: tools clients ## Regenerate the clients' stubs: TypeScript with buf and protoc-gen-es, Python with Debian's protoc.
	$(BUF) generate --template buf.gen.clients.yaml
	./clients/python/generate.sh

.PHONY: sim
sim: ## Replay a simulated day through the decider's routing in virtual time; compare policies (SEED, SEEDS, SIMFLAGS).
	go run ./services/decider/cmd/sim --profile sim/profile.yaml --traffic sim/traffic.yaml --seed $(or $(SEED),1) --seeds $(or $(SEEDS),1) $(SIMFLAGS)

.PHONY: frontier
frontier: ## Every profile of sim/ and sim/examples/: which policy (static single-provider choices included) dominates which (SEEDS, default 5).
	@for p in sim/profile.yaml sim/examples/*-profile.yaml; do echo "== $$p"; \
	  go run ./services/decider/cmd/sim --profile $$p --traffic sim/traffic.yaml --seeds $(or $(SEEDS),5) --frontier $(SIMFLAGS) | sed -n '/^Frontier/,$$p' || exit 1; done

.PHONY: bench
bench: build ## Run the Go benchmarks, edgebench (BENCHFLAGS), then the rate-limit load test brokerload (LOADFLAGS).
	go test -run='^$$' -bench=. -benchmem $(PKGS)
	go build -o $(BIN)/edgebench ./services/edge/cmd/edgebench
	$(BIN)/edgebench --decider-bin $(BIN)/decider --edge-bin $(BIN)/edge $(BENCHFLAGS)
	go build -o $(BIN)/brokerload ./tests/cmd/brokerload
	$(BIN)/brokerload --decider-bin $(BIN)/decider --edge-bin $(BIN)/edge --provsim-bin $(BIN)/provsim $(LOADFLAGS)

.PHONY: chaos
chaos: build ## Chaos test: 3 etcd members, 3 deciders, 2 edges under load; kill -9, SIGSTOP, etcd restarts, attacks (CHAOSFLAGS: --duration, --seed, --etcd-bin /usr/bin/etcd).
	go build -o $(BIN)/chaos ./tests/cmd/chaos
	$(BIN)/chaos --decider-bin $(BIN)/decider --edge-bin $(BIN)/edge --provsim-bin $(BIN)/provsim $(CHAOSFLAGS)

.PHONY: vegeta
vegeta: build ## Check edgebench with vegeta, an independent load generator, against the same three targets (WORKERS, DURATION, ROUNDS).
	go build -o $(BIN)/edgebench ./services/edge/cmd/edgebench
	./deploy/local/vegeta.sh

.PHONY: fuzz
fuzz: ## Fuzz every parser of untrusted input for FUZZTIME each (default 20s).
	go test -run='^$$' -fuzz='^FuzzParseChatRequest$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/chatreq
	go test -run='^$$' -fuzz='^FuzzSplitObject$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/chatreq
	go test -run='^$$' -fuzz='^FuzzDecodeMessages$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/chatreq
	go test -run='^$$' -fuzz='^FuzzParseMessages$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/anthropic
	go test -run='^$$' -fuzz='^FuzzParseResponses$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/responses
	go test -run='^$$' -fuzz='^FuzzStream$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/responses
	go test -run='^$$' -fuzz='^FuzzUpstreamAnswer$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/anthropic
	go test -run='^$$' -fuzz='^FuzzStream$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/anthropic
	go test -run='^$$' -fuzz='^FuzzParseRequest$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/provsim/internal/chatapi
	go test -run='^$$' -fuzz='^FuzzParseMessagesRequest$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/provsim/internal/messagesapi
	go test -run='^$$' -fuzz='^FuzzToolDirective$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/provsim/app
	go test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(or $(FUZZTIME),20s) ./pkg/catalog
	go test -run='^$$' -fuzz='^FuzzRewrite$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/dispatch
	go test -run='^$$' -fuzz='^FuzzReader$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/sse
	go test -run='^$$' -fuzz='^FuzzScanner$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/jsonscan
	go test -run='^$$' -fuzz='^FuzzPieces$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/edge/internal/jsonscan
	go test -run='^$$' -fuzz='^FuzzParseHeaders$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/decider/internal/broker
	go test -run='^$$' -fuzz='^FuzzParseTrace$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/decider/internal/sim
	go test -run='^$$' -fuzz='^FuzzRPCs$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/decider/internal/server
	go test -run='^$$' -fuzz='^FuzzReportItems$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/decider/internal/validate
	go test -run='^$$' -fuzz='^FuzzCatalogParts$$' -fuzztime=$(or $(FUZZTIME),20s) ./services/decider/internal/gate

$(TOOLBIN)/buf $(TOOLBIN)/protoc-gen-go $(TOOLBIN)/protoc-gen-go-grpc: tools/go.mod tools/go.sum
	$(TOOLS) build -o $(TOOLBIN)/ github.com/bufbuild/buf/cmd/buf google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc

$(GOLANGCI_LINT): tools/go.mod tools/go.sum
	$(TOOLS) build -o $(TOOLBIN)/ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: tools
tools: $(TOOLBIN)/buf $(GOLANGCI_LINT) ## Build buf, the protoc plugins and golangci-lint from tools/go.mod.

.PHONY: proto
proto: tools ## Regenerate the Go code of proto/ with buf.
	$(BUF) format -w
	$(BUF) generate

.PHONY: lint
lint: tools clients ## buf lint, buf format, buf breaking against main, go vet, golangci-lint, gofmt, generated code current (the clients' too).
	$(BUF) lint
	$(BUF) format -d --exit-code
	@if git rev-parse -q --verify main >/dev/null; then echo "buf breaking --against main"; $(BUF) breaking --against ".git#branch=main"; fi
	go vet $(PKGS)
	@for m in $(MODULES); do echo "golangci-lint $$m"; (cd $$m && $(GOLANGCI_LINT) run --allow-parallel-runners ./...) || exit 1; done
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@tmp=$$(mktemp -d); cp -r proto $$tmp/; $(BUF) generate; \
	  if ! diff -r $$tmp/proto proto >/dev/null; then echo "generated code is stale: run make proto and commit"; rm -rf $$tmp; exit 1; fi; rm -rf $$tmp
	@tmp=$$(mktemp -d); cp -r $(CLIENTS_TS)/src/gen clients/python/switchboard $$tmp/; $(BUF) generate --template buf.gen.clients.yaml; ./clients/python/generate.sh; \
	  if ! diff -r -x __pycache__ $$tmp/gen $(CLIENTS_TS)/src/gen >/dev/null || ! diff -r -x __pycache__ $$tmp/switchboard clients/python/switchboard >/dev/null; then \
	  echo "the clients' generated code is stale: run make clients-proto and commit"; rm -rf $$tmp; exit 1; fi; rm -rf $$tmp
	@echo lint ok

.PHONY: tidy
tidy: ## go mod tidy every module, then fail if anything changed.
	@for m in $(MODULES) tools; do (cd $$m && GOWORK=off GOFLAGS=-mod=mod go mod tidy) || exit 1; done
	git diff --exit-code -- '*go.mod' '*go.sum'

.PHONY: clean
clean: ## Remove build output and demo data.
	rm -rf $(BIN) .data
