# The two commands of README.md: `make serve` and `make test`. Every step below is idempotent,
# so both do whatever set-up is missing and skip the rest.

BUILD_DIR   ?= build
CUDA_BUILD_DIR ?= build-cuda
LLAMA_SRC   := $(CURDIR)/.deps/llama.cpp
JOBS        ?= $(shell nproc)
MODEL       ?= gemma3-270m
# The second real model of the tests: a Llama with its own Jinja chat template.
TEST_MODELS ?= $(MODEL) smollm2-135m all-minilm-l6-v2
HOST        ?= 127.0.0.1
PORT        ?= 8080
SERVE_ARGS  ?=
VENV        := .venv
BRISK       := $(BUILD_DIR)/bin/brisk

export CCACHE_DIR ?= $(HOME)/.cache/ccache
# Paths relative to the checkout, so a fresh clone elsewhere (CI) still hits the cache.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := true

FUZZ_BUILD_DIR   ?= build-fuzz
FUZZ_RUNS        ?= 1000000
FUZZ_SMOKE_RUNS  ?= 5000
FUZZ_SMOKE_SECONDS ?= 10

.PHONY: serve test deps llama-source build model test-models python unit-test integration-test cuda clean \
	fuzz-build fuzz fuzz-smoke soak sanitize sanitize-unit-build sanitize-unit sanitize-thread \
	peer-tools structured-outputs-check format-fuzz

serve: build model
	$(BRISK) serve --model $(MODEL) --host $(HOST) --port $(PORT) $(SERVE_ARGS)

# Each stage is timed (scripts/timed-stages.sh prints the table at the end, also on failure).
# The unit tests run once, under ASan+UBSan (sanitize-unit); `make unit-test` runs them on the
# Release build.
TEST_STAGES := deps llama-source build test-models python sanitize-unit-build \
	sanitize-unit integration-test fuzz-build fuzz-smoke
# Outside `all` (tests/unit/CMakeLists.txt): each build that runs them names them.
UNIT_TEST_TARGETS := brisk_unit_tests random_gguf_test
test:
	@MAKE="$(MAKE)" scripts/timed-stages.sh $(TEST_STAGES)

deps:
	@scripts/install-deps.sh

llama-source: deps
	@scripts/fetch-llama.sh

$(BUILD_DIR)/CMakeCache.txt: | llama-source
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DBRISK_LLAMA_SOURCE_DIR=$(LLAMA_SRC)

build: llama-source $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# llama.cpp tools no test runs: llama-bench (bench/serve_compare.py prints its figure beside ours
# when it is built), llama-cli and llama-tokenize, by hand.
peer-tools: build
	cmake --build $(BUILD_DIR) -j $(JOBS) --target llama-bench llama-cli llama-tokenize

model: build
	@$(BRISK) pull $(MODEL)

test-models: build
	@for name in $(TEST_MODELS); do $(BRISK) pull $$name || exit 1; done

python: deps
	@scripts/setup-python.sh

unit-test: build
	cmake --build $(BUILD_DIR) -j $(JOBS) --target $(UNIT_TEST_TARGETS)
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# --durations: the slowest tests, in every CI log.
# The tests marked `parallel` (they share nothing and measure no time) run first on $(JOBS)
# pytest-xdist workers, a file per worker, each server on one compute thread so that two of them
# fill two cores without ggml's threads spinning for a parked partner; then the rest, one at a
# time, as they were written. Both halves run even when the first fails.
integration-test:
	@status=0; \
	BRISK_TEST_THREADS=1 $(VENV)/bin/python -m pytest -v --durations=15 -n $(JOBS) \
	  --dist loadfile --no-loadscope-reorder -m parallel tests/integration || status=1; \
	$(VENV)/bin/python -m pytest -v --durations=20 -m "not parallel" tests/integration || status=1; \
	exit $$status

# libFuzzer harnesses (tests/fuzz), built with clang and ASan/UBSan in a build of their own; the
# gcc build above is untouched. `fuzz` runs each harness for FUZZ_RUNS executions (figures in
# BENCHMARKS.md), `fuzz-smoke` briefly, after replaying the seeds and every crash found so far.
fuzz-build: llama-source
	cmake -S tests/fuzz -B $(FUZZ_BUILD_DIR) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DBRISK_LLAMA_SOURCE_DIR=$(LLAMA_SRC)
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS)

