#!/usr/bin/env bash
# One gloo in the process: libddp_dist.so holds no gloo code of its own (nothing defined in namespace gloo::,
# so the gloo headers it was compiled with contribute declarations only), every gloo:: symbol it uses is
# defined by GLOO_LIB (libtorch_cpu.so of a LibTorch 2.x, or Debian's libgloo.so under Debian's LibTorch),
# and with a LibTorch that carries gloo inside, it loads no libgloo.so.
# Usage: gloo_symbols_test.sh LIBDDP_DIST GLOO_LIB INSIDE_TORCH(ON|OFF)
set -euo pipefail
lib=$1 gloo_lib=$2 inside=$3
defined=$(nm -DC --defined-only "$lib" | awk '{ $1=""; $2=""; sub(/^  /, ""); print }' | grep '^gloo::' || true)
if [ -n "$defined" ]; then
  echo "FAIL: $lib defines gloo symbols (code from the gloo headers, which may not match $gloo_lib's):"
  echo "$defined"
  exit 1
fi
used=$(nm -D --undefined-only "$lib" | awk '{ print $NF }' | grep '^_ZN4gloo' || true)
provided=$(nm -D --defined-only "$gloo_lib" | awk '{ print $NF }')
missing=$(comm -23 <(echo "$used" | sed '/^$/d' | sort -u) <(echo "$provided" | sort -u))
if [ -n "$missing" ]; then
  echo "FAIL: gloo symbols that $lib uses and $gloo_lib lacks:"
  echo "$missing" | c++filt
  exit 1
fi
needed=$(readelf -d "$lib" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p')
if [ "$inside" = ON ] && echo "$needed" | grep -q libgloo; then
  echo "FAIL: $lib needs a libgloo.so beside the gloo inside $gloo_lib: $needed"
  exit 1
fi
echo "ok: $(echo "$used" | sed '/^$/d' | wc -l) gloo symbols used, all from $gloo_lib; none defined in $lib; libgloo needed: $(echo "$needed" | grep -c libgloo || true)"
