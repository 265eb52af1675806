# Shared by the tests under a real Slurm (sourced): a munged, slurmctld and slurmd(s) of the test's own, in the
# folder $s, with a slurm.conf of its own ($SLURM_CONF). Expects skip() and fail(); $slurm_run prefixes Slurm's
# client commands (empty, or the command that enters the controller's host).
#   slurm_tools                      skips (77) unless Slurm and munge are installed and this is root
#   slurm_munge                      a munged with its own key and socket in $s
#   slurm_conf CTLD_HOST NODE_LINES  writes $s/slurm.conf (CTLD_HOST: "name(addr)"; NODE_LINES: NodeName=... lines)
#   slurm_idle N                     waits until N nodes are idle, else skips saying why
#   slurm_state JOB, slurm_wait JOB "STATES" SECONDS
#   slurm_down                       stops the daemons (for an EXIT trap)
export PATH="$PATH:/usr/sbin"
slurm_run=${slurm_run:-}
slurm_tools() {
  local tool
  for tool in slurmctld slurmd munged sbatch srun scontrol scancel sinfo; do
    command -v "$tool" > /dev/null || skip "Slurm's $tool is not installed (Debian: slurm-wlm)"
  done
  [ "$(id -u)" = 0 ] || skip "starting slurmd needs root"
}
slurm_munge() {
  mkdir -p "$s"/{state,spool,log,run}
  chmod 700 "$s"
  dd if=/dev/urandom of="$s/munge.key" bs=1024 count=1 status=none && chmod 400 "$s/munge.key"
  munged --force --socket="$s/munge.sock" --key-file="$s/munge.key" --pid-file="$s/run/munged.pid" \
    --log-file="$s/log/munged.log" --seed-file="$s/munge.seed" ||
    skip "munged would not start: $(tail -1 "$s/log/munged.log" 2> /dev/null)"
}
slurm_conf() {
  cat > "$s/slurm.conf" <<CONF
ClusterName=ddptest
SlurmctldHost=$1
AuthType=auth/munge
AuthInfo=socket=$s/munge.sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmctldPort=${slurm_ctld_port:-6817}
SlurmdPort=${slurm_slurmd_port:-6818}
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool/%n
SlurmctldPidFile=$s/run/slurmctld.pid
SlurmdPidFile=$s/run/slurmd-%n.pid
SlurmctldLogFile=$s/log/slurmctld.log
SlurmdLogFile=$s/log/slurmd-%n.log
SlurmUser=root
SlurmdUser=root
ReturnToService=2
JobRequeue=1
MpiDefault=none
$2
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
  export SLURM_CONF=$s/slurm.conf
}
slurm_idle() {
  for _ in $(seq 150); do [ "$($slurm_run sinfo -h -o %D -t idle 2> /dev/null)" = "$1" ] && return 0; sleep 0.2; done
  skip "$1 Slurm node(s) did not come up: $($slurm_run sinfo -h 2>&1 | tail -1); $(tail -qn1 "$s"/log/slurmd-*.log)"
}
slurm_state() { $slurm_run scontrol show job "$1" 2> /dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
slurm_wait() {
  for _ in $(seq $(($3 * 5))); do [[ " $2 " == *" $(slurm_state "$1") "* ]] && return 0; sleep 0.2; done
  fail "job $1 is $(slurm_state "$1"), not one of: $2 (after $3 s)"
}
slurm_down() {
  $slurm_run scancel --quiet --full --user=root 2> /dev/null
  local f
  for f in "$s"/run/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2> /dev/null; done
  sleep 0.5
}
