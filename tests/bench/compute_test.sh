#!/usr/bin/env bash
# ddp-bench compute: the FLOPs it counts per training sample equal the closed forms (3x the forward's
# multiply-adds x 2), and every model/layout/precision row has a positive rate; --layouts and --device choose the
# rows and where they run (bench/compute_peer.py's counterpart; the device check runs it on a GPU).
# usage: compute_test.sh DDP_BENCH
set -euo pipefail
bench=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
OMP_NUM_THREADS=1 "$bench" compute --models mlp,airbench,cnn --batch 4 --steps 1 --gemm-n 64 --json "$work/c.json"
${DDP_PYTHON:-/usr/bin/python3} - "$work/c.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
per = {r["model"]: r["gflop_per_sample"] * 1e9 for r in d["runs"]}
# mlp: bias-free 1024-256-256-256-32.
mlp = 3 * 2 * (1024 * 256 + 256 * 256 + 256 * 256 + 256 * 32)
# airbench: whitening 2x2 (3 -> 24) at 31x31; groups' 3x3 convs at 31, 15 (24->64, 64->64), 15, 7 (64->256,
# 256->256), 7, 3 (256->256 twice); head 256 -> 10.
conv = lambda cin, cout, k, side: 2 * cout * side * side * cin * k * k
air = 3 * (conv(3, 24, 2, 31) + conv(24, 64, 3, 31) + conv(64, 64, 3, 15) + conv(64, 256, 3, 15) +
           conv(256, 256, 3, 7) + conv(256, 256, 3, 7) + conv(256, 256, 3, 3) + 2 * 256 * 10)
assert abs(per["mlp"] - mlp) < 1, (per["mlp"], mlp)
assert abs(per["airbench"] - air) < 1, (per["airbench"], air)
rows = {(r["model"], r["layout"], r["precision"]) for r in d["runs"]}
assert len(rows) == 2 + 4 + 4, rows  # mlp: fp32, bf16; images: nchw and nhwc each
assert all(r["samples_per_s"] > 0 and r["gflops"] > 0 for r in d["runs"])
assert d["gemm_fp32_gflops"] > 0 and d["gemm_bf16_gflops"] > 0
print("compute ok:", {k: round(v / 1e9, 4) for k, v in per.items()}, "GFLOP per sample")
PY
# One layout, one precision, the device named: only those rows, on it.
OMP_NUM_THREADS=1 "$bench" compute --models airbench,mlp --batch 4 --steps 1 --gemm-n 64 --precisions fp32 \
  --layouts nhwc --device cpu --json "$work/d.json"
${DDP_PYTHON:-/usr/bin/python3} - "$work/d.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = [(r["model"], r["layout"], r["precision"]) for r in d["runs"]]
assert rows == [("airbench", "nhwc", "fp32"), ("mlp", "-", "fp32")], rows
assert d["device"] == "cpu", d["device"]
PY
# The peer (bench/compute_peer.py, PyTorch eager) builds the same networks: the same parameter counts, frozen ones
# apart, and the same rows.
OMP_NUM_THREADS=1 ${DDP_PYTHON:-/usr/bin/python3} "$(dirname "$0")/../../bench/compute_peer.py" --models airbench,mlp \
  --batch 4 --steps 1 --precisions fp32 --layouts nhwc --device cpu --json "$work/p.json" > "$work/p.log"
${DDP_PYTHON:-/usr/bin/python3} - "$work/d.json" "$work/p.json" <<'PY'
import json, sys
ours, peer = (json.load(open(f))["runs"] for f in sys.argv[1:])
key = lambda r: (r["model"], r["layout"], r["precision"], r["params"], r["trainable"])
assert [key(r) for r in ours] == [key(r) for r in peer], ([key(r) for r in ours], [key(r) for r in peer])
assert all(r["samples_per_s"] > 0 for r in peer)
PY
# The side-by-side lines (the device check's): one per row of ours, with PyTorch's rate beside it; on a GPU ours
# names cuda:0 and a peer given --device cuda may say cuda: the same runs. Another device or batch is refused.
compare=$(dirname "$0")/../../bench/compare_compute.py
${DDP_PYTHON:-/usr/bin/python3} - "$work/d.json" "$work/p.json" "$work" <<'PY'
import json, sys
ours, peer = (json.load(open(f)) for f in sys.argv[1:3])
for name, o, p in [("gpu", "cuda:0", "cuda"), ("other", "cuda:0", "cuda:1"), ("batch", "cpu", "cpu")]:
    ours["device"], peer["device"] = o, p
    peer["batch"] = ours["batch"] + (name == "batch")
    json.dump(ours, open(f"{sys.argv[3]}/o-{name}.json", "w"))
    json.dump(peer, open(f"{sys.argv[3]}/p-{name}.json", "w"))
