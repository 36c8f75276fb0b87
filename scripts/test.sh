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
summaries=("$FASTTRACK_SUITE_SUMMARY")
if [[ $# == 0 && "${FASTTRACK_SIDE_BY_SIDE:-1}" != 0 ]]; then
  # The whole suite (what CI runs) in two pytest processes side by side (tests/sidebyside.py,
  # FASTTRACK_TEST_SPLIT): one runs the end-to-end tests on the engine schedule (those that use the
  # session's engines, then those that stop them and start their own) and then the fast tests of
  # SCHEDULE_TAIL (bundle, kernel, PR and security tests: minutes of them; the engine schedule ends
  # first, so they even out the two), the other every other test
  # (first the end-to-end tests that start engines of their own from the outset, then the fast tests).
  # The other process pauses while the first one times engines (perf pairs; FASTTRACK_QUIET_FILE).
  # vLLM's CPU worker binds to one core (core 0 on two cores); the second process's engines bind
  # to the last core and keep their compiled code in a cache of their own (two processes compiling
  # one graph into one cache can load each other's half-written files).
  # FASTTRACK_SIDE_BY_SIDE=0 runs everything in one process.
  other_log="$PWD/.artifacts/other-tests.log"
  export FASTTRACK_QUIET_FILE="$PWD/.artifacts/quiet-window"
  rm -f "$FASTTRACK_QUIET_FILE"
  other_summary="$PWD/.artifacts/suite-summary-other.txt"
  rm -f "$other_summary"
  summaries+=("$other_summary")
  inductor_cache="${TORCHINDUCTOR_CACHE_DIR:-${TMPDIR:-/tmp}/torchinductor_$(id -un)}"
  FASTTRACK_TEST_SPLIT=other FASTTRACK_SUITE_SUMMARY="$other_summary" \
    VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-$(( $(nproc) - 1 ))}" \
    TORCHINDUCTOR_CACHE_DIR="$inductor_cache-other" \
    "${pytest_cmd[@]}" -m "not pending" >"$other_log" 2>&1 &
  other_pid=$!
  on_exit=("kill $other_pid 2>/dev/null || true" "${on_exit[@]}")
  echo "==> end-to-end tests on the engine schedule, then the bundle, kernel, PR and security tests (the other tests run alongside; their output follows)"
  FASTTRACK_TEST_SPLIT=schedule "${pytest_cmd[@]}" -m "not pending"
  schedule_rc=$?
  schedule_wall=$(( $(date +%s) - t0 ))
  wait "$other_pid"
  other_rc=$?
  # the other process's own wall clock (pytest's "in N s" line): it may have ended first
  other_wall=$(sed -n 's/.* in \([0-9]*\)\.[0-9]*s .*/\1/p' "$other_log" | tail -1)
  echo "==> the other tests: fast, and end-to-end with engines of their own (run alongside; log: .artifacts/other-tests.log)"
  cat "$other_log"
  rc=$schedule_rc
  for part in "engine schedule:$schedule_rc" "other:$other_rc"; do
    if [[ ${part#*:} == 5 ]]; then
      echo "error: pytest collected no ${part%%:*} tests" >&2
      rc=1
    fi
  done
  [[ $rc == 0 ]] && rc=$other_rc
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
# Sum a count over the pytest processes' summaries (tests/enginecount.py writes them).
total() { cat "${summaries[@]}" 2>/dev/null | sed -n "s/^$1=//p" | awk '{n += $1} END {print n + 0}'; }
split_walls=""
[[ -n "${schedule_wall:-}" ]] && split_walls=" (engine schedule ${schedule_wall} s, other tests ${other_wall} s)"
echo "pytest: $(( wall / 60 )) min $(( wall % 60 )) s wall clock${split_walls}; vLLM engine starts: $(total engine_starts) (budget: 25 min, 14 starts); end-to-end tests run: $(total e2e_ran) of $(total e2e_selected)"
# A run meant to include the end-to-end tests (no -m deselecting them) fails when none of them ran.
if (( $(total e2e_meant) > 0 && $(total e2e_ran) == 0 )); then
  echo "error: no end-to-end test ran (all skipped or errored); -m \"not e2e\" runs the fast tests alone" >&2
  exit 1
fi
exit $rc
