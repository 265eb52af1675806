#!/usr/bin/env bash
# Soak: ddp-train under `ddprun --max-restarts` while a killer SIGKILLs a random rank every MIN..MAX seconds.
# The run must finish with final weights equal to an uninterrupted run's, bit for bit, and every checkpoint it
# left must be intact. Prints a report: kills survived, time lost per kill, work (steps) lost per kill.
# RECOVERY=inplace: `ddprun --recovery inplace --max-restarts KILLS` instead: every kill is survived in place and
# replaced by a rank that joins; the run must end with identical replicas, the uninterrupted run's step count,
# every replacement joined, and no rank, port or temporary file left behind.
#
#   scripts/soak.sh [BIN_DIR] [-- extra ddp-train flags]
#   env: KILLS=5 MIN=20 MAX=40 NP=2 RECIPE=fashion-mnist EPOCHS=6 EVERY=50 (checkpoint interval, steps)
#        OUT=/tmp/soak (kept afterwards) RECOVERY=restart|inplace
set -euo pipefail
bin=$(cd "${1:-build/bin}" && pwd)
shift || true
[ "${1:-}" = -- ] && shift
KILLS=${KILLS:-5} MIN=${MIN:-20} MAX=${MAX:-40} NP=${NP:-2} RECIPE=${RECIPE:-fashion-mnist}
EPOCHS=${EPOCHS:-6} EVERY=${EVERY:-50} OUT=${OUT:-/tmp/soak} RECOVERY=${RECOVERY:-restart}
rm -rf "$OUT" && mkdir -p "$OUT"
args=("$RECIPE" --epochs "$EPOCHS" --checkpoint-every "$EVERY" --keep-last 100 --log-every 5 --no-progress "$@")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

t0=$(date +%s.%N)
"$bin/ddprun" --nproc-per-node "$NP" --standalone "$bin/ddp-train" "${args[@]}" --out-dir "$OUT/whole" > "$OUT/whole.log" 2>&1
t_whole=$(awk "BEGIN{print $(date +%s.%N) - $t0}")
echo "uninterrupted run: $t_whole s"

t0=$(date +%s.%N)
if [ "$RECOVERY" = inplace ]; then
  tmp_before=$(ls /tmp | wc -l)
  "$bin/ddprun" --nproc-per-node "$NP" --standalone --recovery inplace --max-restarts "$KILLS" "$bin/ddp-train" \
    "${args[@]}" --data sampler --out-dir "$OUT/soak" > "$OUT/soak.log" 2>&1 &
else
  "$bin/ddprun" --nproc-per-node "$NP" --standalone --max-restarts $((KILLS * 2)) "$bin/ddp-train" "${args[@]}" \
    --out-dir "$OUT/soak" > "$OUT/soak.log" 2>&1 &
