#!/usr/bin/env bash
# install-deps.sh - the Debian packages the build and the tests need.
set -euo pipefail
PKGS="build-essential cmake clang libcjson-dev libxxhash-dev python3 ca-certificates"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
[ -z "$missing" ] && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing
