#!/usr/bin/env bash
# The GPU demo's evidence runs, one phase after another, on a CUDA host with the project installed
# (docs/gpu.md, "Running it"). Usage:
#
#   FASTTRACK_GPU_KEY=keys/me bash scripts/gpu-run.sh OUT [calibrate] [clean] [slow3] [slow2]
#
# calibrate  fasttrack calibrate --model demo-llama-gpu (PAIRS A/A pairs of stock lifetimes, default 4); the
#            signed record goes beside the scope (suites/demo-llama-gpu/calibration/RECORD.dsse.json, RECORD
#            default h100, with the key's .pub), the figures and the A/A bundle to RESULTS (default
#            benchmarks/results/gpu-calibration), and the scope is pinned to the record (gates.perf.calibration;
#            a noise margin below the record's recommendation rises to it)
# clean      fasttrack validate --model demo-llama-gpu --tier smoke, signed, verified, its report rendered
# slow3      the planted slowdown of 3% at batches 3-4 (slow-batch, FASTTRACK_DEMO_SLOW_FACTOR=1.03), perf only
#            (two engine starts, about 5 minutes on an H100); slow2 the same at 2%
# defects    benchmarks/gpu_defects.py: the five planted GPU defects, each through validate
#
# Progress lines go to OUT/progress.log; each phase's folder holds its bundle, report and log.
set -uo pipefail
OUT="${1:?usage: gpu-run.sh OUT [phase...]}"
shift
PHASES=("${@:-calibrate clean slow3}")
KEY="${FASTTRACK_GPU_KEY:?set FASTTRACK_GPU_KEY to the private key that signs the records and bundles}"
RESULTS="${RESULTS:-benchmarks/results/gpu-calibration}"
RECORD="${RECORD:-h100}"
SCOPE=suites/demo-llama-gpu/scope.yaml
CALDIR=suites/demo-llama-gpu/calibration
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
log() { echo "$(date +%T) $*" | tee -a "$OUT/progress.log"; }

pin_scope() {  # pin the scope to the record (its path, hash and key); a margin below the record's recommendation rises to it
  "$PY" - "$SCOPE" "$CALDIR/$RECORD.dsse.json" "$CALDIR/$RECORD.pub" <<'EOF'
import hashlib, json, base64, re, sys
from pathlib import Path
scope, record, pub = map(Path, sys.argv[1:4])
data = record.read_bytes()
payload = json.loads(base64.b64decode(json.loads(data)["payload"]))
rel = lambda p: str(p.relative_to(scope.parent))
text = scope.read_text()
old = float(re.search(r"\n    noise_margin: ([0-9.]+)", text).group(1))
margin = max(old, payload["recommended_margin"])
text = re.sub(r"(\n    noise_margin: )[0-9.]+", rf"\g<1>{margin:g}", text, count=1)
text = re.sub(r"\n    calibration:\n(      .*\n)+", "\n", text)
block = (f"    calibration:\n      record: {rel(record)}\n      sha256: {hashlib.sha256(data).hexdigest()}\n"
         f"      keys: [{rel(pub)}]\n")
text = text.replace("    interleave_settle_s: 0\n", "    interleave_settle_s: 0\n" + block, 1)
scope.write_text(text)
print(f"pinned {scope} to {record} (recommended margin {payload['recommended_margin']:g}, the scope's {margin:g})")
EOF
}

validate() {  # validate NAME [args...]: one validate run into OUT/NAME, verified, its report rendered
  local name=$1
  shift
  log "$name: validate $*"
  "$PY" -m fasttrack validate --model demo-llama-gpu --tier smoke --out "$OUT/$name" --force --sign-key "$KEY" "$@" \
    >"$OUT/$name.log" 2>&1
  log "$name: validate exit $?"
  "$PY" -m fasttrack verify "$OUT/$name/bundle.tar.gz" --key "$KEY.pub" >"$OUT/$name.verify.txt" 2>&1
  log "$name: verify exit $?"
  "$PY" -m fasttrack report "$OUT/$name/bundle.tar.gz" --key "$KEY.pub" -o "$OUT/$name/report.html" \
    >>"$OUT/$name.verify.txt" 2>&1
  log "$name: report exit $?"
}

for phase in ${PHASES[@]}; do
  case "$phase" in
    calibrate)
      log "calibrate: ${PAIRS:-4} A/A pairs"
      "$PY" -m fasttrack calibrate --model demo-llama-gpu --tier smoke --pairs "${PAIRS:-4}" \
        --out "$OUT/calibrate" --sign-key "$KEY" >"$OUT/calibrate.log" 2>&1
      log "calibrate: exit $?"
      mkdir -p "$RESULTS" "$CALDIR"
      cp "$OUT/calibrate/calibration.md" "$OUT/calibrate/aa-comparisons.json" "$RESULTS/" \
        && cp "$OUT/calibrate/aa/bundle.tar.gz" "$RESULTS/aa-bundle.tar.gz" \
        && cp "$OUT/calibrate/calibration.dsse.json" "$CALDIR/$RECORD.dsse.json" && cp "$KEY.pub" "$CALDIR/$RECORD.pub" \
        && pin_scope | tee -a "$OUT/progress.log"
      ;;
    clean) validate clean ;;
    slow3) FASTTRACK_DEMO_DEFECT=slow-batch FASTTRACK_DEMO_SLOW_FACTOR=1.03 validate slow3 --checks perf ;;
    slow2) FASTTRACK_DEMO_DEFECT=slow-batch FASTTRACK_DEMO_SLOW_FACTOR=1.02 validate slow2 --checks perf ;;
    defects)
      log "defects: benchmarks/gpu_defects.py"
      "$PY" benchmarks/gpu_defects.py --out "$OUT/defects" >"$OUT/defects.log" 2>&1
      log "defects: exit $?"
      ;;
    *) log "unknown phase $phase" ;;
  esac
done
log "done"
