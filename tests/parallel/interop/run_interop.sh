#!/usr/bin/env bash
# PyTorch's DDP, then ours, on the same problem; ours compares.
# Usage: run_interop.sh DDPRUN DDP_INTEROP [HOOK STEPS [NPROC]]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/same_torch.sh"
same_torch_or_skip
out=$(mktemp /tmp/ddp-interop-XXXXXX)
trap 'rm -f "$out"' EXIT
args=("$out")
[ $# -ge 4 ] && args+=("$3" "$4")
np=${5:-2}
# torchrun of Debian's python3-torch 1.13 fails under Python 3.11; ddprun sets the same variables.
OMP_NUM_THREADS=1 "$1" --nproc-per-node "$np" --standalone ${DDP_PYTHON:-/usr/bin/python3} "$here/ddp_interop.py" "${args[@]}" >/dev/null
OMP_NUM_THREADS=1 "$1" --nproc-per-node "$np" --standalone "$2" "${args[@]}"
