#!/usr/bin/env bash
# PyTorch's DDP under Join, then ours with ddp::Join, on the same uneven shards; ours compares.
# Usage: run_join_interop.sh DDPRUN JOIN_INTEROP NPROC DIVIDE MODEL TOLERANCE
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/same_torch.sh"
same_torch_or_skip
out=$(mktemp /tmp/ddp-join-interop-XXXXXX)
trap 'rm -f "$out"' EXIT
# torchrun of Debian's python3-torch 1.13 fails under Python 3.11; ddprun sets the same variables.
OMP_NUM_THREADS=1 "$1" --nproc-per-node "$3" --standalone ${DDP_PYTHON:-/usr/bin/python3} "$here/join_interop.py" "$out" "$4" "$5" >/dev/null
OMP_NUM_THREADS=1 "$1" --nproc-per-node "$3" --standalone "$2" "$out" "$4" "$5" "$6"
