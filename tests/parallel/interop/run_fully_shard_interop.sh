#!/usr/bin/env bash
# PyTorch's fully_shard (FSDP2: torch 2.x, gloo on the CPU), then ours, on the same problem; the script compares.
# Usage: run_fully_shard_interop.sh DDPRUN FULLY_SHARD_INTEROP WORLD [bf16]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/same_torch.sh"
same_torch_or_skip
py=${DDP_PYTHON:-/usr/bin/python3}
if ! "$py" -c 'from torch.distributed.fsdp import fully_shard' 2>/dev/null; then
  echo "skipped: DDP_PYTHON=$py has torch $("$py" -c 'import torch; print(torch.__version__)'), which has no" \
       "fully_shard (FSDP2 came with torch 2.4); the 2.x line (DDP_TORCH=2) runs this comparison"
  exit 77
fi
work=$(mktemp -d /tmp/ddp-fully-shard-interop-XXXXXX)
trap 'rm -rf "$work"' EXIT
OMP_NUM_THREADS=1 "$1" --nproc-per-node "$3" --standalone "$py" "$here/fully_shard_interop.py" write "$work/theirs" "${@:4}" >/dev/null
OMP_NUM_THREADS=1 "$1" --nproc-per-node "$3" --standalone "$2" "$work/ours" "${@:4}"
"$py" "$here/fully_shard_interop.py" check "$3" "$work/theirs" "$work/ours" "${@:4}"
