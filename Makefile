# Makefile - the entry points: `make run` (build + run the default model),
# `make test` (everything CI checks), `make install [PREFIX=/usr/local]`.
# CMake does the real building.
JOBS ?= $(shell nproc)
BUILD ?= build

PREFIX ?= /usr/local

.PHONY: all deps build install run test test-release test-asan test-clang test-arm test-python bench clean

all: build

deps:
	./scripts/install-deps.sh
	@# the official OpenAI client for the server tests (tests/server)
	@[ -d tests/server/node_modules/openai ] || (cd tests/server && npm ci --no-audit --no-fund --loglevel=error)

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

# The command, library, header, Python package and default model under $(PREFIX).
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

run: build
	./$(BUILD)/xllm run

# Release build: unit, end-to-end and Python tests.
test-release: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# AddressSanitizer + UBSan build of the library, CLI and tests; all C tests again.
test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXLLM_SANITIZE=ON >/dev/null
	cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j$(JOBS) -E python

# The code must also be warning-free under clang.
test-clang: deps
	CC=clang cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build-clang -j$(JOBS)

# The NEON kernels: test_kernels cross-compiled for aarch64, run under qemu-user.
test-arm: deps
	./tests/arm/run.sh build-arm

test: test-release test-asan test-clang test-arm

bench: build
	./$(BUILD)/xllm bench -m models/stories260k -p 128 -n 128

clean:
	rm -rf build build-asan build-clang build-arm
