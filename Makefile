# tern: the commands in README.md. Every target installs missing Debian
# packages first (scripts/install-deps.sh), then configures and builds with
# CMake.
#
# Builds are quiet: no "Entering directory" lines (CMake's make runs under
# this one), no per-file or per-target progress (CMAKE_RULE_MESSAGES and
# CMAKE_TARGET_MESSAGES off), no echoed commands. What the compiler says
# (every error and warning, in full) and make's own error lines still
# print; ctest's output is untouched.

JOBS ?= $(shell nproc)
PREFIX ?= /usr/local
DESTDIR ?=
BUILD ?= build
DATA ?= ./data
CLUSTER_DATA ?= ./cluster-data
FUZZ_SECONDS ?= 60
SOAK_SECONDS ?= 3600
SIM_SCHEDULES ?= 50000
CMAKE_FLAGS ?=
TERND_FLAGS ?=
# QUIET at configure time; QUIET_MAKE goes to the make of CMake's Makefile
# generator at build time.
QUIET := -DCMAKE_RULE_MESSAGES=OFF -DCMAKE_TARGET_MESSAGES=OFF
QUIET_MAKE := -- --no-print-directory -s

.PHONY: all build install compat-deps run cluster cluster-restart cluster-kill cluster-stop test asan tsan fuzz bench soak repl-suite lint format deps clean

all: build

deps:
	@./scripts/install-deps.sh

# Configured again when this file changes too (it holds the CMake flags);
# the touch marks it done even when CMake leaves its Makefile as it was.
$(BUILD)/Makefile: CMakeLists.txt Makefile
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(QUIET) $(CMAKE_FLAGS) >/dev/null
	@touch $@
	@ln -sf $(BUILD)/compile_commands.json compile_commands.json

build: deps $(BUILD)/Makefile
	@cmake --build $(BUILD) -j $(JOBS) $(QUIET_MAKE)

# Install the programs, their man pages, the default config and the systemd
# unit under PREFIX (staged under DESTDIR when given): packaging/install.cmake,
# docs/operations.md "Installing". The prefix is the install's, not the
# build's: the unit and the config are written for it as they install, and
# /etc/tern holds the config when PREFIX=/usr. Builds only what installs.
install: deps $(BUILD)/Makefile
	@cmake --build $(BUILD) -j $(JOBS) --target tern-installables $(QUIET_MAKE)
	@DESTDIR=$(DESTDIR) cmake --install $(BUILD) --prefix $(PREFIX)

# Start ternd in the foreground on loopback with the built-in defaults (and
# TERND_FLAGS) on $(DATA); its process id is in $(DATA)/ternd.pid while it
# runs. Stop it with Ctrl-C or kill $$(cat $(DATA)/ternd.pid). Builds only
# what the README's tour runs (the daemon, ternctl, tern-bench), not the
# test binaries: tests/e2e/test_readme.py checks this list against the tour.
run: deps $(BUILD)/Makefile
	@cmake --build $(BUILD) -j $(JOBS) --target ternd ternctl tern-bench $(QUIET_MAKE)
	@./$(BUILD)/ternd --data-path $(DATA) --pid-file $(DATA)/ternd.pid $(TERND_FLAGS)

# A three-node cluster on loopback in $(CLUSTER_DATA), running in the
# background (scripts/cluster.sh, docs/cluster.md): a new directory gets its
# own certificates, secret and a command file per node; one made before has
# its stopped nodes started again with their data. cluster-restart N=2
# restarts node 2 (SIGTERM, then its command again), cluster-kill N=2
# SIGKILLs it, cluster-stop stops every node by its PID file. Like run, it
# builds only what it runs (ternd, and ternctl for the quick start).
cluster: deps $(BUILD)/Makefile
	@cmake --build $(BUILD) -j $(JOBS) --target ternd ternctl $(QUIET_MAKE)
	@TERND=$(BUILD)/ternd ./scripts/cluster.sh start $(CLUSTER_DATA)

cluster-restart:
	@./scripts/cluster.sh restart "$(N)" $(CLUSTER_DATA)

cluster-kill:
	@./scripts/cluster.sh kill "$(N)" $(CLUSTER_DATA)

cluster-stop:
	@./scripts/cluster.sh stop $(CLUSTER_DATA)

