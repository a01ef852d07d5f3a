# bindstate: the one front door. `make help` lists the targets.
#
#   make demo   build and install the plugin into a daemon, mount a folder in
#               each state, show writes landing on the host
#   make test   everything CI runs (installs what is missing first)
#
# Pieces owned by one area each live in mk/*.mk (engine, bench, ...). A
# fragment adds its suites to `make test` with `TEST_TARGETS += test-xyz`,
# and passes $(GOTEST_FLAGS) to its `go test` runs.

SHELL := /bin/bash
.DEFAULT_GOAL := help

include contrib/versions.env

# Go from /usr/local/go when it is not on PATH (as on a fresh machine).
export PATH := $(PATH):/usr/local/go/bin
GO       ?= go
BUILD    := _build
BIN      := bin
PLUGIN   ?= bindstate
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
# vendor/ is used when it is there (offline builds), else the module cache.
GOFLAGS_PLUGIN := $(if $(wildcard vendor/modules.txt),-mod=vendor) -trimpath
LDFLAGS  := -s -w -X main.version=$(VERSION)
# Extra flags for every `go test` of `make test` (.ci/run sets -v to count tests).
GOTEST_FLAGS ?=

# The managed plugin: config.json + rootfs/ with the static binary at /bindstate.
PLUGIN_DIR := $(BUILD)/plugin
# Directories the runtime (and the plugin) expect inside the rootfs.
PLUGIN_ROOTFS_DIRS := run/docker/plugins mnt/volumes host var/lib/bindstate tmp dev proc sys etc
# Settings applied with `docker plugin set` by `make plugin`, e.g.
#   make plugin PLUGIN_SETTINGS='ALLOWED_ROOTS=/home,/srv LOG_LEVEL=debug'
PLUGIN_SETTINGS ?=
# FORCE=1: `make plugin` replaces the installed plugin even while volumes use it.
FORCE ?=
# `docker plugin enable --timeout`: seconds the daemon waits for the socket.
PLUGIN_ENABLE_TIMEOUT ?= 60

# Suites `make test` runs, in order; mk/*.mk fragments append theirs.
TEST_TARGETS := vet test-unit

export GOFLAGS

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: deps
deps: ## install the Debian packages the project needs (idempotent, quiet when all are there)
	@bash contrib/install-deps.sh

.PHONY: build
build: $(BIN)/bindstate ## build the plugin binary (static)

$(BIN)/bindstate: $(shell find plugin -name '*.go' -not -name '*_test.go') go.mod $(wildcard go.sum vendor/modules.txt)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_PLUGIN) -ldflags '$(LDFLAGS)' -o $@ ./plugin

