#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then configures, builds and
# runs a separate project that uses find_package(ddp). Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d /tmp/ddp-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -f "$tmp/prefix/include/ddp/ddp.h"
test -f "$tmp/prefix/bin/ddprun"
cmake -S "$src/tests/install/consumer" -B "$tmp/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
"$tmp/build/consumer"
"$tmp/prefix/bin/ddp-bench" --help >/dev/null
