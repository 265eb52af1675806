#!/usr/bin/env bash
# The live progress line on a terminal (a pseudo-terminal from util-linux's `script`): ddp-train alone redraws
# it in place with '\r'; under ddprun (whose ranks write to pipes) the DDP_TTY hint gives the same line, redrawn
# after its "[rank 0] " prefix; without a terminal the plain lines stay as they were.
# usage: progress_tty_test.sh DDPRUN DDP_TRAIN
set -euo pipefail
ddprun=$1 train=$2
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
command -v script > /dev/null || { echo "FAIL: no script(1) (util-linux)"; exit 1; }
args="$recipe ${data[*]} --epochs 2 --batch-size 16 --log-every 2"
# matches FILE PATTERN: a Python regex over the raw bytes of FILE.
matches() {
  ${DDP_PYTHON:-/usr/bin/python3} - "$1" "$2" <<'PY'
import re, sys
sys.exit(0 if re.search(sys.argv[2].encode(), open(sys.argv[1], "rb").read()) else 1)
PY
}
has() { matches "$1" "$2" || { echo "FAIL: $3"; cat -A "$1" | head -40; exit 1; }; }
hasnt() { if matches "$1" "$2"; then echo "FAIL: $3"; cat -A "$1" | head -40; exit 1; fi; }

# 1. ddp-train on a terminal: the bar with epoch and run ETAs, redrawn with '\r'; no plain lines.
script -qec "env -u DDP_TTY $train $args --out-dir $work/a" /dev/null > "$work/tty" < /dev/null
has "$work/tty" '\repoch 1/2 \[=*>? *\] \d+/\d+ loss [0-9.e-]+ lr [0-9.e-]+ \| [0-9.]+ samples/s \| eta \d+:\d\d, run \d+:\d\d\x1b\[K' \
  "no live line with both ETAs"
has "$work/tty" '\repoch 2/2 \[====================\] (\d+)/\1 .*\| eta 0:00, run 0:00\x1b\[K\r?\nepoch 2/2 \| train_loss' \
  "the last bar does not end the epoch with the summary below it"
hasnt "$work/tty" 'epoch 1/2 step ' "plain lines on a terminal"

# 2. Under ddprun on a terminal (local launch): the ranks get DDP_TTY=1 and ddprun redraws rank 0's line after
#    its prefix.
script -qec "env -u DDP_TTY $ddprun --nproc-per-node 2 --standalone --backend gloo $train $args --out-dir $work/b" /dev/null \
  > "$work/ddprun_tty" < /dev/null
has "$work/ddprun_tty" '\r\[rank 0\] epoch [12]/2 \[[=> ]{20}\] \d+/\d+ loss [^\r\n]*\| eta \d+:\d\d, run \d+:\d\d' \
  "ddprun did not redraw rank 0's live line after its prefix"
has "$work/ddprun_tty" '[\r\n](?:\x1b\[K)?\[rank 0\] epoch 2/2 \[====================\] (\d+)/\1 [^\r\n]*\r?\n' \
  "the final bar is not left on its own line"
has "$work/ddprun_tty" '\n\[rank 0\] epoch 2/2 \| train_loss' "no epoch summary line under ddprun"
has "$work/ddprun_tty" '\[rank 0\]   report: ' "no report line"
hasnt "$work/ddprun_tty" 'epoch 1/2 step ' "plain lines under ddprun on a terminal"

# 2b. Under ddprun's mpirun launch on a terminal: mpirun's ranks write to pseudo-terminals but its tagged output
#     cannot carry a redrawn line: DDP_TTY=0 gives the plain lines.
if command -v mpirun > /dev/null; then
  script -qec "env -u DDP_TTY $ddprun --nproc-per-node 2 --standalone --backend mpi $train $args --out-dir $work/m" \
    /dev/null > "$work/mpi_tty" < /dev/null
  has "$work/mpi_tty" '\n\[rank 0\] epoch 1/2 step (\d+)/\1 loss [0-9.e-]+ lr [0-9.e-]+ \| [0-9.]+ samples/s\r?\n' \
    "no plain line under mpirun on a terminal"
  hasnt "$work/mpi_tty" '\[1,0\]<stdout>' "mpirun's tags in the output"
fi

# 3. Not a terminal (a pipe): the plain lines, unchanged, and no '\r' at all.
env -u DDP_TTY "$ddprun" --nproc-per-node 2 --standalone $train $args --out-dir "$work/c" > "$work/plain"
has "$work/plain" '\n\[rank 0\] epoch 1/2 step (\d+)/\1 loss [0-9.e-]+ lr [0-9.e-]+ \| [0-9.]+ samples/s\n' "no plain line"
hasnt "$work/plain" '\r' "a carriage return without a terminal"
echo "progress_tty ok"
