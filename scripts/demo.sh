#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job on the built-in CPU demo target:
# a tiny locally built Llama served by real vLLM, stock path vs the example fast path.
# Extra arguments go to `fasttrack validate`, e.g. `bash scripts/demo.sh --tier standard`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV="${FASTTRACK_VENV:-.venv}"
OUT="${FASTTRACK_DEMO_OUT:-runs/demo}"
"$VENV/bin/fasttrack" plan --model demo-llama --tier smoke
exec "$VENV/bin/fasttrack" validate --model demo-llama --tier smoke --out "$OUT" "$@"
