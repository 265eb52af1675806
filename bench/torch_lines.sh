#!/usr/bin/env bash
# The two LibTorch lines side by side on this machine: Debian's 1.13 (build/) against PyPI's 2.x
# (build-torch2/, DDP_TORCH=2 ./scripts/build.sh), the same sources, rounds alternating; the best round counts.
#   start      : a rank's process start to exit (ddprun world 1, examples' hello), ms
#   ddp        : ddp-bench ddp, fp32, batch 64 per rank, 1 thread per rank: ms per step of the course MLP and
#                FashionCNN, the plain loop at world 1 (--no-ddp: ATen's kernels alone) and DDP at world 2
#   demo       : the demo's job (fashion-mnist-fast, world 2), wall s from launch to the first evaluation >= 90%
# Usage: bench/torch_lines.sh [ROUNDS] [PARTS]     e.g. bench/torch_lines.sh 3 "start ddp demo"
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
PARTS=${2:-"start ddp demo"}
OUT=build/bench/torch_lines
rm -rf "$OUT" && mkdir -p "$OUT"
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
declare -A BIN=([1.13]=build/bin [2]=build-torch2/bin)
for line in 1.13 2; do
  for t in ddprun ddp-bench ddp-train hello; do
    [ -x "${BIN[$line]}/$t" ] || { echo "torch_lines: ${BIN[$line]}/$t missing: build both lines first" >&2; exit 1; }
  done
done
grep -m1 "model name" /proc/cpuinfo
for line in 1.13 2; do echo "line $line: $(grep -m1 '^Torch_DIR:' "${BIN[$line]}/../CMakeCache.txt")"; done

start_ms() {  # start_ms BIN: one world-1 launch of hello, wall ms
  local b=$1 t0 t1
  t0=$(date +%s%N)
  "$b/ddprun" --nproc-per-node 1 --standalone "$b/hello" >/dev/null 2>&1
  t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 ))
}

for r in $(seq "$ROUNDS"); do
  for line in 1.13 2; do
    b=${BIN[$line]}
    tag="$OUT/$line-$r"
    if [[ " $PARTS " == *" start "* ]]; then
      for i in 1 2 3; do start_ms "$b" >> "$tag-start.txt"; done
    fi
    if [[ " $PARTS " == *" ddp "* ]]; then
      for m in mlp cnn; do
        steps=100; [ $m = mlp ] && steps=1000
        "$b/ddprun" --nproc-per-node 1 --standalone "$b/ddp-bench" ddp --model $m --steps $steps --warmup 10 --no-ddp \
          --json "$tag-plain-$m.json" > "$tag-plain-$m.log" 2>&1
        "$b/ddprun" --nproc-per-node 2 --standalone "$b/ddp-bench" ddp --model $m --steps $steps --warmup 10 \
          --json "$tag-ddp-$m.json" > "$tag-ddp-$m.log" 2>&1
      done
    fi
    if [[ " $PARTS " == *" demo "* ]]; then
      t0=$(date +%s.%N)
      "$b/ddprun" --nproc-per-node 2 --standalone "$b/ddp-train" fashion-mnist-fast --seed 0 --no-progress \
        --out-dir "$tag-demo" > "$tag-demo.log" 2>&1
      t1=$(date +%s.%N)
      printf '%s %s\n' "$t0" "$t1" > "$tag-demo.time"
    fi
  done
done

$PY - "$OUT" "$ROUNDS" <<'PY'
import glob, json, os, sys
out, rounds = sys.argv[1], int(sys.argv[2])
lines = ("1.13", "2")
def best(vals, low=True):
    vals = [v for v in vals if v is not None]
    return (min(vals) if low else max(vals)) if vals else None
rows = []
def row(what, unit, vals, low):
    a, b = vals["1.13"], vals["2"]
    if a is None or b is None:
        return
    ratio = (a / b) if low else (b / a)  # > 1: 2.x faster
    rows.append(f"| {what} | {a:,.1f} | {b:,.1f} | {unit} | **{ratio:.2f}x** |")
starts = {l: best([int(x) for f in glob.glob(f"{out}/{l}-*-start.txt") for x in open(f)]) for l in lines}
row("process start, world 1 (hello)", "ms", starts, True)
for kind, what in (("plain", "plain loop, world 1"), ("ddp", "DDP step, world 2")):
    for m in ("mlp", "cnn"):
        vals = {l: best([json.load(open(f))["ms_per_step"] for f in glob.glob(f"{out}/{l}-*-{kind}-{m}.json")])
                for l in lines}
        row(f"{what}, {m}", "ms", vals, True)
demo = {}
for l in lines:
    hits = []
    for f in glob.glob(f"{out}/{l}-*-demo.time"):
        t0, _ = map(float, open(f).read().split())
        recs = [json.loads(x) for x in open(f.replace(".time", "") + "/metrics.jsonl")]
        hit = next((r for r in recs if r.get("kind") in ("eval", "epoch") and r["acc1/val"] >= 0.90), None)
        hits.append(hit["unix_time"] - t0 if hit else None)
    demo[l] = best(hits)
row("demo: fashion-mnist-fast to 90%, world 2", "s", demo, True)
print("| measure | LibTorch 1.13 (Debian) | LibTorch 2.x (PyPI) | unit | 2.x faster by |")
print("|---|---|---|---|---|")
print("\n".join(rows))
PY
