#!/usr/bin/env bash
# DDP step time and bytes per step with each communication hook (allreduce, fp16,
# bf16, PowerSGD) at world 2, gloo and mpi, 1 thread per rank. Hooks alternate
# within each round; the best round of each configuration is kept.
# Usage: bench/hooks.sh [models] [steps] [rounds] [hooks]
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${1:-"wide cnn"}
STEPS=${2:-60}
ROUNDS=${3:-2}
HOOKS=${4:-"allreduce fp16 bf16 powersgd:rank=4,start=2 powersgd:rank=2,start=2 batched_powersgd:rank=1,start=2"}
OUT=build/bench/hooks
mkdir -p "$OUT"
rm -f "$OUT"/*.json
export OMP_NUM_THREADS=1
for model in $MODELS; do
  for round in $(seq "$ROUNDS"); do
    for backend in gloo mpi; do
      for hook in $HOOKS; do
        name=$(echo "$hook" | tr ':,=' '___')
        build/bin/ddprun --nproc-per-node 2 --standalone --backend $backend build/bin/ddp-bench ddp --model $model \
          --backend $backend --steps $STEPS --warmup 10 --comm-hook "$hook" --json "$OUT/$model-$backend-$name-$round.json" >/dev/null
      done
    done
  done
done
${DDP_PYTHON:-/usr/bin/python3} - "$OUT" "$HOOKS" $MODELS <<'PY'
import glob, json, sys
out, hooks, models = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
best = {}
for f in glob.glob(f"{out}/*.json"):
    r = json.load(open(f))
    key = (r["model"], r["backend"], r["comm_hook"])
    if key not in best or r["ms_per_step"] < best[key]["ms_per_step"]:
        best[key] = r
print("# cpu:", next(iter(best.values()))["cpu"])
print("| model | backend | hook | bytes/step (rank) | bytes vs allreduce | ms/step | speed vs allreduce |")
print("|---|---|---|---:|---:|---:|---:|")
for m in models:
    for b in ("gloo", "mpi"):
        base = best[(m, b, "allreduce")]
        for h in hooks:
            r = best[(m, b, h)]
            print(f"| {m} ({r['params']/1e6:.2f}M) | {b} | {h} | {r['bytes_per_step']:.0f} | "
                  f"{r['bytes_per_step']/base['bytes_per_step']:.4f} | {r['ms_per_step']:.2f} | "
                  f"{base['ms_per_step']/r['ms_per_step']:.2f}x |")
PY
