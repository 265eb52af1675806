#!/usr/bin/env bash
# Checks that every C++ file follows .clang-format (ddp's one format), with Debian 12's clang-format 14:
# another major version formats some constructs differently. Prints each file that differs and how to fix it.
#   check-format.sh [ROOT]         check the tree (git's tracked files, else every *.cpp/*.h under ROOT)
#   check-format.sh --self-test    check that a misformatted file is caught
set -euo pipefail
cf=${DDP_CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}
if [ -z "$cf" ]; then
  echo "check-format: no clang-format found: run ./scripts/install-deps.sh (Debian's clang-format 14)" >&2; exit 1
fi
major=$("$cf" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [ "$major" != 14 ]; then
  echo "check-format: $cf is clang-format $major; the format is clang-format 14's (Debian 12): set DDP_CLANG_FORMAT" >&2
  exit 1
fi
if [ "${1:-}" = --self-test ]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  if printf 'int  f( int x ){return x;}\n' | "$cf" --style="file:$root/.clang-format" --dry-run --Werror \
       --assume-filename=bad.cpp 2>/dev/null; then
    echo "check-format: self-test: a misformatted line passed" >&2; exit 1
  fi
  printf 'int f(int x) { return x; }\n' | "$cf" --style="file:$root/.clang-format" --dry-run --Werror \
    --assume-filename=good.cpp
  echo "check-format: self-test passed"; exit 0
fi
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
cd "$root"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h')
else
  mapfile -t files < <(find src include tools tests bench examples -name '*.cpp' -o -name '*.h' | sort)
fi
if "$cf" --dry-run --Werror "${files[@]}" >/dev/null 2>&1; then
  echo "check-format: ${#files[@]} files follow .clang-format"; exit 0
fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  "$cf" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check-format: %s\n' "${bad[@]/%/ differs from .clang-format}" >&2
  echo "check-format: ${#bad[@]} of ${#files[@]} files; fix with: $cf -i ${bad[*]}" >&2
fi
exit 1
