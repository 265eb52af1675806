#!/usr/bin/env bash
# Under a real Slurm: a private slurmctld, slurmd and munged started here (this machine as one node), then
# - sbatch of a job whose 'srun ddp-train' ranks (two tasks, gloo) are placed by Slurm's variables alone;
# - a job that gets SIGUSR1 (as --signal=USR1@T sends it before a time limit), checkpoints, requeues itself with
#   the real scontrol, comes back under its id and resumes to exactly an uninterrupted run's weights;
# - scancel of a running job ends every rank.
# Skips (exit 77) saying why where Slurm is not installed or cannot start (not root, daemons refuse).
# usage: slurm_test.sh DDP_TRAIN
set -uo pipefail
train=$(readlink -f "$1") recipe=fashion-mnist
source "$(dirname "$0")/lib.sh"
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; for f in "$work"/*.out "$work"/slurm/log/*.log; do [ -f "$f" ] && { echo "== $f"; tail -30 "$f"; }; done; exit 1; }
for tool in slurmctld slurmd munged mungekey sbatch srun scontrol scancel sinfo; do
  command -v "$tool" > /dev/null || [ -x "/usr/sbin/$tool" ] || skip "Slurm's $tool is not installed (Debian: slurm-wlm)"
done
[ "$(id -u)" = 0 ] || skip "starting slurmd needs root"
export PATH="$PATH:/usr/sbin"
s=$work/slurm
mkdir -p "$s"/{state,spool,log,run}
chmod 700 "$s"
ports=$(${DDP_PYTHON:-/usr/bin/python3} -c '
import socket
ss = [socket.socket() for _ in range(2)]
for x in ss: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in ss])')
read -r ctld_port slurmd_port <<< "$ports"
host=$(hostname -s)
# A munged of our own (its own key and socket), so the test needs nothing of the machine's.
dd if=/dev/urandom of="$s/munge.key" bs=1024 count=1 status=none && chmod 400 "$s/munge.key"
munged --force --socket="$s/munge.sock" --key-file="$s/munge.key" --pid-file="$s/run/munged.pid" \
  --log-file="$s/log/munged.log" --seed-file="$s/munge.seed" || skip "munged would not start: $(tail -1 "$s/log/munged.log")"
cat > "$s/slurm.conf" <<CONF
ClusterName=ddptest
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$s/munge.sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool
SlurmctldPidFile=$s/run/slurmctld.pid
SlurmdPidFile=$s/run/slurmd.pid
SlurmctldLogFile=$s/log/slurmctld.log
SlurmdLogFile=$s/log/slurmd.log
SlurmUser=root
SlurmdUser=root
ReturnToService=2
JobRequeue=1
MpiDefault=none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$s/slurm.conf
stop_slurm() {
  scancel --quiet --full --user=root 2> /dev/null
  for p in slurmd slurmctld munged; do [ -f "$s/run/$p.pid" ] && kill "$(cat "$s/run/$p.pid")" 2> /dev/null; done
  sleep 0.5
  rm -rf "$work"
}
trap stop_slurm EXIT
slurmctld -i -f "$SLURM_CONF" || skip "slurmctld would not start: $(tail -2 "$s/log/slurmctld.log")"
slurmd -f "$SLURM_CONF" || skip "slurmd would not start: $(tail -2 "$s/log/slurmd.log")"
for _ in $(seq 150); do sinfo -h -o %t 2> /dev/null | grep -q idle && break; sleep 0.2; done
sinfo -h -o %t | grep -q idle || skip "the node did not come up: $(sinfo 2>&1 | tail -1); $(tail -1 "$s/log/slurmd.log")"

# state JOB: the job's state (PENDING, RUNNING, COMPLETED, ...); wait_state JOB STATES SECONDS.
state() { scontrol show job "$1" 2> /dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_state() {
  for _ in $(seq $(($3 * 5))); do [[ " $2 " == *" $(state "$1") "* ]] && return 0; sleep 0.2; done
  fail "job $1 is $(state "$1"), not one of: $2 (after $3 s)"
}
args=(fashion-mnist "${data[@]}" --no-progress --batch-size 16 --epochs 6 --data sampler --backend gloo)
cd "$work"

# 1. sbatch: two tasks, 'srun ddp-train', no launcher variables.
job=$(sbatch --parsable -n 2 -o "$work/one.out" --wrap "OMP_NUM_THREADS=1 srun $train ${args[*]} --out-dir $work/one")
wait_state "$job" "COMPLETED FAILED CANCELLED" 300
[ "$(state "$job")" = COMPLETED ] || fail "job $job ended $(state "$job")"
grep -q "ddp-train fashion-mnist: 2 rank(s) on gloo" one.out || fail "job $job's first line"
grep -q "placed by srun: RANK from SLURM_PROCID, WORLD_SIZE from SLURM_STEP_NUM_TASKS" one.out || fail "no placement line"
grep -q "^done: " one.out || fail "job $job did not finish training"

# 2. SIGUSR1 (the time limit's warning) to the job's ranks: checkpoint, exit 75, scontrol requeue, resume.
job=$(sbatch --parsable -n 2 --requeue --open-mode=append -o "$work/two.out" \
  --wrap "OMP_NUM_THREADS=1 srun $train ${args[*]} --out-dir $work/two --requeue")
for _ in $(seq 600); do grep -q "epoch 2/6" two.out 2> /dev/null && break; sleep 0.1; done
scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job"
# Slurm holds a requeued job back for a while (its begin time); released at once here.
for _ in $(seq 600); do grep -q "requeued the Slurm job" two.out 2> /dev/null && break; sleep 0.1; done
for _ in $(seq 100); do [ "$(state "$job")" = PENDING ] && break; sleep 0.2; done
scontrol update JobId="$job" StartTime=now 2> /dev/null
for _ in $(seq 600); do grep -q "requeue 1 by Slurm: resuming" two.out 2> /dev/null && break; sleep 0.5; done
wait_state "$job" "COMPLETED FAILED CANCELLED" 300
grep -q "preempted (SIGUSR1): stopped after step " two.out || fail "job $job: no preemption line"
grep -q "requeued the Slurm job" two.out || fail "job $job: rank 0 did not requeue it"
grep -q "requeue 1 by Slurm: resuming from the latest checkpoint" two.out || fail "job $job did not come back"
stopped=$(sed -n 's/.*stopped after step \([0-9]*\) of epoch.*/\1/p' two.out | head -1)
grep -q "resumed from .* step $stopped" two.out || fail "job $job did not resume at step $stopped"
[ "$(state "$job")" = COMPLETED ] || fail "job $job ended $(state "$job") after its requeue"
${DDP_PYTHON:-/usr/bin/python3} - "$(latest "$work/one")" "$(latest "$work/two")" <<'PY' || fail "weights differ"
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
assert a["step"] == b["step"] and a["epoch"] == b["epoch"] == 6, (a["step"], b["step"])
for k in a["model"]:
    assert torch.equal(a["model"][k], b["model"][k]), "FAIL: " + k + " differs after the requeue"
PY

# 3. scancel of a running job: every rank ends.
job=$(sbatch --parsable -n 2 -o "$work/three.out" \
  --wrap "OMP_NUM_THREADS=1 srun $train ${args[*]} --epochs 1000 --out-dir $work/three")
for _ in $(seq 600); do grep -q "epoch 1/1000" three.out 2> /dev/null && break; sleep 0.1; done
scancel "$job"
wait_state "$job" "CANCELLED COMPLETED FAILED" 60
for _ in $(seq 100); do pgrep -f "out-dir $work/three" > /dev/null || break; sleep 0.1; done
! pgrep -af "out-dir $work/three" || fail "ranks of cancelled job $job still run"
echo "PASS: sbatch + srun ddp-train placed by Slurm; SIGUSR1 -> checkpoint, requeue, exact resume at step $stopped; scancel ends every rank"
