#!/usr/bin/env bash
# ddp-train's --strategy choices side by side on the mlp recipe (a SequentialNet, so FSDP takes it
# too): samples/s of one epoch, alternating rounds, and each rank's optimizer state as the
# checkpoint-free log reports it. Prints a markdown table (best of the rounds, ratio to ddp).
# usage: bench/strategies.sh [BUILD_DIR] [WORLD] [ROUNDS] [extra ddp-train flags...]
set -euo pipefail
build=${1:-build} world=${2:-2} rounds=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
strategies=(ddp zero1 fsdp-grad fsdp-full)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
declare -A rates
for round in $(seq "$rounds"); do
  for s in "${strategies[@]}"; do
    OMP_NUM_THREADS=1 "$build/bin/ddprun" --nproc-per-node "$world" --standalone "$build/bin/ddp-train" mlp \
      --optimizer adamw --lr 0.001 --epochs 1 --no-progress --strategy "$s" --out-dir "$work/$s" "$@" \
      > "$work/log" 2>&1 || { cat "$work/log"; exit 1; }
    rate=$(grep -o '[0-9.]* samples/s' "$work/log" | tail -1 | cut -d' ' -f1)
    acc=$(grep -o 'done: acc1 [0-9.]*%' "$work/log" | tail -1 | cut -d' ' -f3)
    rates[$s]="${rates[$s]:-}${rates[$s]:+, }$rate"
    echo "round $round $s: $rate samples/s, acc1 $acc" >&2
    rm -rf "$work/$s"
  done
done
best() { tr ',' '\n' <<<"$1" | sort -g | tail -1 | tr -d ' '; }
ref=$(best "${rates[ddp]}")
echo "| strategy | samples/s ($rounds rounds) | best | / ddp |"
echo "|---|---|---:|---:|"
for s in "${strategies[@]}"; do
  b=$(best "${rates[$s]}")
  echo "| $s | ${rates[$s]} | $b | $(awk -v a="$b" -v r="$ref" 'BEGIN { printf "%.2fx", a / r }') |"
done
