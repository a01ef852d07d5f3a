# Integration tests: a private dockerd (Debian's docker.io on its own socket,
# data root and exec root), the managed plugin from _build/plugin, real
# containers and a real slow share (contrib/share.sh: sshd + sshfs over
# loopback). Root only; they take a few minutes.
#
#   make test-integration                         all of them
#   make test-integration INTEGRATION_RUN=TestD4  only those matching
#   BINDSTATE_DOCKERD=/path/dockerd BINDSTATE_DAEMON_PATH=/dir/with/runc make test-integration
#                                                 against another daemon (patched engine)

INTEGRATION_RUN ?= .
INTEGRATION_TIMEOUT ?= 30m

.PHONY: test-integration
test-integration: plugin-rootfs registry ## integration tests: private dockerd + managed plugin + containers + sshfs share (root)
	BINDSTATE_PLUGIN_DIR=$(abspath $(PLUGIN_DIR)) BINDSTATE_REGISTRY=$(abspath $(REGISTRY_BIN)) $(GO) test $(GOFLAGS_PLUGIN) $(GOTEST_FLAGS) -count=1 \
	  -timeout $(INTEGRATION_TIMEOUT) -run '$(INTEGRATION_RUN)' ./integration/...

TEST_TARGETS += test-integration
