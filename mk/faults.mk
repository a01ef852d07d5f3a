# Fault injection (issue 5): kill -9 of the plugin during delegated writes
# and during writeback, daemon restart, the share vanishing / filling up /
# turning read-only, host and container editing the same file. Real dockerd,
# managed plugin and sshfs share, as test-integration (root). The Go-level
# faults (local store full, hostile input, the exerciser) run in test-unit.
#
#   make test-faults                          all of them (a few minutes)
#   make test-faults FAULT_RUNS=20 FAULT_SEED=7   more kill -9 runs, another seed
#   make test-long                            the exerciser for long (EXERCISE_OPS, EXERCISE_SEED)

FAULT_RUN     ?= TestFault
FAULT_RUNS    ?= 8
FAULT_SEED    ?= 1
FAULT_TIMEOUT ?= 20m
EXERCISE_OPS  ?= 20000
EXERCISE_SEED ?=

.PHONY: test-faults
test-faults: plugin-rootfs ## fault injection on a private dockerd: kill -9 plugin, daemon restart, share down/full/read-only (root)
	BINDSTATE_FAULTS=1 BINDSTATE_FAULT_RUNS=$(FAULT_RUNS) BINDSTATE_FAULT_SEED=$(FAULT_SEED) \
	BINDSTATE_PLUGIN_DIR=$(abspath $(PLUGIN_DIR)) $(GO) test $(GOFLAGS_PLUGIN) $(GOTEST_FLAGS) -count=1 \
	  -timeout $(FAULT_TIMEOUT) -run '$(FAULT_RUN)' ./integration/

.PHONY: test-long
test-long: ## the integrity exerciser for long (EXERCISE_OPS=20000, EXERCISE_SEED=...)
	BINDSTATE_EXERCISE_OPS=$(EXERCISE_OPS) BINDSTATE_EXERCISE_SEED=$(EXERCISE_SEED) \
	  $(GO) test $(GOFLAGS_PLUGIN) $(GOTEST_FLAGS) -count=1 -timeout 60m -run 'TestExerciser' -v ./plugin/frontend/

TEST_TARGETS += test-faults
