#!/usr/bin/env bash
# Stop the cluster that scripts/slurm/start.sh started under $FASTTRACK_SLURM_DIR: cancel
# every job, wait for their processes to end, then stop slurmd (n1, n2), slurmctld and
# munged by the pids in their pid files; the state folder is removed (--keep keeps it,
# e.g. to read the daemons' logs). Nothing of the cluster is left running; exits 1 if a
# process of it survives. Idempotent: nothing running is fine.
set -uo pipefail
D="${FASTTRACK_SLURM_DIR:-${TMPDIR:-/tmp}/fasttrack-slurm}"
keep=0
[[ "${1:-}" == "--keep" ]] && keep=1
[[ -d "$D" ]] || { echo "slurm: nothing under $D"; exit 0; }
D="$(cd "$D" && pwd)"
export SLURM_CONF="$D/etc/slurm.conf"

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
# the processes of this cluster: its daemons and slurmstepd carry FASTTRACK_SLURM_CLUSTER=$D in
# their environment (start.sh sets it for them alone); job processes are their descendants
cluster_pids() {
  python3 - "$D" <<'PY'
import os, sys
marker = ("FASTTRACK_SLURM_CLUSTER=" + sys.argv[1]).encode()
parent, roots = {}, set()
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        with open(f"/proc/{p}/stat", "rb") as f:
            parent[int(p)] = int(f.read().rsplit(b")", 1)[1].split()[1])
        with open(f"/proc/{p}/environ", "rb") as f:
            if marker in f.read().split(b"\0"):
                roots.add(int(p))
    except (OSError, ValueError, IndexError):
        continue
found = set(roots)
grew = True
while grew:
    grew = False
    for pid, pp in parent.items():
        if pp in found and pid not in found:
            found.add(pid)
            grew = True
found.discard(os.getpid())
print(" ".join(str(p) for p in sorted(found)))
PY
}
stop_pidfile() {
  local f="$1" pid
  alive "$f" || { rm -f "$f"; return 0; }
  pid="$(cat "$f")"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  rm -f "$f"
}

if alive "$D/run/slurmctld.pid" && [[ -f "$SLURM_CONF" ]]; then
  scancel --full --quiet --partition=local 2>/dev/null || true
  for _ in $(seq 90); do
    [[ -z "$(squeue -h -o %i 2>/dev/null)" ]] && break
    sleep 1
  done
fi
for n in n1 n2; do stop_pidfile "$D/run/slurmd-$n.pid"; done
stop_pidfile "$D/run/slurmctld.pid"
# job processes that outlived their slurmd (only ours: they carry FASTTRACK_SLURM_DIR=$D)
left="$(cluster_pids)"
if [[ -n "$left" ]]; then
  kill -TERM $left 2>/dev/null
  sleep 2
  left="$(cluster_pids)"
  [[ -n "$left" ]] && kill -KILL $left 2>/dev/null
  sleep 0.5
fi
stop_pidfile "$D/munge/munged.pid"
left="$(cluster_pids)"
if [[ -n "$left" ]]; then
  echo "error: processes of the Slurm cluster under $D are still running: $left" >&2
  exit 1
fi
if (( keep )); then
  echo "slurm: stopped; state kept under $D"
else
  rm -rf "$D"
  echo "slurm: stopped; $D removed"
fi