# The npm packages of the suites that need them, each pinned by its
# lockfile: the nsqjs client (tests/compat) and playwright-core, which
# drives Debian's chromium in the console's browser test (tests/console).
compat-deps: deps
	@for d in tests/compat tests/console; do \
		if [ ! -f $$d/node_modules/.package-lock.json ] || \
		    [ $$d/package-lock.json -nt $$d/node_modules/.package-lock.json ]; then \
			(cd $$d && npm ci --no-audit --no-fund --loglevel=error) || exit 1; \
		fi; \
	done

# Build and run every suite: unit, fuzz corpora, crash, end-to-end, compat.
test: build compat-deps
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The tests that repeat a case (label soak: cluster_cycles' stop/start
# cycles, crash_powerloss' power cuts, the replication simulation's random
# fault schedules, the replication fault suite's cases in random order for
# TERN_SOAK_SECONDS) at full repetition (TERN_SOAK=1; SIM_SCHEDULES schedules
# per configuration, a failure prints the seed to replay); make test runs
# them a few times each. ctest stops every test still running SOAK_SECONDS
# (under a day) from now and fails it.
soak: build
	cd $(BUILD) && TERN_SOAK=1 TERN_SOAK_SECONDS=$(SOAK_SECONDS) TERN_SIM_SCHEDULES=$(SIM_SCHEDULES) ctest --output-on-failure \
		-j $(JOBS) -L soak --stop-time $$(date -d "+$(SOAK_SECONDS) seconds" +%H:%M:%S)

# The replication fault suite alone (tests/cluster/test_replication.py:
# the ledger checker and the fault cases of docs/replication.md), one case
# after another; make test runs them too.
repl-suite: build
	cd $(BUILD) && ctest --output-on-failure -L replsuite

# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer,
# but the Debian package test (label package: it builds its own release
# tree, so nothing of it would run sanitized), the deployment checks
# (label deploy: manifests, chart, promtool), the browser test (label
# console: Chromium driving the page; the console's C side, its routes and
# headers, runs sanitized in unit_api_test_console and e2e_console) and the
# replication fault suite (label replsuite: a dozen clusters under load for
# ten minutes; the replicated paths it drives run sanitized in
# cluster_replica, cluster_repair, cluster_chansnap and the other
# replicated cluster tests). They keep CI's time down.
asan: deps compat-deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTERN_SANITIZE=address,undefined $(QUIET) >/dev/null
	cmake --build build-asan -j $(JOBS) $(QUIET_MAKE)
	cd build-asan && TERN_SANITIZED=1 ctest --output-on-failure -j $(JOBS) -LE 'package|deploy|console|replsuite|heavy'

# The threaded storage code under ThreadSanitizer.
tsan: deps
	CC=clang cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DTERN_SANITIZE=thread $(QUIET) >/dev/null
	cmake --build build-tsan -j $(JOBS) $(QUIET_MAKE)
	cd build-tsan && TERN_SANITIZED=1 ctest --output-on-failure -j $(JOBS) -L 'unit|crash'

# Run every libFuzzer target for FUZZ_SECONDS each, growing its corpus.
fuzz: deps
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DTERN_FUZZ=ON \
		-DTERN_SANITIZE=address,undefined $(QUIET) >/dev/null
	cmake --build build-fuzz -j $(JOBS) $(QUIET_MAKE)
	@for d in tests/fuzz/*/; do \
		t=$$(basename $$d); \
		echo "== fuzz $$t ($(FUZZ_SECONDS)s)"; \
		./build-fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
			$$d/corpus || exit 1; \
	done

bench: deps
	cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release $(QUIET) >/dev/null
	cmake --build build-bench -j $(JOBS) --target tern-storage-bench tern-rpc-bench ternd tern-bench \
		tern-v1-bench $(QUIET_MAKE)
	./build-bench/tern-storage-bench
	./build-bench/tern-rpc-bench
	./bench/nsq_bench.sh build-bench
	./bench/v1_bench.sh build-bench

lint: build
	@echo "== clang-format"
	@clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')
	@echo "== clang-tidy"
	@clang-tidy -p $(BUILD) --quiet $$(git ls-files 'src/*.c') 2>/dev/null
	@echo "== cppcheck"
	@cppcheck --quiet --error-exitcode=1 --enable=warning,portability,performance \
		--inline-suppr --suppress=missingIncludeSystem -I src $$(git ls-files 'src/*.c')

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-tsan build-fuzz build-bench compile_commands.json
