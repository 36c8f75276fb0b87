"""Core pinning of engines that are up together: the split, the alternation, the inherited mask, and moving a
running process's threads."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from fasttrack.engine.pinning import (
    format_cpu_list,
    measuring_half,
    other_half,
    pair_cpus,
    parse_cpu_list,
    pinned,
    pinning_env,
    place,
    process_cpus,
    split_halves,
    swap_cpus,
)

CPUS = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(CPUS) < 2, reason="needs two usable cores")


def test_cpu_lists() -> None:
    assert parse_cpu_list("0-3,8, 10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    for bad in ("", "a", "3-1", "1-", "-2"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


def test_halves_are_disjoint_and_contiguous() -> None:
    assert split_halves([0, 1]) == ([0], [1])
    assert split_halves([5, 1, 2, 3, 4]) == ([1, 2, 3], [4, 5])
    assert split_halves([7]) is None


@needs_two
def test_the_sides_trade_halves_every_lifetime() -> None:
    a, b = split_halves(CPUS)  # type: ignore[misc]
    assert pair_cpus("baseline", 0) == a and pair_cpus("candidate", 0) == b
    assert pair_cpus("baseline", 1) == b and pair_cpus("candidate", 1) == a
    assert pair_cpus("baseline", 1, alternate=False) == a
    assert other_half(a) == b and other_half(CPUS) is None
    # a configured core list limits the split to the cores this process may use
    assert pair_cpus("baseline", 0, cores=format_cpu_list(CPUS[:2])) == [CPUS[0]]
    assert pair_cpus("baseline", 0, cores="100000") is None


def test_a_pinned_cpu_engine_binds_inside_its_mask() -> None:
    assert pinning_env([1], {}, cpu_device=True) == {"VLLM_CPU_OMP_THREADS_BIND": "auto"}
    assert pinning_env([1], {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}, cpu_device=True) == {}
    assert pinning_env([1], {}, cpu_device=False) == {} and pinning_env(None, {}, cpu_device=True) == {}


def _child_mask() -> list[int]:
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"], capture_output=True, text=True
    )
    return eval(out.stdout)  # noqa: S307 - our own child's list of ints


@needs_two
def test_processes_started_inside_pinned_inherit_the_cores() -> None:
    before = os.sched_getaffinity(0)
    with pinned([CPUS[-1]]):
        assert _child_mask() == [CPUS[-1]]
    assert os.sched_getaffinity(0) == before, "the calling thread's mask is restored"
    assert _child_mask() == CPUS
    with pinned(None):
        assert _child_mask() == CPUS


@needs_two
def test_two_running_engines_trade_cores_thread_by_thread() -> None:
    procs = []
    try:
        procs = _sleepers([CPUS[0], CPUS[-1]])
        now = swap_cpus([procs[0].pid], [procs[1].pid])
        assert now == ([CPUS[-1]], [CPUS[0]])
        for p, want in zip(procs, ([CPUS[-1]], [CPUS[0]]), strict=True):
            tids = os.listdir(f"/proc/{p.pid}/task")
            assert len(tids) >= 4 and all(sorted(os.sched_getaffinity(int(t))) == want for t in tids)
        assert process_cpus(procs[0].pid) == [CPUS[-1]]
        assert swap_cpus([procs[0].pid], [procs[0].pid]) is None, "not disjoint: nothing to trade"
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _sleepers(cpus: list[int]) -> list[subprocess.Popen]:
    """One process with four threads per core of ``cpus``, each started pinned to its core."""
    code = (
        "import threading, time\n"
        "for _ in range(3):\n"
        "    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "time.sleep(30)"
    )
    procs = []
    for cpu in cpus:
        with pinned([cpu]):
            procs.append(subprocess.Popen([sys.executable, "-c", code]))
    _wait_for_threads(procs)
    return procs


def _wait_for_threads(procs: list[subprocess.Popen], n: int = 4, timeout: float = 60.0) -> None:
    """Until each child runs its ``n`` threads (a loaded host can take seconds to start Python)."""
    t0 = time.monotonic()
    while any(len(os.listdir(f"/proc/{p.pid}/task")) < n for p in procs):
        assert time.monotonic() - t0 < timeout, "the child processes did not start their threads"
        time.sleep(0.05)


def _threads_on(pid: int) -> set[tuple[int, ...]]:
    return {tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir(f"/proc/{pid}/task")}


@needs_two
def test_the_engine_about_to_run_moves_to_the_measuring_half() -> None:
    a, b = split_halves(CPUS)  # type: ignore[misc]
    # the measuring half alternates between A B B A blocks
    assert measuring_half(0) == (a, b) and measuring_half(1) == (b, a) and measuring_half(2) == (a, b)
    assert measuring_half(0, cores=str(CPUS[0])) is None, "one core: nothing to split"
    procs = _sleepers([a[0], b[0]])
    try:
        base, cand = procs[0].pid, procs[1].pid
        # the candidate (on the other half) is about to run: it moves to the measuring half, the baseline off it
        assert place([cand], [base], a, b) >= 8
        assert _threads_on(cand) == {tuple(a)} and _threads_on(base) == {tuple(b)}
        assert place([cand], [base], a, b) == 0, "already there: nothing moves"
        # and back for the baseline's run
        assert place([base], [cand], a, b) >= 8
        assert _threads_on(base) == {tuple(a)} and _threads_on(cand) == {tuple(b)}
        assert place([base], [cand], a, a) == 0, "overlapping halves: nothing moves"
    finally:
        for p in procs:
            p.kill()
            p.wait()


@needs_two
def test_the_perf_check_puts_every_run_on_the_measuring_half(tmp_path) -> None:
    """``engine.cpu_pinning.alternate: runs``: the check's hook moves the engine about to run onto the measuring
    half before each run of an A B B A block (the half alternating between blocks) and counts the moves."""
    from perf_testlib import demo_perf_ctx

    from fasttrack.checks.perf import PerfCheck

    ctx = demo_perf_ctx("smoke", tmp_path, interleave=True)
    ctx.scope.engine.cpu_pinning.alternate = "runs"
    a, b = split_halves(CPUS)  # type: ignore[misc]
    procs = _sleepers([a[0], b[0]])

    class Engine:
        def __init__(self, pid: int) -> None:
            self.pid = pid

        def group_pids(self) -> list[int]:
            return [self.pid]

    try:
        engines = {"baseline": Engine(procs[0].pid), "candidate": Engine(procs[1].pid)}
        record: dict = {}
        before_run = PerfCheck._core_placer(ctx, engines, record)  # type: ignore[arg-type]
        assert before_run is not None and record == {"core_moves": 0}
        where = []
        for k, side in [(0, "baseline"), (0, "candidate"), (1, "candidate"), (1, "baseline"), (2, "baseline")]:
            before_run(side, k)
            other = engines["candidate" if side == "baseline" else "baseline"].pid
            where.append((_threads_on(engines[side].pid), _threads_on(other)))
        half = {0: a, 1: a, 2: b}  # blocks 0 (pairs 0, 1) and 1 (pair 2)
        ks = [0, 0, 1, 1, 2]
        assert where == [({tuple(half[k])}, {tuple(b if half[k] == a else a)}) for k in ks]
        # the baseline sat on the measuring half already; then the candidate, the baseline, and block 1's half
        assert record["core_moves"] == 3 and record["measuring_cores"] == b
        ctx.scope.engine.cpu_pinning.alternate = "blocks"
        assert PerfCheck._core_placer(ctx, engines, {}) is None
    finally:
        for p in procs:
            p.kill()
            p.wait()
