#!/usr/bin/env bash
# PyTorch's DDP, then ours, on the same problem; ours compares. Usage: run_interop.sh DDPRUN DDP_INTEROP
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp /tmp/ddp-interop-XXXXXX)
trap 'rm -f "$out"' EXIT
# torchrun of Debian's python3-torch 1.13 fails under Python 3.11; ddprun sets the same variables.
OMP_NUM_THREADS=1 "$1" --nproc-per-node 2 --standalone /usr/bin/python3 "$here/ddp_interop.py" "$out" >/dev/null
"$1" --nproc-per-node 2 --standalone "$2" "$out"