PY
for pair in "d.json p.json" "o-gpu.json p-gpu.json"; do
  set -- $pair
  ${DDP_PYTHON:-/usr/bin/python3} "$compare" "$work/$1" "$work/$2" > "$work/cmp.log"
  [ "$(grep -c 'pytorch eager .*/s, step ours/pytorch' "$work/cmp.log")" = 2 ] ||
    { echo "compare_compute.py on $pair: not one line per row with PyTorch's beside it:" >&2; cat "$work/cmp.log" >&2; exit 1; }
done
for bad in other batch; do
  if ${DDP_PYTHON:-/usr/bin/python3} "$compare" "$work/o-$bad.json" "$work/p-$bad.json" > "$work/cmp.log" 2>&1; then
    echo "compare_compute.py compared runs with another $bad" >&2; exit 1
  fi
  grep -q 'not the same runs' "$work/cmp.log" || { cat "$work/cmp.log" >&2; exit 1; }
done
# The peer's CUDA-graph rows (GPU only) come after every eager row; a capture that fails is a row with its error,
# the JSON holds every row measured so far, and the side-by-side line says the graph failed.
${DDP_PYTHON:-/usr/bin/python3} - "$(dirname "$0")/../../bench" "$work/d.json" "$work/g.json" "$compare" <<'PY'
import json, subprocess, sys
sys.path.insert(0, sys.argv[1])
import compute_peer
rows = [(m, None, 1, 1, None, None, lay, "fp32") for m, lay in [("airbench", "nhwc"), ("mlp", "-")]]
order = []
def measure(r, graph):
    order.append((r[0], graph))
    if graph and r[0] == "mlp":
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore")
    return 100.0 + graph
doc = dict(torch="x", device="cpu", batch=4, runs=[])
compute_peer.measure_rows(rows, [False, True], measure, doc, sys.argv[3])
assert order == [("airbench", False), ("mlp", False), ("airbench", True), ("mlp", True)], order
runs = json.load(open(sys.argv[3]))["runs"]
assert [(r["model"], r["cuda_graph"], r["samples_per_s"]) for r in runs] == [
    ("airbench", False, 100.0), ("mlp", False, 100.0), ("airbench", True, 101.0), ("mlp", True, None)], runs
assert runs[3]["error"] == "RuntimeError: CUDA error: operation not permitted when stream is capturing", runs[3]
# An eager row's failure is the run's: raised, with the rows before it written.
def eager_fails(r, graph):
    if r[0] == "mlp":
        raise ValueError("eager")
    return 1.0
try:
    compute_peer.measure_rows(rows, [False, True], eager_fails, dict(doc, runs=[]), sys.argv[3])
    sys.exit("an eager row's failure was swallowed")
except ValueError:
    assert [r["model"] for r in json.load(open(sys.argv[3]))["runs"]] == ["airbench"]
# compare_compute.py beside ours (airbench nhwc fp32, mlp fp32): mlp's line says the graph failed.
peer = dict(torch="x", device="cpu", batch=json.load(open(sys.argv[2]))["batch"], runs=runs)
json.dump(peer, open(sys.argv[3], "w"))
out = subprocess.run([sys.executable, sys.argv[4], sys.argv[2], sys.argv[3]], capture_output=True, text=True, check=True).stdout
lines = out.splitlines()
assert "pytorch CUDA graph 101/s (1.01x its eager)" in lines[0], out
assert "pytorch CUDA graph failed (RuntimeError: CUDA error: operation not permitted" in lines[1], out
PY
# A device that is not one is refused before anything runs, naming the flag.
if "$bench" compute --device tpu > "$work/e.log" 2>&1; then echo "--device tpu was accepted" >&2; exit 1; fi
grep -q -- "--device" "$work/e.log" || { echo "the refusal does not name --device:" >&2; cat "$work/e.log" >&2; exit 1; }
echo "compute rows by --layouts/--device ok"
