"""The perf check's measurement loops: runs of one item on one lifetime, interleaved pairs, drift lifetimes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from fasttrack.engine.errors import EngineCrashed, EngineUnreachable
from fasttrack.perf.analysis import ItemState, look, look_summary
from fasttrack.perf.metrics import RunMetrics
from fasttrack.perf.schedule import LookSchedule
from fasttrack.results import Side
from fasttrack.scope import PerfGate

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineHandle
    from fasttrack.planning.plan import EngineGroup


def gpus_from_args(args: list[str], default: int) -> int:
    """GPUs one engine uses: tensor x pipeline x data parallel sizes from its arguments (``default`` without them)."""

    def last(*names: str) -> int | None:
        val = None
        for i, a in enumerate(args):
            for n in names:
                if a == n and i + 1 < len(args):
                    val = args[i + 1]
                elif a.startswith(n + "="):
                    val = a.split("=", 1)[1]
        try:
            return int(val) if val is not None else None
        except ValueError:
            return None

    tp = last("--tensor-parallel-size", "-tp")
    if tp is None:
        return default
    pp = last("--pipeline-parallel-size", "-pp") or 1
    dp = last("--data-parallel-size", "-dp") or 1
    return tp * pp * dp


def engine_gpus(engine: EngineHandle, group: EngineGroup) -> int:
    """GPUs one engine of ``group`` uses (0 on CPU hosts)."""
    return gpus_from_args(list(engine.args or []), group.gpus) if group.gpus else 0


async def measure_item(
    s: ItemState,
    *,
    side: str,
    lifetime: int,
    looks_here: bool,
    sched: LookSchedule,
    gate: PerfGate,
    run_once: Callable[[int], Awaitable[RunMetrics]],
) -> int:
    """Take the runs of one item on one lifetime (adaptive repetition); returns the number of runs taken.

    Without looks on this lifetime: ``min_runs`` runs. With looks: ``min_runs`` runs,
    then a look after every run until a look is final or ``max_runs`` runs were taken.
    """
    runs_here = 0
    limit = gate.max_runs if looks_here else gate.min_runs
    while runs_here < limit:
        try:
            rm = await run_once(runs_here)
        except (EngineCrashed, EngineUnreachable):
            raise
        except Exception as exc:  # noqa: BLE001 - a harness-side failure is recorded, not raised
            s.errors.append(f"{side} lifetime {lifetime} run {runs_here}: {type(exc).__name__}: {exc}")
            break
        s.add(rm)
        runs_here += 1
        if looks_here and sched.look_after(runs_here) and take_look(s, gate=gate, sched=sched):
            break
    return runs_here


def take_look(s: ItemState, *, gate: PerfGate, sched: LookSchedule) -> bool:
    """One sequential look at the gated metric, once both sides have samples of it; True when it is final."""
    if not (s.has_samples("baseline", gate.gated_metric) and s.has_samples("candidate", gate.gated_metric)):
        return False
    d = look(
        s,
        metric=gate.gated_metric,
        noise_margin=gate.noise_margin,
        confidence=gate.confidence,
        look_no=len(s.looks) + 1,
        planned_looks=sched.planned_looks,
        interval=gate.interval,
    )
    s.looks.append(look_summary(d, s))
    s.decision, s.final = d.decision, d.final
    return d.final


PAIR_ORDERS: tuple[tuple[Side, Side], tuple[Side, Side]] = (("baseline", "candidate"), ("candidate", "baseline"))
"""The two run pairs of an A B B A block."""


def pair_order(k: int, lifetime: int) -> tuple[Side, Side]:
    """The sides of run pair ``k`` on the ``lifetime``-th pair of engines, in time order.

    Runs follow A B B A blocks (pairs 2j and 2j+1 are A B then B A), so within every block both sides
    sit at the same mean time and a host that speeds up or slows down steadily hits both alike; A is
    the baseline on even lifetimes and the candidate on odd ones, so neither side opens every block."""
    return PAIR_ORDERS[(k + lifetime) % 2]


async def measure_pair(
    s: ItemState,
    *,
    lifetime: int,
    looks_here: bool,
    sched: LookSchedule,
    gate: PerfGate,
    run_once: dict[str, Callable[[int], Awaitable[RunMetrics]]],
    between_blocks: Callable[[], None] | None = None,
    before_run: Callable[[str, int], None] | None = None,
) -> dict[str, int]:
    """Interleaved runs of one item on one pair of lifetimes (both engines up); returns runs per side.

    ``between_blocks`` is called before every A B B A block but the first (the engines trade their cores
    there, with ``engine.cpu_pinning.alternate: blocks``); ``before_run(side, k)`` before every run, ahead of
    the settle pause (the engine about to run moves to the measuring cores, with ``alternate: runs``).

    Pair k is one run of each side, back to back, in A B B A blocks (:func:`pair_order`), with
    ``gate.interleave_settle_s`` between consecutive runs (the engine that just ran settles
    before the other one starts).
    Without looks on this pair: ``min_runs`` pairs. With looks: ``min_runs`` pairs, then a
    look after every block (two pairs) until a look is final or ``max_runs`` pairs were taken. A
    harness-side failure ends the item's runs on this pair (recorded); a pair left
    incomplete makes the sides' layouts differ, and the interval then says it was not
    paired.
    """
    s.interleaved = True
    taken = {"baseline": 0, "candidate": 0}
    limit = gate.max_runs if looks_here else gate.min_runs
    settle = gate.interleave_settle_s
    for k in range(limit):
        if between_blocks is not None and k and k % 2 == 0:
            between_blocks()
        for i, side in enumerate(pair_order(k, lifetime)):
            if before_run is not None:
                before_run(side, k)
            if settle and (k or i):
                await asyncio.sleep(settle)
            try:
                rm = await run_once[side](k)
            except (EngineCrashed, EngineUnreachable):
                raise
            except Exception as exc:  # noqa: BLE001 - a harness-side failure is recorded, not raised
                s.errors.append(f"{side} lifetime {lifetime} run {k}: {type(exc).__name__}: {exc}")
                return taken
            s.add(rm)
            taken[side] += 1
        if looks_here and sched.look_after(k + 1) and take_look(s, gate=gate, sched=sched):
            break
    return taken


async def measure_drift(s: ItemState, *, gate: PerfGate, run_once: Callable[[int], Awaitable[RunMetrics]]) -> int:
    """A drift-only lifetime: ``min_runs`` baseline runs kept apart from the gate's data."""
    n = 0
    for k in range(gate.min_runs):
        try:
            s.drift_runs.append(await run_once(k))
        except (EngineCrashed, EngineUnreachable):
            raise
        except Exception as exc:  # noqa: BLE001
            s.errors.append(f"drift lifetime run {k}: {type(exc).__name__}: {exc}")
            break
        n += 1
    return n
