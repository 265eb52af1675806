#!/usr/bin/env bash
# The run report in a real browser: two short real runs (world 2 and world 1) write report.html; headless
# Chromium renders it, the page's own check (points per chart, script errors) is compared with metrics.jsonl,
# `ddp-train report` rebuilds the same page and puts both runs side by side, and screenshots are kept.
# The check must reject a page without Chart.js and a page whose data lost an epoch. A failed run's page
# shows the error.
# usage: report_browser_test.sh DDPRUN DDP_TRAIN ARTIFACT_DIR
set -euo pipefail
ddprun=$1 train=$2 artifacts=$3
recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
check="${DDP_PYTHON:-/usr/bin/python3} $here/report_check.py"
command -v chromium > /dev/null || { echo "FAIL: no chromium (Debian's chromium: scripts/install-deps.sh)"; exit 1; }
mkdir -p "$artifacts"
# chromium PAGE ARGS...: headless, its own profile; virtual time lets the page's scripts finish.
browse() {
  local page=$1
  shift
  timeout 300 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$work/chrome" \
    --virtual-time-budget=10000 "$@" "file://$page" 2>> "$work/chrome.log"
}
rendered() { browse "$1" --dump-dom > "$work/dom.html"; echo "$work/dom.html"; }

for np in 2 1; do  # world 2 also evaluates within its epochs (--eval-every 2 of 6 steps: after steps 2 and 4)
  every=$([ $np = 2 ] && echo 2 || echo 0)
  "$ddprun" --nproc-per-node $np --standalone "$train" $recipe "${data[@]}" --epochs 2 --batch-size 16 \
    --log-every 2 --eval-every $every --out-dir "$work/world$np" --no-progress > "$work/log$np"
  [ $np = 1 ] || [ "$(grep -c '"kind":"eval"' "$work/world$np/metrics.jsonl")" = 4 ] ||
    { echo "FAIL: world 2 did not log 4 evaluations within its epochs"; exit 1; }
  grep -q "^\[rank 0\]   report: $work/world$np/report.html" "$work/log$np" ||
    { cat "$work/log$np"; echo "FAIL: the last lines do not name the report"; exit 1; }
done
page="$work/world2/report.html"
$check "$(rendered "$page")" finished "$work/world2"

# Rebuilt from the run directory: the same page.
cp "$page" "$work/written.html"
"$train" report "$work/world2"
cmp "$page" "$work/written.html" || { echo "FAIL: ddp-train report differs from the page the run wrote"; exit 1; }

# Side by side: both runs overlaid.
"$train" report "$work/world2" "$work/world1" -o "$work/compare.html"
$check "$(rendered "$work/compare.html")" finished "$work/world2" "$work/world1"

browse "$page" --window-size=1400,2200 --screenshot="$artifacts/report.png" > /dev/null
browse "$work/compare.html" --window-size=1400,2200 --screenshot="$artifacts/compare.png" > /dev/null
for png in report compare; do
  [ "$(head -c 8 "$artifacts/$png.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    { echo "FAIL: no PNG screenshot $artifacts/$png.png"; exit 1; }
  echo "screenshot: $artifacts/$png.png"
done

# The check can fail: a page without Chart.js, and data that lost an epoch.
${DDP_PYTHON:-/usr/bin/python3} - "$page" "$work/nochart.html" <<'PY'
import sys
page = open(sys.argv[1]).read()
start = page.index("/*!\n * Chart.js v3.9")
end = page.index("</script>", start)
open(sys.argv[2], "w").write(page[:start] + page[end:])
PY
if $check "$(rendered "$work/nochart.html")" finished "$work/world2" > "$work/neg1" 2>&1; then
  echo "FAIL: the check passed a page without Chart.js"; exit 1
fi
grep -q "Chart" "$work/neg1" || { cat "$work/neg1"; echo "FAIL: the check did not name Chart.js"; exit 1; }
mkdir -p "$work/lost"
${DDP_PYTHON:-/usr/bin/python3} - "$work/world2/metrics.jsonl" "$work/lost/metrics.jsonl" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines(True)
last = max(i for i, l in enumerate(lines) if '"kind":"epoch"' in l)
open(sys.argv[2], "w").write("".join(lines[:last] + lines[last + 1:]))
PY
"$train" report "$work/lost" -o "$work/lost.html"
if $check "$(rendered "$work/lost.html")" finished "$work/world2" > "$work/neg2" 2>&1; then
  echo "FAIL: the check passed a page that lost an epoch"; exit 1
fi
grep -q "1 points, logged 2\|\[1\] points, logged 2" "$work/neg2" || { cat "$work/neg2"; echo "FAIL: not the lost epoch"; exit 1; }
# A run that fails: its page says how it ended, with the message.
if "$ddprun" --nproc-per-node 2 --standalone "$train" $recipe "${data[@]}" --epochs 1 --batch-size 16 --lr 1e8 \
    --out-dir "$work/failed" --no-progress > "$work/logf" 2>&1; then
  echo "FAIL: a run with --lr 1e8 did not fail"; exit 1
fi
grep -q '"kind":"end","status":"error","message":"the gradients are not finite' "$work/failed/metrics.jsonl" ||
  { tail -3 "$work/failed/metrics.jsonl"; echo "FAIL: no error end line"; exit 1; }
grep -q '<span class="error">error: the gradients are not finite at epoch 1' "$(rendered "$work/failed/report.html")" ||
  { echo "FAIL: the page of the failed run does not show the error"; exit 1; }
# A directory that is no run: exit 2 and what to give instead.
if "$train" report "$work/nothing" 2> "$work/err"; then echo "FAIL: report of a directory without a run"; exit 1; fi
grep -q "^ddp-train report: $work/nothing has no readable metrics.jsonl .*give the --out-dir of a ddp-train run" \
  "$work/err" || { cat "$work/err"; echo "FAIL: unclear error"; exit 1; }
echo "report_browser ok"