# The share's delay line (contrib/share.sh, SHARE_RTT): a bench tool, not part
# of the plugin.
$(BIN)/delayline: $(filter-out %_test.go,$(wildcard contrib/delayline/*.go)) go.mod
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_PLUGIN) -o $@ ./contrib/delayline

.PHONY: plugin-rootfs
plugin-rootfs: $(PLUGIN_DIR)/.done ## managed-plugin bundle in _build/plugin (config.json + rootfs/), no registry needed

$(PLUGIN_DIR)/.done: $(BIN)/bindstate config.json Makefile
	@rm -rf $(PLUGIN_DIR)
	@mkdir -p $(addprefix $(PLUGIN_DIR)/rootfs/,$(PLUGIN_ROOTFS_DIRS))
	@chmod 1777 $(PLUGIN_DIR)/rootfs/tmp
	@chmod 700 $(PLUGIN_DIR)/rootfs/var/lib/bindstate
	@printf 'root:x:0:0:root:/:/bindstate\nnobody:x:65534:65534:nobody:/:/bindstate\n' >$(PLUGIN_DIR)/rootfs/etc/passwd
	@printf 'root:x:0:\nnogroup:x:65534:\n' >$(PLUGIN_DIR)/rootfs/etc/group
	@cp $(BIN)/bindstate $(PLUGIN_DIR)/rootfs/bindstate
	@cp config.json $(PLUGIN_DIR)/config.json
	@touch $@
	@echo "plugin bundle: $(PLUGIN_DIR) (config.json + rootfs/bindstate $(VERSION))"

# `docker` talks to the daemon named by DOCKER_HOST, or the default socket.
.PHONY: plugin
plugin: plugin-rootfs ## create + enable the managed plugin (PLUGIN=bindstate) in the daemon of DOCKER_HOST, replacing an older one
	@set -e; \
	echo "daemon: $${DOCKER_HOST:-default socket}"; \
	if docker plugin inspect $(PLUGIN) >/dev/null 2>&1; then \
	  echo "replacing the installed $(PLUGIN)"; \
	  if [ "$$(docker plugin inspect -f '{{.Enabled}}' $(PLUGIN))" = true ] && ! docker plugin disable $(PLUGIN) >/dev/null 2>&1; then \
	    if [ "$(FORCE)" != 1 ]; then \
	      echo "make plugin: $(PLUGIN) still has volumes (docker volume ls -f driver=$(PLUGIN):latest)."; \
	      echo "  Remove them, or replace it anyway with: make plugin FORCE=1 (the old plugin's state dir,"; \
	      echo "  with its volume table and journals, goes with it unless STATE_DIR is on the host)."; \
	      exit 1; \
	    fi; \
	    docker plugin disable -f $(PLUGIN) >/dev/null; \
	  fi; \
	  docker plugin rm -f $(PLUGIN) >/dev/null; \
	fi; \
	docker plugin create $(PLUGIN) $(PLUGIN_DIR) >/dev/null; \
	if [ -n "$(PLUGIN_SETTINGS)" ]; then docker plugin set $(PLUGIN) $(PLUGIN_SETTINGS); fi; \
	docker plugin enable --timeout $(PLUGIN_ENABLE_TIMEOUT) $(PLUGIN) >/dev/null; \
	docker plugin ls --filter enabled=true | grep -E '^ID|[[:space:]]$(PLUGIN):' ; \
	echo "use it: docker volume create -d $(PLUGIN) -o source=/path/in/allowed/root -o state=cached NAME"

.PHONY: plugin-rm
plugin-rm: ## disable and remove the managed plugin (PLUGIN=bindstate) from the daemon of DOCKER_HOST
	@if docker plugin inspect $(PLUGIN) >/dev/null 2>&1; then \
	  docker plugin disable $(PLUGIN) >/dev/null 2>&1 || true; docker plugin rm -f $(PLUGIN); \
	else echo "no plugin $(PLUGIN) installed"; fi

.PHONY: test-unit
test-unit: ## unit tests of the plugin packages, the share's delay line and the test harness, with -race (root: FUSE tests mount for real)
	$(GO) test $(GOFLAGS_PLUGIN) $(GOTEST_FLAGS) -race -count=1 ./plugin/... ./contrib/delayline ./integration/harness

.PHONY: vet
# The engine tests build only with -tags engine (make test-engine): vetted
# with it too, so that a mistake there shows here and not after the engine
# is built.
vet: ## go vet and gofmt
	$(GO) vet $(GOFLAGS_PLUGIN) ./plugin/... ./contrib/delayline ./integration/...
	$(GO) vet $(GOFLAGS_PLUGIN) -tags engine ./integration/
	@out=$$(gofmt -l plugin integration contrib 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi

.PHONY: demo
demo: ## the guided tour: plugin into a daemon (a private one if none answers), one volume per state
	@bash contrib/demo.sh

.PHONY: demo-clean
demo-clean: ## remove exactly what `make demo` made (containers, volumes, plugin, image, private daemon)
	@bash contrib/demo.sh clean

.PHONY: clean
clean: ## remove build output (_build/, bin/)
	rm -rf $(BUILD) $(BIN)

-include mk/*.mk

# After the fragments, so that their `TEST_TARGETS +=` are seen here.
.PHONY: test
test: deps $(TEST_TARGETS) ## everything CI runs: deps, vet, unit tests and the suites of mk/*.mk
