#!/usr/bin/env bash
# The kernel tier on one H200 (or any CUDA GPU) with the example Triton candidates.
# Needs only python3 with torch, triton and pytest (+ compute-sanitizer for the sanitizer rows).
#   OUT=results-dir bash suites/kimi-k3/kernels/run_h200.sh
# Writes, under $OUT:
#   env.txt                    GPU, driver, torch/triton versions, compute-sanitizer location
#   h200-race.json             the side-stream pair with the planted read-before-write race
#   h200-dcp-off-by-one.json   DCP numerics with the planted off-by-one in the combine
#   h200-triton.json           the whole tier, clean: numerics, determinism, perturbation, speed of light
#   h200-sanitizer.json        compute-sanitizer memcheck, racecheck, synccheck over the sanitize selection
set -u
OUT=${OUT:-/tmp/fasttrack-kernels-h200}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
S=suites/kimi-k3/kernels
RUN="python3 -m fasttrack.kernels.run --suite $S --quiet"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__, torch.cuda.get_device_name(0))"
  command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
echo "== planted race (perturbation must catch it)"
timeout 90 $RUN --out "$OUT/h200-race.json" --tier standard --defect race-read-before-write -k streams --sanitize off --timeout 80
echo "== planted DCP off-by-one (numerics must catch it)"
timeout 110 $RUN --out "$OUT/h200-dcp-off-by-one.json" --tier smoke --defect dcp-off-by-one -k "dcp and numerics" --sanitize off --timeout 100
echo "== the whole tier, clean"
timeout 235 $RUN --out "$OUT/h200-triton.json" --tier "${TIER:-standard}" --sanitize off --timeout 225
echo "== compute-sanitizer"
timeout 190 $RUN --out "$OUT/h200-sanitizer.json" --tier smoke -k "rmsnorm and numerics and b1-" --sanitize auto --sanitizer-timeout 55 --timeout 30
ls -la "$OUT"
