# bindstate: the one front door. `make help` lists the targets.
#
#   make demo   build and install the plugin into a daemon, mount a folder in
#               each state, show writes landing on the host
#   make test   everything CI runs (installs what is missing first)
#
# Pieces owned by one area each live in mk/*.mk (engine, bench, ...).

SHELL := /bin/bash
.DEFAULT_GOAL := help

include contrib/versions.env

GO       ?= go
BUILD    := _build
BIN      := bin
PLUGIN   ?= bindstate
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
GOFLAGS_PLUGIN := -mod=vendor -trimpath
LDFLAGS  := -s -w -X main.version=$(VERSION)

export GOFLAGS

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: build
build: $(BIN)/bindstate ## build the plugin binary (static)

$(BIN)/bindstate: $(shell find plugin -name '*.go' -not -name '*_test.go') go.mod
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_PLUGIN) -ldflags '$(LDFLAGS)' -o $@ ./plugin

.PHONY: test-unit
test-unit: ## unit tests of the plugin packages, with -race (root: FUSE tests mount for real)
	$(GO) test $(GOFLAGS_PLUGIN) -race -count=1 ./plugin/...

.PHONY: vet
vet: ## go vet and gofmt
	$(GO) vet $(GOFLAGS_PLUGIN) ./plugin/...
	@out=$$(gofmt -l plugin integration 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi

-include mk/*.mk
