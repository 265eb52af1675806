#!/usr/bin/env bash
# DDP's step with and without gradient compression over a link slower than memory: two hosts as network
# namespaces (scripts/netns.sh) joined through a bridge, each host's egress shaped by a token bucket
# (tc tbf) to RATE, one rank per host (world 2, gloo, 1 thread per rank), ddp-bench ddp on the wide MLP.
# Hooks alternate within each round; the best round of each is kept. Needs root.
#   bench/hooks_link.sh [RATES] [STEPS] [ROUNDS] [HOOKS] [MODEL]      RATES: Nmbit, Ngbit or unshaped (the veth as is)
#   e.g. bench/hooks_link.sh "1gbit 10gbit" 20 2 "allreduce powersgd:rank=4,start=2"
set -euo pipefail
cd "$(dirname "$0")/.."
RATES=${1:-"1gbit 10gbit"}
STEPS=${2:-20}
ROUNDS=${3:-2}
HOOKS=${4:-"allreduce fp16 powersgd:rank=4,start=2 batched_powersgd:rank=1,start=2"}
MODEL=${5:-wide}
bin=$(pwd)/build/bin
export DDP_NETNS_PREFIX=hl$$ OMP_NUM_THREADS=1
OUT=build/bench/hooks_link
rm -rf "$OUT" && mkdir -p "$OUT"
trap 'scripts/netns.sh down "$DDP_NETNS_PREFIX"' EXIT
scripts/netns.sh up 2 "$DDP_NETNS_PREFIX"
master=$(scripts/netns.sh addr 0)
port=29731
for rate in $RATES; do
  for i in 0 1; do  # the bucket holds 10 ms at the rate (at least 64 KB): bursts stay short
    if [ "$rate" = unshaped ]; then
      ip netns exec "$DDP_NETNS_PREFIX-h$i" tc qdisc del dev eth0 root 2>/dev/null || true
      continue
    fi
    num=${rate%%[a-z]*}
    case ${rate#"$num"} in gbit) bits=$((num * 1000000000)) ;; mbit) bits=$((num * 1000000)) ;;
      *) echo "rate $rate: use Nmbit or Ngbit"; exit 2 ;; esac
    burst=$(( bits / 8 / 100 > 65536 ? bits / 8 / 100 : 65536 ))
    ip netns exec "$DDP_NETNS_PREFIX-h$i" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 100ms
  done
  for round in $(seq "$ROUNDS"); do
    for hook in $HOOKS; do
      name=$(echo "$rate-$hook-$round" | tr ':,=' '___')
      port=$((port + 1))
      pids=()
      for i in 0 1; do
        scripts/netns.sh exec "$i" "$bin/ddprun" --nnodes 2 --node-rank "$i" --nproc-per-node 1 --backend gloo \
          --master-addr "$master" --master-port "$port" "$bin/ddp-bench" ddp --model "$MODEL" --backend gloo \
          --steps "$STEPS" --warmup 5 --comm-hook "$hook" --json "$OUT/$name.h$i.json" >"$OUT/$name.h$i.log" 2>&1 &
        pids+=($!)
      done
      for p in "${pids[@]}"; do wait "$p" || { tail -20 "$OUT/$name".h*.log; exit 1; }; done
    done
  done
done
${DDP_PYTHON:-/usr/bin/python3} - "$OUT" "$RATES" "$HOOKS" <<'PY'
import glob, json, os, sys
out, rates, hooks = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
best = {}
for f in glob.glob(f"{out}/*.h0.json"):
    r = json.load(open(f))
    rate = os.path.basename(f).split("-")[0]
    key = (rate, r["comm_hook"])
    if key not in best or r["ms_per_step"] < best[key]["ms_per_step"]:
        best[key] = r
print("# cpu:", next(iter(best.values()))["cpu"])
print("| link (each direction) | hook | bytes/step (rank) | ms/step | comm ms/step | exposed ms/step | speed vs allreduce |")
print("|---|---|---:|---:|---:|---:|---:|")
for rate in rates:
    base = best[(rate, "allreduce")]
    for h in hooks:
        r = best[(rate, h)]
        print(f"| {rate} | {h} | {r['bytes_per_step']:.0f} | {r['ms_per_step']:.1f} | {r.get('comm_ms_per_step', float('nan')):.1f} | "
              f"{r.get('exposed_ms_per_step', float('nan')):.1f} | {base['ms_per_step']/r['ms_per_step']:.2f}x |")
PY
