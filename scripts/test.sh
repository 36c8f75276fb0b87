#!/usr/bin/env bash
# Set up (scripts/setup.sh), run the linters (ruff, mypy) and the whole test suite, end-to-end
# tests included. Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not e2e"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
VENV="${FASTTRACK_VENV:-.venv}"
mkdir -p .artifacts
# Linters before the tests, as CI runs them (config in pyproject.toml); FASTTRACK_LINT=0 skips them.
if [[ "${FASTTRACK_LINT:-1}" != 0 ]]; then
  lint_failed=()
  echo "==> ruff check"
  "$VENV/bin/ruff" check . || lint_failed+=("ruff check")
  echo "==> ruff format --check"
  "$VENV/bin/ruff" format --check . || lint_failed+=("ruff format --check")
  echo "==> mypy"
  "$VENV/bin/mypy" || lint_failed+=("mypy")
  if (( ${#lint_failed[@]} )); then
    printf -v failed '%s, ' "${lint_failed[@]}"
    echo "error: linter(s) failed: ${failed%, } (FASTTRACK_LINT=0 skips the linters)" >&2
    exit 1
  fi
fi
# --- local Slurm cluster (scale-out end-to-end tests in tests/executors) --------------------
# A two-node cluster on this host (scripts/slurm/start.sh; installs the Debian packages if
# missing), up for the whole pytest run and stopped on exit; FASTTRACK_SLURM=0 skips it.
if [[ "${FASTTRACK_SLURM:-1}" != 0 ]]; then
  export FASTTRACK_SLURM_DIR="${FASTTRACK_SLURM_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/fasttrack-slurm.XXXXXX")}"
  if ! slurm_env="$(bash scripts/slurm/start.sh --print-env)"; then
    echo "error: the local Slurm cluster did not start (FASTTRACK_SLURM=0 skips it and its tests)" >&2
    exit 1
  fi
  eval "$slurm_env"
  export FASTTRACK_REQUIRE_SLURM=1
  trap 'bash scripts/slurm/stop.sh >&2 || true' EXIT
fi
# --- end of the Slurm block ---------------------------------------------------------------
set +e
# Without an explicit -m, tests marked `pending` (unfinished capabilities) are deselected.
marker=()
[[ " $* " == *" -m "* ]] || marker=(-m "not pending")
# The suite writes its counts here (tests/enginecount.py): end-to-end tests run, engine starts.
export FASTTRACK_SUITE_SUMMARY="$PWD/.artifacts/suite-summary.txt"
rm -f "$FASTTRACK_SUITE_SUMMARY"
"$VENV/bin/python" -m pytest -p no:cacheprovider --timeout=1800 --durations=15 "${marker[@]}" "$@"
rc=$?
set -e
if [[ $rc == 5 ]]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
# A run meant to include the end-to-end tests (no -m deselecting them) fails when none of them ran.
if [[ -f $FASTTRACK_SUITE_SUMMARY ]] && grep -qx "e2e_meant=1" "$FASTTRACK_SUITE_SUMMARY" \
  && grep -qx "e2e_ran=0" "$FASTTRACK_SUITE_SUMMARY"; then
  echo "error: no end-to-end test ran (all skipped or errored); -m \"not e2e\" runs the fast tests alone" >&2
  exit 1
fi
exit $rc
