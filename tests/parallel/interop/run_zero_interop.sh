#!/usr/bin/env bash
# PyTorch's ZeroRedundancyOptimizer, then ours, on the same problem; the script compares.
# Usage: run_zero_interop.sh DDPRUN ZERO_INTEROP
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/same_torch.sh"
same_torch_or_skip
work=$(mktemp -d /tmp/ddp-zero-interop-XXXXXX)
trap 'rm -rf "$work"' EXIT
OMP_NUM_THREADS=1 "$1" --nproc-per-node 2 --standalone ${DDP_PYTHON:-/usr/bin/python3} "$here/zero_interop.py" write "$work/theirs.pt" >/dev/null
OMP_NUM_THREADS=1 "$1" --nproc-per-node 2 --standalone "$2" "$work/ours.pt"
${DDP_PYTHON:-/usr/bin/python3} "$here/zero_interop.py" check "$work/theirs.pt" "$work/ours.pt"
