"""The suite's two shares (``FASTTRACK_TEST_SPLIT``, run side by side by ``scripts/test.sh``):
together they are the whole suite, each test in exactly one, in the engine schedule's order."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AREAS = [
    "tests/executors",
    "tests/checks",
    "tests/engine",
    "tests/kernels/test_kernels_check.py",
    "tests/security/test_cli_inputs.py",
]
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
    rc, scheduled, out = _collect("schedule")
    assert rc == 0, out
    rc, other, out = _collect("other")
    assert rc == 0, out
    assert not set(scheduled) & set(other)
    assert sorted(scheduled + other) == sorted(whole)
    # The scheduled share keeps the order of the whole suite (the engine schedule), then runs the fast
    # tests of its tail (SCHEDULE_TAIL: the kernel and security tests here), which no other share runs ...
    from sidebyside import SCHEDULE_TAIL

    tail = [t for t in scheduled if t.startswith(SCHEDULE_TAIL)]
    assert {t.split("/")[1] for t in tail} == {"kernels", "security"}
    assert scheduled[-len(tail) :] == tail and not any(t.startswith(SCHEDULE_TAIL) for t in other)
    engine_part = scheduled[: -len(tail)]
    assert engine_part == [t for t in whole if t in set(engine_part)]
    # ... but the other share runs its end-to-end tests first (then its fast tests), each part in that order
    slurm = "tests/executors/test_slurm_e2e.py::test_sharded_validation_through_slurm_merges_and_verifies"
    fast = [t for t in other if t.startswith("tests/checks/test_checks_collect_fake.py::")]
    assert other.index(slurm) < other.index(fast[0])
    # Tests on the engine schedule (the session's engines, then those that end them or start their own) ...
    assert "tests/checks/test_checks_e2e.py::test_baseline_collection_ran_the_stock_path_at_every_batch" in scheduled
    assert "tests/engine/test_e2e_2_failures.py::test_killed_engine_core_is_reported_as_a_crash" in scheduled
    # ... end-to-end tests with engines of their own from the outset, and fast tests, are the other share.
    assert "tests/executors/test_slurm_e2e.py::test_sharded_validation_through_slurm_merges_and_verifies" in other
    assert any(t.startswith("tests/checks/test_checks_collect_fake.py::") for t in other)
    assert not any(t.startswith("tests/checks/test_checks_collect_fake.py::") for t in scheduled)


def test_an_unknown_share_is_a_usage_error_naming_the_variable() -> None:
    rc, _, out = _collect("half")
    assert rc == 4, out  # pytest's exit code for a usage error: nothing ran
    assert "FASTTRACK_TEST_SPLIT='half'" in out and "schedule, other" in out


def _plugin(monkeypatch, tmp_path: Path, split: str):
    import sidebyside

    monkeypatch.setenv("FASTTRACK_TEST_SPLIT", split)
    monkeypatch.setenv("FASTTRACK_QUIET_FILE", str(tmp_path / "quiet"))
    return sidebyside, sidebyside.SideBySide()


def test_the_scheduled_process_opens_the_quiet_window_for_the_pair_phase_only(monkeypatch, tmp_path: Path) -> None:
    sidebyside, plugin = _plugin(monkeypatch, tmp_path, "schedule")
    from demo_engines import ENGINE_SCHEDULE

    phases = {"b": "baseline", "p1": "pair", "p2": "pair", "c": "candidate", "o": "own"}
    monkeypatch.setattr(sidebyside, "_engine_phase", lambda item: ENGINE_SCHEDULE.index(phases[item.nodeid]))
    quiet = tmp_path / "quiet"

    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    states = []
    for nodeid in ["b", "p1", "p2", "c", "o"]:
        plugin.pytest_runtest_protocol(Item(nodeid))
        states.append(quiet.read_text().strip() if quiet.exists() else None)
    assert states == [None, "open", "open", "closed", "closed"]


def test_a_session_that_ends_in_the_window_closes_it(monkeypatch, tmp_path: Path) -> None:
    _, plugin = _plugin(monkeypatch, tmp_path, "schedule")
    plugin._write("open")
    plugin.pytest_sessionfinish()
    assert (tmp_path / "quiet").read_text().strip() == "closed"


def test_the_other_process_waits_while_the_window_is_open(monkeypatch, tmp_path: Path) -> None:
    import threading

    _, plugin = _plugin(monkeypatch, tmp_path, "other")
    quiet = tmp_path / "quiet"
    quiet.write_text("open\n")
    timer = threading.Timer(1.5, lambda: quiet.write_text("closed\n"))
    timer.start()
    try:
        t0 = time.monotonic()
        plugin.pytest_runtest_protocol(type("Item", (), {"nodeid": "tests/x.py::t"})())
        waited = time.monotonic() - t0
    finally:
        timer.cancel()
    assert 1.4 <= waited < 10 and plugin.waited_s >= 1.4
    # a closed window (or none) does not wait
    t0 = time.monotonic()
    plugin.pytest_runtest_protocol(type("Item", (), {"nodeid": "tests/x.py::u"})())
    assert time.monotonic() - t0 < 1


def test_an_engine_tied_to_a_phase_stops_when_a_later_phase_starts(tmp_path: Path) -> None:
    """Stock's eager build (the ``reference`` phase) stays up next to the baseline while its tests run and stops
    before the first ``pair`` test (the perf pairs time the baseline and the candidate); the candidate next to the
    baseline, tied to no phase, stays up; a test of no phase ends nothing."""
    from demo_engines import ENGINE_SCHEDULE, EngineSlot

    class Engine:
        running = True

        def stop(self) -> None:
            self.running = False

    slot = EngineSlot(tmp_path)
    slot._start = lambda key, **kw: Engine()  # type: ignore[method-assign]
    base = slot.acquire("baseline", side="baseline", model=tmp_path, args=[])
    eager = slot.acquire_also("reference-eager", side="baseline", model=tmp_path, args=["-e"], phase="reference")
    cand = slot.acquire_also("candidate", side="candidate", model=tmp_path, args=[])
    for phase in (-1, ENGINE_SCHEDULE.index("baseline"), ENGINE_SCHEDULE.index("reference")):
        slot.end_phases_before(phase)
        assert (
            eager.running
            and slot.acquire_also("reference-eager", side="baseline", model=tmp_path, args=["-e"], phase="reference")
            is eager
        )
    slot.end_phases_before(ENGINE_SCHEDULE.index("pair"))
    assert not eager.running and cand.running and base.running and list(slot.extras) == ["candidate"]
    assert not slot.extra_phases
