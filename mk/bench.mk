# Benchmark (../shared/BENCH.md): the plugin as a plain process on a private
# socket, against a real sshfs share over loopback (contrib/share.sh), every
# configuration side by side, ratios to native ext4. Needs root. Not part of
# `make test`, but the test of the harness itself (bench-smoke: the ratio
# arithmetic, the report, the process helpers, the plugin protocol) is.
# Results: bench-results/bench[-quick].{json,md,png}.
#
#   make bench                 W1-W4, 3 runs, every configuration and peer (30-60 min)
#   make bench-quick           W1 and W2 on a small tree, bindstate vs native and the share (under 3 min)
#   make bench-smoke           test of the harness itself (seconds)
#   make bench-rtt             W1, W2, W4 over the share with each round trip 0, 0.1, 0.5 and 2 ms
#                              longer (contrib/delayline): how each state scales with the share's
#                              latency (about an hour)
#   make bench BENCH_ARGS='--configs native,delegated --workloads W2 --fuse-debug'

# The chart needs Debian's python3-matplotlib: prefer the system python3.
BENCH_PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
BENCH_WORK   ?= $(BUILD)/bench
BENCH_OUT    ?= bench-results
BENCH_ARGS   ?=
MUTAGEN      := $(BIN)/mutagen/mutagen
BENCH        := $(BENCH_PYTHON) contrib/bench/bench.py --plugin $(BIN)/bindstate --mutagen $(MUTAGEN) --work $(BENCH_WORK) --out $(BENCH_OUT)

# The latencies BENCH.md names for "a second share with injected per-operation latency".
BENCH_RTT ?= 0,0.1,0.5,2

.PHONY: bench bench-quick bench-smoke bench-rtt
bench: $(BIN)/bindstate ## benchmark W1-W4, all configurations and peers vs native (30-60 min, root)
	bash contrib/install-deps.sh --bench
	bash contrib/bench/mutagen.sh $(dir $(MUTAGEN))
	$(BENCH) $(BENCH_ARGS)

bench-quick: $(BIN)/bindstate ## benchmark W1 and W2 on a small tree (under 3 min, root)
	$(BENCH) --quick $(BENCH_ARGS)

bench-rtt: $(BIN)/bindstate $(BIN)/delayline ## W1, W2, W4 with the share's round trips 0-2 ms longer: how each state scales (root)
	$(BENCH) --delayline $(BIN)/delayline --share-rtt $(BENCH_RTT) --configs native,consistent,cached,delegated \
		--workloads W1,W2,W4 --no-extras --name bench-rtt $(BENCH_ARGS)

bench-smoke: ## test the benchmark harness itself (seconds)
	$(BENCH_PYTHON) contrib/bench/test_bench.py

TEST_TARGETS += bench-smoke
