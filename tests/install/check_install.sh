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
# The package exports only ddp::-prefixed targets.
targets=$(sed -n 's/^add_library(\([^ ]*\) .*/\1/p' "$tmp"/prefix/lib*/cmake/ddp/ddpTargets.cmake | sort | tr '\n' ' ')
test "$targets" = "ddp::data ddp::ddp ddp::dist ddp::parallel ddp::spawn ddp::train " || { echo "exported targets: $targets"; exit 1; }
cmake -S "$src/tests/install/consumer" -B "$tmp/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DEXPECTED_BACKENDS="$(sed -n 's/^ddp backends: //p' "$build/ddp_backends.txt")" >/dev/null
cmake --build "$tmp/build" >/dev/null
"$tmp/build/consumer"
test -f "$tmp/prefix/include/ddp/spawn.h"
spawned=$("$tmp/build/consumer" spawn)  # ddp::spawn from the installed tree: 2 ranks
test "$spawned" = "consumer spawn: 2 ranks, sum 3" || { echo "consumer spawn printed: $spawned"; exit 1; }
"$tmp/prefix/bin/ddp-bench" --help >/dev/null
