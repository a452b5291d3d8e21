#!/usr/bin/env bash
# install-deps.sh - the Debian packages the build and the tests need.
set -euo pipefail
PKGS="build-essential cmake clang libclang-rt-14-dev pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libxxhash-dev libyaml-dev python3 ca-certificates"
# pipeline parallelism (src/pipeline) on MPI, and mpirun for its tests
PKGS="$PKGS libopenmpi-dev openmpi-bin"
# the aarch64 (NEON) kernel tests: a cross compiler and qemu-user (make test-arm)
PKGS="$PKGS gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static"
# the Vulkan backend (src/backend/vulkan): headers and glslc to build it;
# Mesa's lavapipe (a Vulkan driver on the CPU), the loader and the validation
# layer so its tests run on a machine without a GPU; vulkaninfo to look
PKGS="$PKGS mesa-vulkan-drivers libvulkan-dev glslc glslang-tools spirv-tools vulkan-validationlayers vulkan-tools"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
# node + npm run the tokenizer conformance tests against HF tokenizers (an npm
# package); a node that ships its own npm (e.g. NodeSource) is fine as it is.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
[ -z "$missing" ] && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing
