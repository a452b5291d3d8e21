# Makefile - the entry points: `make run` (build + run the default model),
# `make test` (everything CI checks), `make install [PREFIX=/usr/local]`.
# CMake does the real building.
JOBS ?= $(shell nproc)
BUILD ?= build

PREFIX ?= /usr/local

.PHONY: all deps build install run test test-release test-asan test-clang test-clang-asan test-fuzz-smoke test-tsan test-arm test-python fuzz bench clean

all: build

deps:
	./scripts/install-deps.sh
	@# the official OpenAI client for the server tests (tests/server)
	@[ -d tests/server/node_modules/openai ] && [ -d tests/server/node_modules/ai ] && [ -d tests/server/node_modules/@langchain/openai ] && [ -d tests/server/node_modules/ajv-formats ] || (cd tests/server && npm ci --no-audit --no-fund --loglevel=error)

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

# The command, library, header, Python package and default model under $(PREFIX).
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

run: build
	./$(BUILD)/xllm run

# No test may run longer than this (seconds; the slowest takes about 70 s under
# the sanitizers): a hang fails that test, by name, with its output so far,
# instead of stalling the whole run.
CTEST_TIMEOUT ?= 600

# Release build: unit, end-to-end and Python tests. `make test` leaves out the two
# slowest (the allocation-failure walk and the MPI runs, ~120 s of CI together), which
# test-asan runs again under the sanitizers anyway; `make test-release` alone runs all.
RELEASE_SKIP ?=
test-release: build
	cd $(BUILD) && ctest --output-on-failure --timeout $(CTEST_TIMEOUT) -j$(JOBS) \
		$(if $(RELEASE_SKIP),-E '^($(subst $() ,|,$(RELEASE_SKIP)))$$')

# AddressSanitizer + UBSan build of the library, CLI and tests; all C tests again,
# except the Vulkan ones (test_vulkan_*, e2e_vulkan_server): under ASan Mesa's lavapipe runs several
# times slower (its JIT-compiled shaders and driver threads are instrumented at
# every call into it) and its driver keeps allocations to exit, which
# LeakSanitizer reports as leaks not ours; they run in the release pass.
ASAN_EXCLUDE = python|test_vulkan_|e2e_vulkan_server
test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXLLM_SANITIZE=ON >/dev/null
	cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure --timeout $(CTEST_TIMEOUT) -j$(JOBS) -E '$(ASAN_EXCLUDE)'

# The code must also be warning-free under clang.
test-clang: deps
	CC=clang cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build-clang -j$(JOBS)

# clang's AddressSanitizer + UBSan (which, unlike GCC's, checks float -> int
# conversions: -fsanitize=float-cast-overflow), with libFuzzer instrumentation
# so the same build holds the fuzz harnesses: the C tests, then every saved
# fuzz input replayed and each harness fuzzed for FUZZ_SMOKE seconds (fuzz/).
FUZZ_SMOKE ?= 10
test-clang-asan: deps
	CC=clang cmake -S . -B build-clang-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXLLM_SANITIZE=ON -DXLLM_FUZZ=ON >/dev/null
	cmake --build build-clang-asan -j$(JOBS)
	cd build-clang-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure --timeout $(CTEST_TIMEOUT) -j$(JOBS) -E '$(ASAN_EXCLUDE)'
	./fuzz/run.sh build-clang-asan replay
	./fuzz/run.sh build-clang-asan $(FUZZ_SMOKE)

# The CI part of the above: the same clang build, but only the fuzz harnesses
# and the hostile-input tests (tests/unit/test_hostile_*, the allocator, the
# kernels' non-finite cases), the saved corpus replayed, FUZZ_SMOKE_CI seconds
# of fuzzing per harness. (The allocation-failure walk, test_alloc_fail, runs
# in the release and gcc ASan builds; a third time here took 116 s of CI.)
FUZZ_SMOKE_CI ?= 5
SMOKE_TESTS = test_hostile_template test_hostile_tokenizer test_hostile_config test_hostile_xllm test_alloc test_kernels
test-fuzz-smoke: deps
	CC=clang cmake -S . -B build-clang-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXLLM_SANITIZE=ON -DXLLM_FUZZ=ON >/dev/null
	cmake --build build-clang-asan -j$(JOBS) --target fuzz_gguf fuzz_safetensors fuzz_xllm fuzz_tokenizer fuzz_template fuzz_config fuzz_http $(SMOKE_TESTS)
	cd build-clang-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure --timeout $(CTEST_TIMEOUT) -j$(JOBS) -R '^($(subst $() ,|,$(SMOKE_TESTS)))$$'
	./fuzz/run.sh build-clang-asan replay
	./fuzz/run.sh build-clang-asan $(FUZZ_SMOKE_CI)

# ThreadSanitizer over the threaded tests (thread pool, KV cache under the pool,
# the allocator's debug tracker from four threads).
TSAN_TESTS = test_threadpool_stress test_kv_threadpool test_alloc test_engine
test-tsan: deps
	CC=clang cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXLLM_TSAN=ON >/dev/null
	cmake --build build-tsan -j$(JOBS) --target $(TSAN_TESTS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ctest --output-on-failure --timeout $(CTEST_TIMEOUT) \
		-R '^($(subst $() ,|,$(TSAN_TESTS)))$$'

# Fuzz every parser for FUZZ_TIME seconds each (fuzz/README.md; results in docs/FUZZING.md).
FUZZ_TIME ?= 600
fuzz: deps
	CC=clang cmake -S . -B build-clang-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXLLM_SANITIZE=ON -DXLLM_FUZZ=ON >/dev/null
	cmake --build build-clang-asan -j$(JOBS)
	./fuzz/run.sh build-clang-asan $(FUZZ_TIME)

# The NEON kernels: test_kernels cross-compiled for aarch64, run under qemu-user.
test-arm: deps
	./tests/arm/run.sh build-arm

test: RELEASE_SKIP = test_alloc_fail e2e_pp
test: test-release test-asan test-clang test-fuzz-smoke test-arm

bench: build
	./$(BUILD)/xllm bench -m models/stories260k -p 128 -n 128

clean:
	rm -rf build build-asan build-clang build-clang-asan build-tsan build-arm