fuzz: fuzz-build
	scripts/run-fuzzers.sh $(FUZZ_BUILD_DIR) --runs $(FUZZ_RUNS)

fuzz-smoke: fuzz-build
	scripts/run-fuzzers.sh $(FUZZ_BUILD_DIR) --smoke $(FUZZ_SMOKE_RUNS) $(FUZZ_SMOKE_SECONDS)

# The soak of issue 13 (BENCHMARKS.md, "Soak"): 1,000 concurrent streams for 10 minutes, then a
# 2-minute baseline; about 15 minutes in all. SOAK_ARGS passes options, e.g.
# SOAK_ARGS="--streams 200 --duration 60".
SOAK_ARGS   ?=
soak: build model python
	$(VENV)/bin/python bench/soak.py --brisk-bin $(BRISK) $(SOAK_ARGS)

# Grammar exactness at full strength (BENCHMARKS.md, "Structured outputs"): 200 answers drawn at
# temperature 1 under a JSON schema, every one parsed and validated; CI draws 40.
structured-outputs-check: build test-models python
	BRISK_GRAMMAR_SAMPLES=200 $(VENV)/bin/python -m pytest -v \
	  tests/integration/test_structured_outputs.py -k temperature_one

# Random JSON schemas and GBNF through a real server (tests/integration/test_output_format_fuzz.py
# draws 120 of each in CI); FORMAT_FUZZ_SEED picks another sequence.
FORMAT_FUZZ_CASES ?= 2000
FORMAT_FUZZ_SEED  ?= 20261206
format-fuzz: build test-models python
	BRISK_FORMAT_FUZZ_CASES=$(FORMAT_FUZZ_CASES) BRISK_FORMAT_FUZZ_SEED=$(FORMAT_FUZZ_SEED) \
	  $(VENV)/bin/python -m pytest -v -s tests/integration/test_output_format_fuzz.py

# --- Sanitizers (BENCHMARKS.md, "Sanitizers") ---
# Only brisk's own code is instrumented (cmake/sanitizers.cmake): llama.cpp keeps the flags of
# $(BUILD_DIR), so its objects are ccache hits, and its reference tools come from $(BUILD_DIR).
ASAN_BUILD_DIR := build-asan
# The unit tests' sanitizer build: -O0, which compiles in less than half the time of -O1
# (cmake/sanitizers.cmake) and finds the same faults.
ASAN_UNIT_BUILD_DIR := build-asan-unit
TSAN_BUILD_DIR := build-tsan
SANITIZER_SUPPRESSIONS := $(CURDIR)/tests/sanitizers
SANITIZE_CMAKE_ARGS := -DCMAKE_BUILD_TYPE=Release -DBRISK_LLAMA_SOURCE_DIR=$(LLAMA_SRC) \
	-DBRISK_BUILD_LLAMA_TOOLS=OFF
# Every report is fatal: the process stops at the first one with a non-zero exit code (leaks:
# at exit), so a test fails on it. Integration runs also send reports to a directory that
# tests/integration/sanitizer_reports.py checks after every test.
ASAN_ENV := ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:$\
	check_initialization_order=1:strict_init_order=1:print_stacktrace=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	LSAN_OPTIONS=suppressions=$(SANITIZER_SUPPRESSIONS)/lsan.supp:print_suppressions=0
TSAN_ENV := TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:$\
	suppressions=$(SANITIZER_SUPPRESSIONS)/tsan.supp:print_suppressions=0
# ctest -R: the unit tests that start threads (the sampling pool; random-gguf's writer threads).
TSAN_UNIT_TESTS ?= WorkerPool|RandomGguf
# The integration tests where requests, disconnects, drains and /metrics reads meet the engine
# thread and the I/O threads.
TSAN_INTEGRATION_TESTS ?= tests/integration/test_admission.py tests/integration/test_lifecycle.py \
	tests/integration/test_metrics.py \
	tests/integration/test_correctness.py::test_concurrent_greedy_departs_from_sequential_only_at_near_ties \
	tests/integration/test_api.py::test_keep_alive_serves_several_requests_on_one_connection \
	tests/integration/test_api.py::test_sdk_streaming_chat_with_usage \
	tests/integration/test_bench.py::test_bench_against_brisk_counts_exact_tokens \
	tests/integration/test_bench.py::test_open_loop_keeps_its_schedule_and_reports_it

# The references (llama-server, llama-completion) stay uninstrumented, from $(BUILD_DIR).
SANITIZED_PYTEST_ENV := BRISK_LLAMA_BIN_DIR=$(CURDIR)/$(BUILD_DIR)/bin

