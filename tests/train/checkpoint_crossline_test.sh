#!/usr/bin/env bash
# Checkpoints between the two LibTorch lines, both ways: each build's checkpoint_crossline writes SGD, Adam and
# AdamW checkpoints that the other build loads bit for bit, and that the other line's Python (torch.load)
# reads (checkpoint_interop.py check).
# Usage: checkpoint_crossline_test.sh THIS_TOOL THIS_PYTHON OTHER_TOOL OTHER_PYTHON ORACLE_PY
set -euo pipefail
this=$1 this_py=$2 other=$3 other_py=$4 oracle=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/ours" "$work/theirs"
"$this" write "$work/ours"
"$other" check "$work/ours"
"$other_py" "$oracle" check "$work/ours"
"$other" write "$work/theirs"
"$this" check "$work/theirs"
"$this_py" "$oracle" check "$work/theirs"
echo "checkpoints cross both ways"
