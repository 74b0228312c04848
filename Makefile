# The two commands of README.md: `make serve` and `make test`. Every step below is idempotent,
# so both do whatever set-up is missing and skip the rest.

BUILD_DIR   ?= build
CUDA_BUILD_DIR ?= build-cuda
LLAMA_SRC   := $(CURDIR)/.deps/llama.cpp
JOBS        ?= $(shell nproc)
MODEL       ?= gemma3-270m
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

.PHONY: serve test deps llama-source build model python unit-test integration-test cuda clean \
	fuzz-build fuzz fuzz-smoke soak

serve: build model
	$(BRISK) serve --model $(MODEL) --host $(HOST) --port $(PORT) $(SERVE_ARGS)

test: build model python
	$(MAKE) --no-print-directory unit-test integration-test fuzz-smoke

deps:
	@scripts/install-deps.sh

llama-source: deps
	@scripts/fetch-llama.sh

$(BUILD_DIR)/CMakeCache.txt: | llama-source
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DBRISK_LLAMA_SOURCE_DIR=$(LLAMA_SRC)

build: llama-source $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

model: build
	@$(BRISK) pull $(MODEL)

python: deps
	@scripts/setup-python.sh

unit-test:
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

integration-test:
	$(VENV)/bin/python -m pytest -v tests/integration

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
	rm -rf $(BUILD_DIR) $(CUDA_BUILD_DIR) $(FUZZ_BUILD_DIR)
