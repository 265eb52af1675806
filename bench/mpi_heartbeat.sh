#!/usr/bin/env bash
# What the mpi heartbeat costs: MPI_THREAD_MULTIPLE and a heartbeat thread (the default) against
# MPI_THREAD_SERIALIZED and none (DDP_HEARTBEAT_TIMEOUT=0), in separate jobs, rounds alternating, best of each:
#   collectives: ddp-bench collectives --raw-mpi (ddp's call and the plain MPI call, in the same process)
#   ddp:         ddp-bench ddp, the course MLP, world 2 (ms per step)
# Usage: bench/mpi_heartbeat.sh [ROUNDS] [BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BIN=${2:-build/bin}
OUT=build/bench/mpi_heartbeat
rm -rf "$OUT" && mkdir -p "$OUT"
export OMP_NUM_THREADS=1
grep -m1 "model name" /proc/cpuinfo
RUN="$BIN/ddprun --nproc-per-node 2 --standalone --backend mpi"
for r in $(seq "$ROUNDS"); do
  for mode in off on; do
    hb=30; [ $mode = off ] && hb=0
    DDP_HEARTBEAT_TIMEOUT=$hb $RUN "$BIN/ddp-bench" collectives --backend mpi --raw-mpi --ops all_reduce,broadcast \
      --max-bytes 4M --rounds 1 --json "$OUT/coll-$mode-$r.json" > "$OUT/coll-$mode-$r.log" 2>&1
    DDP_HEARTBEAT_TIMEOUT=$hb $RUN "$BIN/ddp-bench" ddp --model mlp --steps 300 --warmup 30 \
      --json "$OUT/ddp-$mode-$r.json" > "$OUT/ddp-$mode-$r.log" 2>&1
  done
done
${DDP_PYTHON:-/usr/bin/python3} - "$OUT" "$ROUNDS" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(kind, mode):
    return [json.load(open(f"{out}/{kind}-{mode}-{r}.json")) for r in range(1, rounds + 1)]
best = {}
for mode in ("off", "on"):
    for run in load("coll", mode):
        for x in run["results"]:
            k = (x["op"], x["bytes"])
            for field in ("time_us", "raw_mpi_time_us"):
                b = best.setdefault((mode, field), {})
                b[k] = min(b.get(k, float("inf")), x[field])
print("| op | bytes | ddp, SERIALIZED (us) | ddp, MULTIPLE + heartbeat (us) | ratio | plain MPI, SERIALIZED (us) | plain MPI, MULTIPLE (us) | ratio |")
print("|---|---|---|---|---|---|---|---|")
for k in sorted(best[("off", "time_us")]):
    a, b = best[("off", "time_us")][k], best[("on", "time_us")][k]
    c, d = best[("off", "raw_mpi_time_us")][k], best[("on", "raw_mpi_time_us")][k]
    print(f"| {k[0]} | {k[1]} | {a:.1f} | {b:.1f} | {b / a:.2f} | {c:.1f} | {d:.1f} | {d / c:.2f} |")
steps = {m: min(x["ms_per_step"] for x in load("ddp", m)) for m in ("off", "on")}
print(f"\nDDP step, course MLP, world 2: SERIALIZED {steps['off']:.2f} ms, MULTIPLE + heartbeat {steps['on']:.2f} ms, "
      f"ratio {steps['on'] / steps['off']:.2f}")
PY
