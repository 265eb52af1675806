#!/usr/bin/env bash
# How fast a job ends when a rank dies (SIGKILL during a stream of 16 MiB all_reduces), per backend:
# `dist_probe kill` stamps the kill and each survivor's error on stdout (wall clock); this prints, per run,
# the seconds from the kill to the first survivor's own error (gloo: the survivor sees the closed connection;
# mpi: none, mpirun ends the survivors) and to ddprun's exit, and the medians.
# usage: bench/dead_rank.sh [BUILD_DIR] [NP] [RUNS] [BACKENDS...]   e.g. bench/dead_rank.sh build 2 5 gloo mpi
set -uo pipefail
build=${1:-build} np=${2:-2} runs=${3:-5}
shift $(( $# < 3 ? $# : 3 ))
backends=("${@:-gloo}")
[ $# -eq 0 ] && backends=(gloo mpi)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "| backend | ranks | run | kill to a survivor's error (s) | kill to ddprun's exit (s) | exit code |"
echo "|---|---:|---:|---:|---:|---:|"
for backend in "${backends[@]}"; do
  : > "$work/caught" ; : > "$work/ended"
  for run in $(seq "$runs"); do
    "$build/bin/ddprun" --nproc-per-node "$np" --standalone --backend "$backend" "$build/bin/dist_probe" kill \
      > "$work/log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    killed=$(grep -o 'at [0-9.]* killed' "$work/log" | head -1 | cut -d' ' -f2)
    caught=$(grep -o 'at [0-9.]* caught' "$work/log" | cut -d' ' -f2 | sort -g | head -1)
    [ -z "$killed" ] && { echo "no kill stamp in run $run ($backend):" >&2; tail -5 "$work/log" >&2; continue; }
    c=$([ -n "$caught" ] && awk -v a="$caught" -v k="$killed" 'BEGIN { printf "%.3f", a - k }' || echo "-")
    e=$(awk -v a="$end" -v k="$killed" 'BEGIN { printf "%.3f", a - k }')
    [ "$c" != "-" ] && echo "$c" >> "$work/caught"
    echo "$e" >> "$work/ended"
    echo "| $backend | $np | $run | $c | $e | $rc |"
  done
  echo "| $backend | $np | median | $(median < "$work/caught") | $(median < "$work/ended") | |"
done
