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
    other_half,
    pair_cpus,
    parse_cpu_list,
    pinned,
    pinning_env,
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
    code = (
        "import threading, time\n"
        "for _ in range(3):\n"
        "    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "time.sleep(30)"
    )
    procs = []
    try:
        for cpu in (CPUS[0], CPUS[-1]):
            with pinned([cpu]):
                procs.append(subprocess.Popen([sys.executable, "-c", code]))
        time.sleep(0.5)
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
