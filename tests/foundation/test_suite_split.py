"""The suite's two shares (``FASTTRACK_TEST_SPLIT``, run side by side by ``scripts/test.sh``):
together they are the whole suite, each test in exactly one, in the engine schedule's order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AREAS = ["tests/executors", "tests/checks", "tests/engine"]
"""Areas with tests of every kind: fast, on the engine schedule, end-to-end with engines of their own."""


def _collect(split: str | None) -> tuple[int, list[str], str]:
    env = {k: v for k, v in os.environ.items() if k != "FASTTRACK_TEST_SPLIT"}
    if split is not None:
        env["FASTTRACK_TEST_SPLIT"] = split
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "-m", "not pending", *AREAS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ids = [line.strip() for line in proc.stdout.splitlines() if "::" in line]
    return proc.returncode, ids, proc.stdout + proc.stderr


def test_the_two_shares_partition_the_suite_in_schedule_order() -> None:
    rc, whole, out = _collect(None)
    assert rc == 0, out
    rc, schedule, out = _collect("schedule")
    assert rc == 0, out
    rc, other, out = _collect("other")
    assert rc == 0, out
    assert not set(schedule) & set(other)
    assert sorted(schedule + other) == sorted(whole)
    # Each share keeps the order of the whole suite (the engine schedule).
    assert schedule == [t for t in whole if t in set(schedule)]
    assert other == [t for t in whole if t in set(other)]
    # Tests that use the session's engines, or stop them to start their own, are on the schedule ...
    assert "tests/checks/test_checks_e2e.py::test_baseline_collection_ran_the_stock_path_at_every_batch" in schedule
    assert "tests/engine/test_e2e_2_failures.py::test_failed_start_reports_the_log_tail" in schedule
    # ... end-to-end tests with engines of their own from the outset, and fast tests, are not.
    assert "tests/executors/test_slurm_e2e.py::test_sharded_validation_through_slurm_merges_and_verifies" in other
    assert any(t.startswith("tests/checks/test_checks_collect_fake.py::") for t in other)
    assert not any(t.startswith("tests/checks/test_checks_collect_fake.py::") for t in schedule)


def test_an_unknown_share_is_a_usage_error_naming_the_variable() -> None:
    rc, _, out = _collect("half")
    assert rc == 4, out  # pytest's exit code for a usage error: nothing ran
    assert "FASTTRACK_TEST_SPLIT='half'" in out and "schedule, other" in out
