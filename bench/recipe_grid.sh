#!/usr/bin/env bash
# Does a recipe train in its supported range? One epoch of RECIPE at every world 1-4, with and without
# --sync-bn, fp32 and bf16, on LIMIT training samples (default 6000, a tenth of Fashion-MNIST), for 3 seeds:
# a markdown table of each run's test accuracy, or NAN where ddp-train stopped on non-finite gradients
# (exit 1), and a count of those. Exits 1 if any run stopped or failed. METRIC=train_loss reports the last
# epoch's training loss instead (for recipes whose test accuracy says little, as mlp's synthetic data);
# SYNC_BN=no leaves out the --sync-bn rows (recipes without BatchNorm layers: mlp, cifar10-resnet9); EPOCHS=N
# trains N epochs instead of 1 (recipes whose global batch leaves few steps in one epoch of LIMIT samples);
# SEEDS="0" (default "0 1 2") for a quicker pass; WORLDS="3 4" (default "1 2 3 4") runs only those worlds.
# usage: bench/recipe_grid.sh [BUILD_DIR] [RECIPE] [LIMIT] [extra ddp-train flags...]
#   e.g. bench/recipe_grid.sh build fashion-mnist 6000; PRECISIONS=fp32 for fp32 only
set -uo pipefail
build=${1:-build} recipe=${2:-fashion-mnist} limit=${3:-6000}
shift $(( $# < 3 ? $# : 3 ))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bad=0 runs=0
seeds=${SEEDS:-0 1 2}
echo "| world | sync-bn | precision |$(for s in $seeds; do printf ' seed %s |' "$s"; done) s/run |"
echo "|---:|---|---|$(for s in $seeds; do printf -- '---:|'; done)---:|"
for world in ${WORLDS:-1 2 3 4}; do
  for bn in "" $([ "${SYNC_BN:-yes}" = no ] || echo --sync-bn); do
    [ "$world" = 1 ] && [ -n "$bn" ] && continue  # one rank: SyncBatchNorm is BatchNorm
    for precision in ${PRECISIONS:-fp32 bf16}; do
      row="| $world | $([ -n "$bn" ] && echo yes || echo no) | $precision |"
      start=$(date +%s)
      for seed in $seeds; do
        OMP_NUM_THREADS=1 "$build/bin/ddprun" --nproc-per-node "$world" --standalone "$build/bin/ddp-train" \
          "$recipe" --epochs "${EPOCHS:-1}" --limit-train "$limit" --seed "$seed" --precision "$precision" $bn --no-progress \
          --out-dir "$work/run" "$@" > "$work/log" 2>&1
        rc=$?
        runs=$((runs + 1))
        if [ "${METRIC:-acc1}" = train_loss ]; then
          acc=$(grep -o 'train_loss [0-9.]*' "$work/log" | tail -1 | cut -d' ' -f2)
        else
          acc=$(grep -o 'done: acc1 [0-9.]*%' "$work/log" | tail -1 | cut -d' ' -f3)
        fi
        if grep -q 'gradients are not finite' "$work/log"; then cell=NAN; bad=$((bad + 1))
        elif [ $rc -ne 0 ] || [ -z "$acc" ]; then cell="exit $rc"; bad=$((bad + 1)); tail -5 "$work/log" >&2
        else cell=$acc; fi
        row="$row $cell |"
        rm -rf "$work/run"
      done
      echo "$row $(( ($(date +%s) - start) / $(echo $seeds | wc -w) )) |"
    done
  done
done
echo
echo "$recipe, $limit training samples, ${EPOCHS:-1} epoch(s): $bad of $runs runs stopped or failed"
[ "$bad" -eq 0 ]
