#!/usr/bin/env bash
# The two LibTorch lines side by side on this machine: Debian's 1.13 (build/) against PyPI's 2.x
# (build-torch2/, DDP_TORCH=2 ./scripts/build.sh; another 2.x build with TORCH2_BUILD=build-torch211), the same
# sources, rounds alternating; the best round counts.
#   start      : a rank's process start to exit (ddprun world 1, examples' hello), ms
#   ddp        : ddp-bench ddp, fp32, batch 64 per rank, 1 thread per rank: ms per step of the course MLP and
#                FashionCNN, the plain loop at world 1 (--no-ddp: ATen's kernels alone) and DDP at world 2
#   demo       : the demo's job (fashion-mnist-fast, world 2), wall s from launch to the first evaluation >= 90%
#   compute    : ddp-bench compute, 1 thread, fp32: samples/s per model in NCHW and channels-last (COMPUTE_MODELS,
#                COMPUTE_PRECISIONS=fp32,bf16 to add bf16: emulated on AVX2, minutes per model)
#   malloc     : the plain FashionCNN loop with glibc's malloc defaults (DDP_MALLOC=system) against ddp's setting
#   save       : ddp-bench save, ResNet-18's state dict: ddp's torch.save writer against LibTorch's pickle_save
#   cifar      : cifar10-airbench, world 2, 1 epoch on CIFAR_LIMIT samples: training samples/s, per precision in
#                CIFAR_PRECISIONS (default fp32; "fp32 bf16" adds bfloat16: native on AVX512-BF16 and AMX)
# Usage: bench/torch_lines.sh [ROUNDS] [PARTS]     e.g. bench/torch_lines.sh 3 "start ddp demo"
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
PARTS=${2:-"start ddp demo"}
OUT=build/bench/torch_lines
rm -rf "$OUT" && mkdir -p "$OUT"
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
TORCH2_BUILD=${TORCH2_BUILD:-build-torch2}
COMPUTE_MODELS=${COMPUTE_MODELS:-mlp,cnn,fashionnet,airbench,resnet18}
COMPUTE_PRECISIONS=${COMPUTE_PRECISIONS:-fp32}
CIFAR_LIMIT=${CIFAR_LIMIT:-10240}
CIFAR_PRECISIONS=${CIFAR_PRECISIONS:-fp32}
declare -A BIN=([1.13]=build/bin [2]=$TORCH2_BUILD/bin)
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
    if [[ " $PARTS " == *" compute "* ]]; then
      "$b/ddp-bench" compute --models "$COMPUTE_MODELS" --precisions "$COMPUTE_PRECISIONS" --steps 4 --gemm-n 1024 \
        --json "$tag-compute.json" > "$tag-compute.log" 2>&1
    fi
    if [[ " $PARTS " == *" malloc "* ]]; then
      for m in kept system; do
        env $([ $m = system ] && echo DDP_MALLOC=system) "$b/ddprun" --nproc-per-node 1 --standalone "$b/ddp-bench" ddp \
          --model cnn --steps 100 --warmup 10 --no-ddp --json "$tag-malloc-$m.json" > "$tag-malloc-$m.log" 2>&1
      done
    fi
    if [[ " $PARTS " == *" save "* ]]; then
      "$b/ddp-bench" save --model resnet18 --repeats 5 --out-dir "$tag-save" --json "$tag-save.json" > "$tag-save.log" 2>&1
    fi
    if [[ " $PARTS " == *" cifar "* ]]; then
      for p in $CIFAR_PRECISIONS; do
        "$b/ddprun" --nproc-per-node 2 --standalone "$b/ddp-train" cifar10-airbench --epochs 1 --precision "$p" \
          --limit-train "$CIFAR_LIMIT" --limit-test 1000 --seed 0 --no-progress --data-dir ../shared/data/cifar10 \
          --out-dir "$tag-cifar-$p" > "$tag-cifar-$p.log" 2>&1
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
def runs(l, name):
    return [json.load(open(f)) for f in glob.glob(f"{out}/{l}-*-{name}.json")]
keys = sorted({(r["model"], r["layout"], r["precision"]) for l in lines for d in runs(l, "compute") for r in d["runs"]})
for model, layout, prec in keys:
    vals = {l: best([r["samples_per_s"] for d in runs(l, "compute") for r in d["runs"]
                     if (r["model"], r["layout"], r["precision"]) == (model, layout, prec)], low=False) for l in lines}
    row(f"ddp-bench compute, {model} {layout} {prec}, 1 thread", "samples/s", vals, False)
for m in ("kept", "system"):
    vals = {l: best([d["ms_per_step"] for d in runs(l, f"malloc-{m}")]) for l in lines}
    row(f"plain loop, cnn, malloc {'ddp (kept)' if m == 'kept' else 'glibc defaults'}", "ms", vals, True)
for key, what in (("ddp_save_bytes_ms", "save ResNet-18 state dict: ddp's writer, to memory"),
                  ("pickle_save_ms", "save ResNet-18 state dict: LibTorch pickle_save, to memory"),
                  ("ddp_save_file_ms", "save ResNet-18 state dict: ddp save_state_dict, file + fsync"),
                  ("ddp_read_ms", "load it: ddp read_torch_file"), ("pickle_load_ms", "load it: LibTorch pickle_load")):
    vals = {l: best([d[key] for d in runs(l, "save")]) for l in lines}
    row(what, "ms", vals, True)
for prec in ("fp32", "bf16"):
    cifar = {}
    for l in lines:
        rates = []
        for d in glob.glob(f"{out}/{l}-*-cifar-{prec}"):
            recs = [json.loads(x) for x in open(d + "/metrics.jsonl")]
            rates += [r["throughput"] for r in recs if r.get("kind") == "epoch"]
        cifar[l] = best(rates, low=False)
    row(f"cifar10-airbench, world 2, {prec}, 1 epoch: training", "samples/s", cifar, False)
print(f"| measure | LibTorch 1.13 (Debian) | LibTorch 2.x (PyPI, {os.environ.get('TORCH2_BUILD', 'build-torch2')}) | unit | 2.x faster by |")
print("|---|---|---|---|---|")
print("\n".join(rows))
PY
