#!/usr/bin/env bash
# Install the Slurm and MUNGE packages that scripts/slurm/start.sh runs as a two-node
# cluster on this host (Debian/Ubuntu: slurmctld, slurmd, slurm-client, munge).
# Idempotent: does nothing when the programs are already there. Needs root (or sudo).
# The packages' own services are not used (start.sh runs every daemon by hand under a
# temporary folder); where the package installs enable them, they are stopped again.
set -euo pipefail
need=(munged slurmctld slurmd sbatch squeue scontrol scancel srun)
missing=()
for p in "${need[@]}"; do command -v "$p" >/dev/null 2>&1 || missing+=("$p"); done
if (( ${#missing[@]} == 0 )); then
  echo "slurm: installed ($(slurmd -V))"
  exit 0
fi
SUDO=()
if [[ $(id -u) != 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "error: installing Slurm needs root (missing: ${missing[*]})" >&2; exit 1; }
  SUDO=(sudo -n)
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: no apt-get; install slurmctld, slurmd, slurm-client (22.05 or later) and munge yourself (missing: ${missing[*]})" >&2
  exit 1
fi
echo "slurm: installing slurmctld slurmd slurm-client munge (missing: ${missing[*]})"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
# policy-rc.d keeps the packages' postinst from starting their own daemons (containers without systemd)
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
for p in "${need[@]}"; do command -v "$p" >/dev/null 2>&1 || { echo "error: $p still missing after install" >&2; exit 1; }; done
echo "slurm: installed ($(slurmd -V))"
