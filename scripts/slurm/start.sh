#!/usr/bin/env bash
# Start a two-node Slurm cluster on this host: munged, slurmctld, and two slurmd
# (nodes n1 and n2, NodeHostname=localhost on their own loopback ports), with 8 fake GPUs
# per node through GRES (character devices with /dev/null's numbers; jobs see
# CUDA_VISIBLE_DEVICES=0..7 and nothing more). Everything (config, keys, sockets, state,
# logs, pid files) lives under $FASTTRACK_SLURM_DIR (default: $TMPDIR/fasttrack-slurm);
# no system config is written. Clients find the cluster through SLURM_CONF:
#   eval "$(bash scripts/slurm/start.sh --print-env)"     # start (or reuse) and export SLURM_CONF
#   bash scripts/slurm/stop.sh                            # cancel every job, stop every daemon
# Idempotent: a cluster already up under the same folder is reused.
# No accounting storage (sacct does not work here): read job state from squeue/scontrol.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
D="${FASTTRACK_SLURM_DIR:-${TMPDIR:-/tmp}/fasttrack-slurm}"
print_env=0
[[ "${1:-}" == "--print-env" ]] && print_env=1
say() { if (( print_env )); then echo "$*" >&2; else echo "$*"; fi; }
bash "$HERE/install.sh" >&2
mkdir -p "$D"
D="$(cd "$D" && pwd)"
CONF="$D/etc/slurm.conf"
export SLURM_CONF="$CONF"

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
emit_env() {
  if (( print_env )); then
    printf 'export SLURM_CONF=%q\nexport FASTTRACK_SLURM_DIR=%q\n' "$CONF" "$D"
  else
    say "slurm: up under $D; use it with: export SLURM_CONF=$CONF"
  fi
}

if alive "$D/run/slurmctld.pid" && alive "$D/run/slurmd-n1.pid" && alive "$D/run/slurmd-n2.pid" \
  && alive "$D/munge/munged.pid" && scontrol ping >/dev/null 2>&1; then
  say "slurm: already running under $D"
  emit_env
  exit 0
fi
# something half-up from an earlier start: take it down first
bash "$HERE/stop.sh" >&2 || true

mkdir -p "$D"/{etc,munge,state/ctld,run,log,dev}
chmod 0700 "$D/munge"
free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}
read -r P_CTLD P_N1 P_N2 <<<"$(free_ports 3)"
HOST="$(hostname -s)"
GPUS=8

# fake GPUs: character devices (major 1, minor 3 as /dev/null); without mknod, no GRES
gres_ok=1
for n in n1 n2; do
  mkdir -p "$D/dev/$n"
  for i in $(seq 0 $((GPUS - 1))); do
    [[ -e "$D/dev/$n/gpu$i" ]] || mknod "$D/dev/$n/gpu$i" c 1 3 2>/dev/null || gres_ok=0
  done
done
gres_node=""
if (( gres_ok )); then
  gres_node="Gres=gpu:$GPUS"
  {
    echo "NodeName=n1 Name=gpu File=$D/dev/n1/gpu[0-$((GPUS - 1))]"
    echo "NodeName=n2 Name=gpu File=$D/dev/n2/gpu[0-$((GPUS - 1))]"
  } >"$D/etc/gres.conf"
else
  say "slurm: mknod is not allowed here; the nodes have no fake GPUs (GRES)"
  : >"$D/etc/gres.conf"
fi

cat >"$CONF" <<CONF
# written by scripts/slurm/start.sh: a two-node test cluster on one host
ClusterName=fasttrack-local
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$P_CTLD
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.socket
StateSaveLocation=$D/state/ctld
SlurmdSpoolDir=$D/state/slurmd-%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=30
MinJobAge=3600
MaxArraySize=10001
GresTypes=gpu
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$P_N1 CPUs=16 RealMemory=16000 $gres_node State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$P_N2 CPUs=16 RealMemory=16000 $gres_node State=UNKNOWN
PartitionName=local Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF

# munge: its own key, socket and state under $D (root runs it here, hence --force)
[[ -f "$D/munge/munge.key" ]] || { dd if=/dev/urandom of="$D/munge/munge.key" bs=1 count=1024 status=none; }
chmod 0600 "$D/munge/munge.key"
munged --force --key-file="$D/munge/munge.key" --socket="$D/munge/munge.socket" \
  --pid-file="$D/munge/munged.pid" --log-file="$D/munge/munged.log" --seed-file="$D/munge/munged.seed"
for _ in $(seq 50); do [[ -S "$D/munge/munge.socket" ]] && break; sleep 0.1; done

FASTTRACK_SLURM_CLUSTER="$D" slurmctld -f "$CONF" -i
for n in n1 n2; do
  # the marker lets stop.sh find this cluster's slurmd and slurmstepd processes (and only those)
  FASTTRACK_SLURM_CLUSTER="$D" slurmd -f "$CONF" -N "$n"
done

# up when both nodes are idle
for _ in $(seq 120); do
  state="$(sinfo -h -N -o '%N %t' 2>/dev/null || true)"
  if [[ "$(grep -c ' idle$' <<<"$state" || true)" == 2 ]]; then
    say "slurm: nodes n1 n2 idle (controller on port $P_CTLD)"
    emit_env
    exit 0
  fi
  sleep 0.5
done
echo "error: the Slurm nodes did not come up; sinfo says: ${state:-nothing}" >&2
tail -n 20 "$D"/log/*.log >&2 || true
bash "$HERE/stop.sh" >&2 || true
exit 1