fi
launcher=$!
# The ranks: ddp-train processes below ddprun, at any depth (under --backend mpi they are mpirun's children).
ranks() {
  local queue=("$launcher") p c
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    for c in $(pgrep -P "$p" || true); do
      if [ "$(cat /proc/$c/comm 2>/dev/null)" = ddp-train ]; then echo "$c"; else queue+=("$c"); fi
    done
  done
}
last_step() { { sed -n 's/.*"step":\([0-9]*\).*/\1/p' "$OUT/soak/metrics.jsonl" 2>/dev/null || true; } | tail -n1; }  # none yet: ""
kills=0
: > "$OUT/kills.txt"
while [ $kills -lt "$KILLS" ] && kill -0 $launcher 2>/dev/null; do
  sleep $((MIN + RANDOM % (MAX - MIN + 1)))
  mapfile -t pids < <(ranks)
  [ ${#pids[@]} -gt 0 ] || continue
  victim=${pids[$((RANDOM % ${#pids[@]}))]}
  rank=$(tr '\0' '\n' < /proc/$victim/environ 2>/dev/null | sed -n 's/^\(RANK\|OMPI_COMM_WORLD_RANK\)=//p' | head -n1)
  step=$(last_step)
  kill -9 "$victim" 2>/dev/null || continue
  kills=$((kills + 1))
  echo "$(date +%s.%N) rank=$rank pid=$victim last_logged_step=${step:-0}" >> "$OUT/kills.txt"
  echo "kill $kills: rank $rank (pid $victim) near step ${step:-0}"
done
rc=0
wait $launcher || rc=$?
t_soak=$(awk "BEGIN{print $(date +%s.%N) - $t0}")
echo "soak run: $t_soak s, ddprun exit $rc"
[ $rc = 0 ] || { tail -n 40 "$OUT/soak.log"; echo "FAIL: the soak run did not finish"; exit 1; }
[ "$kills" -eq "$KILLS" ] || echo "warning: $kills of $KILLS kills before the run ended (raise EPOCHS)"

if [ "$RECOVERY" = inplace ]; then
  left=$( (pgrep -f "$bin/ddp-train" || true) | wc -l)
  lost=$(grep -c "was lost (SIGKILL)" "$OUT/soak.log" || true)
  joined=$(grep -c "joined the running job as rank" "$OUT/soak.log" || true)
  recoveries=$(grep -o "going on from step [0-9]* ([^)]*) in [0-9.e-]* s" "$OUT/soak.log" | sed 's/.* in \([0-9.e-]*\) s/\1/' | tr '\n' ' ')
  tmp_after=$(ls /tmp | wc -l)
  /usr/bin/python3 - "$OUT" "$kills" "$t_whole" "$t_soak" "$lost" "$joined" "$left" "$recoveries" "$tmp_before" \
    "$tmp_after" <<'PY'
import os, re, sys, torch
out, kills, t_whole, t_soak, lost, joined, left = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), \
    float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
recoveries, tmp_before, tmp_after = sys.argv[8].split(), int(sys.argv[9]), int(sys.argv[10])
def final(d):
    d = os.path.join(out, d, "checkpoints")
    return torch.load(os.path.join(d, open(os.path.join(d, "latest")).read().strip()))
a, b = final("whole"), final("soak")
log = open(os.path.join(out, "soak.log")).read()
same = re.search(r"replicas identical after in-place recovery: (\d+) rank", log)
print("| kills | survived in place | replacements joined | replicas identical | steps (whole run's) | world changes, s each | time lost per kill | ranks left |")
print("|---|---|---|---|---|---|---|---|")
print("| %d | %d | %d | %s | %d (%d) | %s | %.1f s | %d |" % (kills, lost, joined, "yes, %s ranks" % same.group(1) if same else "NO",
      b["step"], a["step"], ", ".join(recoveries), (t_soak - t_whole) / max(kills, 1), left))
assert same and a["step"] == b["step"] and lost == kills and left == 0 and kills > 0, "FAIL"
assert tmp_after <= tmp_before, "FAIL: %d new entries in /tmp" % (tmp_after - tmp_before)
print("soak (in place): passed")
PY
  exit $?
fi

/usr/bin/python3 - "$OUT" "$kills" "$t_whole" "$t_soak" "$EVERY" <<'PY'
import glob, os, re, sys, zipfile, torch
out, kills, t_whole, t_soak, every = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
def final(d):
    d = os.path.join(out, d, "checkpoints")
    return torch.load(os.path.join(d, open(os.path.join(d, "latest")).read().strip()))
a, b = final("whole"), final("soak")
assert a["step"] == b["step"], (a["step"], b["step"])
differ = [k for k in a["model"] if not torch.equal(a["model"][k], b["model"][k])]
files = sorted(glob.glob(os.path.join(out, "soak", "checkpoints", "checkpoint-*.pt")))
bad = [f for f in files if zipfile.ZipFile(f).testzip() is not None]
for f in files:
    torch.load(f)
log = open(os.path.join(out, "soak.log")).read()
resumed = [int(s) for s in re.findall(r"resumed from \S+ at epoch \d+, step (\d+)", log)]
killed_near = [int(re.search(r"last_logged_step=(\d+)", l).group(1)) for l in open(os.path.join(out, "kills.txt"))]
print("| kills | restarts (resumes) | final weights equal | checkpoints intact | time lost per kill | steps redone per resume (interval %d; logged every 5) |" % every)
print("|---|---|---|---|---|---|")
lost = [max(0, k - r) for k, r in zip(killed_near, resumed)]
print("| %d | %d | %s | %d of %d | %.1f s | %s |" % (kills, len(resumed), "yes" if not differ else "NO: " + ", ".join(differ),
      len(files) - len(bad), len(files), (t_soak - t_whole) / max(kills, 1), ", ".join(map(str, lost)) or "-"))
assert not differ and not bad and len(resumed) >= kills, "FAIL"
assert kills > 0, "FAIL: no rank was killed (the run ended before the first kill, or no rank was found)"
print("soak: passed")
PY
