#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job on the built-in CPU demo target:
# a tiny locally built Llama served by real vLLM, stock path vs the example fast path.
# Extra arguments go to `fasttrack validate`, e.g. `bash scripts/demo.sh --tier standard`.
# The bundle is signed with a local demo key (scripts/demo_key.sh: made on the first run next to
# the run folder, reused later), the report is rendered against it, and the script ends by
# verifying the bundle and printing the `fasttrack verify` command that does so.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/demo_key.sh
source scripts/demo_key.sh
bash scripts/setup.sh
VENV="${FASTTRACK_VENV:-.venv}"
OUT="${FASTTRACK_DEMO_OUT:-runs/demo}"
KEY="$(demo_key "$VENV" "$OUT")"
"$VENV/bin/fasttrack" plan --model demo-llama --tier smoke
# the bundle's identity before the run (inode, size, modification and change times to the nanosecond): a
# timestamp marker cannot tell a file written in the same clock tick as the marker from an old one
identity() { stat -c '%i %s %y %z' "$OUT/bundle.tar.gz" 2>/dev/null || true; }
before="$(identity)"
status=0
"$VENV/bin/fasttrack" validate --model demo-llama --tier smoke --out "$OUT" --sign-key "$KEY" "$@" || status=$?
# only a bundle this run wrote (not one left by an earlier run when validate stopped early)
if [ -f "$OUT/bundle.tar.gz" ] && [ "$(identity)" != "$before" ]; then
  echo
  echo "The bundle is signed with the local demo key $KEY (not a trusted identity). To verify it:"
  echo "  $VENV/bin/fasttrack verify $OUT/bundle.tar.gz --key $KEY.pub"
  verified=0
  "$VENV/bin/fasttrack" verify "$OUT/bundle.tar.gz" --key "$KEY.pub" || verified=$?
  if [ "$status" -eq 0 ]; then status=$verified; fi
fi
exit "$status"
