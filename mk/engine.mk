# The patched engine, CLI and Compose (docs/engine.md): `state=` and
# `consistency=` on binds, served by the bindstate plugin, with
# writeback-aware exits. Built from the pinned upstream modules
# (contrib/versions.env) + engine-patch/ and cli-patch/ by contrib/engine.sh;
# cached by a stamp (sha256 of patches, pins and script), so a warm
# `make engine cli` takes a second.
#
#   make engine        dockerd + runc          -> _build/engine/bin/
#   make cli           docker + docker-compose -> _build/engine/bin/ (+ _build/engine/cli-plugins/)
#   make engine-unit   upstream unit tests of the packages the patches touch
#   make test-engine   integration tests against the patched engine (root)
#   make engine-status what is built, what needs a build
#
# FORCE=1 rebuilds. Upstream builds always use GOFLAGS=-mod=mod (set inside
# the script, whatever is exported here); the repository's own builds keep
# $(GOFLAGS_PLUGIN).

ENGINE_OUT := $(abspath $(BUILD))/engine
ENGINE_BIN := $(ENGINE_OUT)/bin
ENGINE_TEST_RUN ?= TestEngine
ENGINE_TEST_TIMEOUT ?= 30m

.PHONY: engine
engine: ## patched dockerd + runc into _build/engine/bin (cached: rebuilt when a patch or pin changes)
	@ENGINE_OUT=$(ENGINE_OUT) GO=$(GO) FORCE=$(FORCE) bash contrib/engine.sh engine

.PHONY: cli
cli: ## patched docker CLI + compose into _build/engine/bin (cached likewise)
	@ENGINE_OUT=$(ENGINE_OUT) GO=$(GO) FORCE=$(FORCE) bash contrib/engine.sh cli

.PHONY: engine-status
engine-status: ## say whether the patched engine and CLI are built and up to date
	@ENGINE_OUT=$(ENGINE_OUT) GO=$(GO) bash contrib/engine.sh status

.PHONY: engine-unit
engine-unit: ## upstream unit tests of the packages engine-patch/ and cli-patch/ touch, on the patched trees
	@ENGINE_OUT=$(ENGINE_OUT) GO=$(GO) GOTEST_FLAGS="$(GOTEST_FLAGS)" bash contrib/engine.sh unit

# The integration tests of integration/engine*_test.go (build tag `engine`)
# share the harness of the other integration tests, pointed at the patched
# binaries.
.PHONY: test-engine
test-engine: engine cli plugin-rootfs ## integration tests of the patched engine, CLI and Compose (root; builds them first)
	BINDSTATE_PLUGIN_DIR=$(abspath $(PLUGIN_DIR)) \
	BINDSTATE_DOCKERD=$(ENGINE_BIN)/dockerd BINDSTATE_DOCKER=$(ENGINE_BIN)/docker \
	BINDSTATE_DAEMON_PATH=$(ENGINE_BIN) BINDSTATE_ENGINE_BIN=$(ENGINE_BIN) \
	$(GO) test $(GOFLAGS_PLUGIN) $(GOTEST_FLAGS) -tags engine -count=1 \
	  -timeout $(ENGINE_TEST_TIMEOUT) -run '$(ENGINE_TEST_RUN)' ./integration/

# In `make test` (CI): the patch series' upstream unit tests, then the
# integration tests against the patched engine. Measured cold (empty module
# and build caches, 2 CPUs, machine shared with other jobs): engine 229 s
# (downloads included), CLI + Compose 147 s, engine-unit about 100 s once the
# engine is built (it reuses its compiled packages), test-engine about 100 s:
# about 10 minutes. Warm, the builds are skipped (stamp, ~1 s).
TEST_TARGETS += engine-unit test-engine
