# The registry program of distribution/distribution, for the test of
# `docker plugin install` from a registry (integration/registry_test.go):
# built from the Go module proxy at the version pinned in
# contrib/versions.env, once (the file name carries the version).
#
#   make registry      -> _build/tools/registry-$(REGISTRY_VERSION)

REGISTRY_BIN := _build/tools/registry-$(REGISTRY_VERSION)

.PHONY: registry
registry: $(REGISTRY_BIN) ## the registry program (distribution/distribution, pinned) for the plugin install test

$(REGISTRY_BIN): contrib/versions.env
	@mkdir -p _build/tools/gobin
	cd _build/tools && GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0 GOBIN=$(abspath _build/tools/gobin) \
	  $(GO) install github.com/distribution/distribution/v3/cmd/registry@$(REGISTRY_VERSION)
	mv _build/tools/gobin/registry $@
