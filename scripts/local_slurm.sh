#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the tests of dtrain under srun, sbatch and scancel
# (cli/slurm_cli_test.cpp): Debian's slurm-wlm daemons (slurmctld and slurmd, authenticated by
# munge), one partition "local" of this machine's cores, configuration, state and logs in DIR,
# on ports of their own (16817, 16818) so that a system's Slurm is left alone.
#
#   bash scripts/local_slurm.sh start DIR    starts it; then SLURM_CONF=DIR/slurm.conf srun ...
#   bash scripts/local_slurm.sh stop DIR     stops its daemons
#
# Needs root (the daemons run as root) and `scripts/setup.sh --tests`, which installs slurm-wlm.
set -euo pipefail
action=${1:-}
dir=${2:-}
[ -n "$dir" ] && { [ "$action" = start ] || [ "$action" = stop ]; } ||
  { echo "usage: local_slurm.sh start|stop DIR" >&2; exit 2; }

stop() {
  for daemon in slurmd slurmctld; do
    if [ -s "$dir/$daemon.pid" ]; then
      pid=$(cat "$dir/$daemon.pid")
      kill "$pid" 2> /dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
      rm -f "$dir/$daemon.pid"
    fi
  done
}

if [ "$action" = stop ]; then
  stop
  exit 0
fi

[ "$(id -u)" -eq 0 ] || { echo "local_slurm.sh: the Slurm daemons run as root; run as root" >&2; exit 1; }
command -v slurmctld > /dev/null && command -v slurmd > /dev/null && command -v munged > /dev/null ||
  { echo "local_slurm.sh: no slurmctld, slurmd or munged: run scripts/setup.sh --tests" >&2; exit 1; }
mkdir -p "$dir/state" "$dir/spool"
dir=$(cd "$dir" && pwd)
node=$(hostname -s)
cat > "$dir/slurm.conf" << EOF
ClusterName=dtrain-local
SlurmctldHost=$node
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
# No cgroups: a container may not have them to give.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# srun starts MPI ranks through PMIx, which Open MPI reads.
MpiDefault=pmix
ReturnToService=2
# scancel sends SIGTERM, then SIGKILL this many seconds later: time for a checkpoint.
KillWait=60
# Every core (nproc would count OMP_NUM_THREADS's).
NodeName=$node CPUs=$(getconf _NPROCESSORS_ONLN) State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
# munge authenticates the daemons and the commands; Debian's package made its key.
if ! pgrep -x munged > /dev/null; then
  mkdir -p /run/munge
  chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged
fi
stop
SLURM_CONF=$dir/slurm.conf slurmctld -f "$dir/slurm.conf"
SLURM_CONF=$dir/slurm.conf slurmd -f "$dir/slurm.conf"
for _ in $(seq 100); do
  # A daemon that stopped (its port taken by another cluster's) would leave sinfo asking that one.
  for daemon in slurmctld slurmd; do
    if [ -s "$dir/$daemon.pid" ] && ! kill -0 "$(cat "$dir/$daemon.pid")" 2> /dev/null; then
      echo "local_slurm.sh: $daemon stopped; the end of $dir/$daemon.log:" >&2
      tail -5 "$dir/$daemon.log" >&2
      exit 1
    fi
  done
  state=$(SLURM_CONF=$dir/slurm.conf sinfo -h -o %T 2> /dev/null || true)
  [ "$state" = idle ] && [ -s "$dir/slurmctld.pid" ] && [ -s "$dir/slurmd.pid" ] && exit 0
  sleep 0.2
done
echo "local_slurm.sh: the node did not come up (state '${state:-}'); see $dir/slurmctld.log and $dir/slurmd.log" >&2
exit 1