$(ASAN_BUILD_DIR)/CMakeCache.txt: | llama-source
	cmake -S . -B $(ASAN_BUILD_DIR) $(SANITIZE_CMAKE_ARGS) -DBRISK_SANITIZE=address,undefined

$(TSAN_BUILD_DIR)/CMakeCache.txt: | llama-source
	cmake -S . -B $(TSAN_BUILD_DIR) $(SANITIZE_CMAKE_ARGS) -DBRISK_SANITIZE=thread

$(ASAN_UNIT_BUILD_DIR)/CMakeCache.txt: | llama-source
	cmake -S . -B $(ASAN_UNIT_BUILD_DIR) $(SANITIZE_CMAKE_ARGS) -DBRISK_SANITIZE=address,undefined \
	  -DBRISK_SANITIZE_OPT=0

# ASan + UBSan on the unit tests only (part of `make test`, so CI runs it).
sanitize-unit-build: llama-source $(ASAN_UNIT_BUILD_DIR)/CMakeCache.txt
	cmake --build $(ASAN_UNIT_BUILD_DIR) -j $(JOBS) --target $(UNIT_TEST_TARGETS)

# Each binary in $(JOBS) shards, not one process per test as ctest runs them: under ASan a
# process takes ~0.2 s to start, which was half of this stage (scripts/run-gtest-shards.sh).
sanitize-unit: sanitize-unit-build
	$(ASAN_ENV) scripts/run-gtest-shards.sh $(JOBS) \
	  $(addprefix $(ASAN_UNIT_BUILD_DIR)/bin/,$(UNIT_TEST_TARGETS))

# ASan + UBSan on the unit and the integration tests.
sanitize: build test-models python $(ASAN_BUILD_DIR)/CMakeCache.txt
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS) --target all $(UNIT_TEST_TARGETS)
	cd $(ASAN_BUILD_DIR) && $(ASAN_ENV) ctest --output-on-failure -j $(JOBS)
	$(ASAN_ENV) BRISK_BIN_DIR=$(CURDIR)/$(ASAN_BUILD_DIR)/bin $(SANITIZED_PYTEST_ENV) \
	  BRISK_SANITIZER_REPORT_DIR=$(CURDIR)/$(ASAN_BUILD_DIR)/sanitizer-reports \
	  $(VENV)/bin/python -m pytest -v tests/integration

# ThreadSanitizer on the tests that run threads.
sanitize-thread: build test-models python $(TSAN_BUILD_DIR)/CMakeCache.txt
	cmake --build $(TSAN_BUILD_DIR) -j $(JOBS) --target all $(UNIT_TEST_TARGETS)
	cd $(TSAN_BUILD_DIR) && $(TSAN_ENV) ctest --output-on-failure -R '$(TSAN_UNIT_TESTS)'
	$(TSAN_ENV) BRISK_BIN_DIR=$(CURDIR)/$(TSAN_BUILD_DIR)/bin $(SANITIZED_PYTEST_ENV) BRISK_TEST_THREADS=1 \
	  BRISK_SANITIZER_REPORT_DIR=$(CURDIR)/$(TSAN_BUILD_DIR)/sanitizer-reports \
	  $(VENV)/bin/python -m pytest -v $(TSAN_INTEGRATION_TESTS)

# The CUDA build compiles anywhere nvcc and cuBLAS are installed; it runs where a GPU is. Its CPU
# code is portable (AVX2), since a GPU binary is usually built on one machine and run on another.
# One architecture keeps the compile to ~30 minutes on 2 cores: 90 = H100/H200; use e.g.
# CUDA_ARCHS="80;89;90" for A100/L4/H100 in one binary.
CUDA_ARCHS ?= 90
cuda: llama-source
	cmake -S . -B $(CUDA_BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DBRISK_LLAMA_SOURCE_DIR=$(LLAMA_SRC) \
	  -DBRISK_CUDA=ON -DBRISK_NATIVE=OFF -DBRISK_BUILD_TESTS=OFF "-DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHS)" $(CUDA_CMAKE_ARGS)
	cmake --build $(CUDA_BUILD_DIR) -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR) $(CUDA_BUILD_DIR) $(FUZZ_BUILD_DIR) $(ASAN_BUILD_DIR) \
	  $(ASAN_UNIT_BUILD_DIR) $(TSAN_BUILD_DIR)
