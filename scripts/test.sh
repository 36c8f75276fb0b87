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
# Commands run when the script exits, however it exits.
on_exit=()
trap 'for c in "${on_exit[@]}"; do eval "$c"; done' EXIT
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
  on_exit+=("bash scripts/slurm/stop.sh >&2 || true")
fi
# --- end of the Slurm block ---------------------------------------------------------------
set +e
# Without an explicit -m, tests marked `pending` (unfinished capabilities) are deselected.
marker=()
[[ " $* " == *" -m "* ]] || marker=(-m "not pending")
# The suite writes its counts here (tests/enginecount.py): end-to-end tests run, engine starts.
export FASTTRACK_SUITE_SUMMARY="$PWD/.artifacts/suite-summary.txt"
rm -f "$FASTTRACK_SUITE_SUMMARY"
pytest_cmd=("$VENV/bin/python" -m pytest -p no:cacheprovider --timeout=1800 --durations=15)
t0=$(date +%s)
if [[ $# == 0 && "${FASTTRACK_SIDE_BY_SIDE:-1}" != 0 ]]; then
  # The whole suite (what CI runs): the fast tests run in a second pytest process alongside
  # the end-to-end tests, whose engines leave a core mostly idle (vLLM's CPU worker runs on one
  # core and reserves the other); FASTTRACK_SIDE_BY_SIDE=0 runs one pytest after the other.
  fast_log="$PWD/.artifacts/fast-tests.log"
  FASTTRACK_SUITE_SUMMARY="$PWD/.artifacts/suite-summary-fast.txt" \
    "${pytest_cmd[@]}" -m "not e2e and not pending" >"$fast_log" 2>&1 &
  fast_pid=$!
  on_exit=("kill $fast_pid 2>/dev/null || true" "${on_exit[@]}")
  echo "==> end-to-end tests (the fast tests run alongside; their output follows)"
  "${pytest_cmd[@]}" -m "e2e and not pending"
  e2e_rc=$?
  wait "$fast_pid"
  fast_rc=$?
  echo "==> fast tests (run alongside the end-to-end tests; log: .artifacts/fast-tests.log)"
  cat "$fast_log"
  rc=$e2e_rc
  for part in "end-to-end:$e2e_rc" "fast:$fast_rc"; do
    if [[ ${part#*:} == 5 ]]; then
      echo "error: pytest collected no ${part%%:*} tests" >&2
      rc=1
    fi
  done
  [[ $rc == 0 ]] && rc=$fast_rc
else
  "${pytest_cmd[@]}" "${marker[@]}" "$@"
  rc=$?
  if [[ $rc == 5 ]]; then
    echo "error: pytest collected no tests" >&2
    rc=1
  fi
fi
wall=$(( $(date +%s) - t0 ))
set -e
starts="$(grep -s '^engine_starts=' "$FASTTRACK_SUITE_SUMMARY" | cut -d= -f2 || true)"
echo "pytest: $(( wall / 60 )) min $(( wall % 60 )) s wall clock; vLLM engine starts: ${starts:-0} (budget: 25 min, 14 starts)"
# A run meant to include the end-to-end tests (no -m deselecting them) fails when none of them ran.
if [[ -f $FASTTRACK_SUITE_SUMMARY ]] && grep -qx "e2e_meant=1" "$FASTTRACK_SUITE_SUMMARY" \
  && grep -qx "e2e_ran=0" "$FASTTRACK_SUITE_SUMMARY"; then
  echo "error: no end-to-end test ran (all skipped or errored); -m \"not e2e\" runs the fast tests alone" >&2
  exit 1
fi
exit $rc
