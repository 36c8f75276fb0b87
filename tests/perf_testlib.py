"""The perf check on synthetic runs, without engines: a fake run's metrics, the demo scope's run
context, and a driver of the check's adaptive loop as the pipeline drives it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping
from pathlib import Path

import numpy as np

from fasttrack.checks.base import RunContext, build_run_plan
from fasttrack.checks.perf import PerfCheck, measure_item
from fasttrack.perf.analysis import ItemState
from fasttrack.perf.metrics import METRICS, RunMetrics
from fasttrack.perf.schedule import LookSchedule
from fasttrack.perf.slo import with_goodput
from fasttrack.perf.workloads import WorkItem
from fasttrack.scope import PerfGate, load_scope
from fasttrack.stats.lifetime import LifetimeVariance

SLOW_FACTOR = 4.0
"""The synthetic slow batch's slowdown (the demo's ``slow-batch`` defect is 4-10x)."""

TEST_VARIANCE = LifetimeVariance(
    between_var_log=0.01**2, within_var_log=0.03**2, runs_per_lifetime=4, df=20, source="the tests' calibration"
)
"""A calibrated lifetime variance (1% between lifetimes), as a calibration record gives one: the synthetic runs'
own lifetimes differ by less unless a test says otherwise, so a point with one lifetime per side is judged."""


def calibrate(state: ItemState, variance: LifetimeVariance | None = TEST_VARIANCE) -> None:
    """Give ``state`` a calibrated lifetime variance for every metric (``None``: leave it uncalibrated)."""
    if variance is not None:
        for m in METRICS:
            state.variance.setdefault(m, variance)


def fake_run(
    item: WorkItem,
    side: str,
    lifetime: int,
    run: int,
    *,
    tpot: float,
    rng: np.random.Generator,
    sd: float = 0.03,
    n: int = 24,
    failed: int = 0,
    gpus: int = 0,
    engine_timed: bool = True,
    client_factor: float = 1.0,
    burst: int = 0,
) -> RunMetrics:
    """One run's metrics: TPOT samples around ``tpot`` (engine-timed ones 2% lower); the client-timed
    samples scaled by ``client_factor``, and ``burst`` requests counted as delivered in one chunk."""
    samples = list(tpot * np.exp(rng.normal(0, sd, n)))
    engine = [x * 0.98 for x in samples] if engine_timed else []
    thr = 1000.0 / tpot * (item.batch or 1)
    return RunMetrics(
        workload=item.workload,
        point=item.point,
        side=side,
        lifetime=lifetime,
        run=run,
        requests=n + failed,
        failed=failed,
        errors=[f"r{k}: HTTP 500: boom" for k in range(failed)],
        duration_s=1.0,
        prompt_tokens=0,
        output_tokens=64 * n,
        output_throughput=thr,
        decode_throughput=thr,
        per_gpu_throughput=None,
        gpus=gpus,
        ttft_ms=[10.0] * n,
        tpot_ms=[x * client_factor for x in samples],
        itl_ms=[x * client_factor for x in samples],
        e2e_ms=[100.0] * n,
        engine_tpot_ms=engine,
        percentiles={},
        client_cpu_s=0.01,
        client_cpu_us_per_token=50.0,
        content_chunks=64 * n,
        burst_delivered=burst,
        itl_counts=[1] * n,
        timed_output_tokens=[64] * n,
    )


DECODE_ONLY_SMOKE = {
    "    workloads: [decode, sweep]\n    lifetimes_per_side: 1": "    workloads: [decode]\n    lifetimes_per_side: 1"
}
"""The swap of the demo scope's text that makes its smoke tier the one :func:`demo_perf_ctx` measures by default
(the decode workload only): a bundle recording the perf check's tables of that context records this scope."""


def demo_perf_ctx(tier: str, tmp: Path, *, interleave: bool = False, workloads: list[str] | None = None) -> RunContext:
    """The demo scope's context; one engine at a time unless ``interleave`` (the demo scope interleaves).
    ``workloads``: the tier's perf workloads (default: the smoke tier's pure-decode points only, its ten config
    points, as the perf end-to-end test measures them; every workload of the other tiers)."""
    loaded = load_scope("demo-llama")
    scope = loaded.scope.model_copy(deep=True)
    scope.gates.perf.interleave = interleave
    scope.gates.perf.interleave_settle_s = 0.0
    if workloads is not None or tier == "smoke":
        scope.tiers[tier].workloads = workloads or ["decode"]
    plan = build_run_plan(scope, tier=tier, scope_sha256=loaded.sha256)
    return RunContext(scope=scope, plan=plan, run_dir=tmp, loaded=loaded, log=lambda m: None)


def measure(
    state: ItemState,
    sched: LookSchedule,
    gate: PerfGate,
    side: str,
    lifetime: int,
    run_once: Callable[[int], Awaitable[RunMetrics]],
) -> int:
    """One lifetime's runs of one point, as the check measures them (looking where the schedule allows), the
    point calibrated with :data:`TEST_VARIANCE` unless it has a variance of its own; how many runs it made."""
    calibrate(state)
    return asyncio.run(
        measure_item(
            state,
            side=side,
            lifetime=lifetime,
            looks_here=sched.looks_allowed(side, lifetime),
            sched=sched,
            gate=gate,
            run_once=run_once,
        )
    )


def simulate(
    chk: PerfCheck,
    ctx: RunContext,
    *,
    slow_batch: int | None,
    lifetime_effect: float = 0.0,
    engine_timed: tuple[str, ...] = ("baseline", "candidate"),
    client: Mapping[int, tuple[float, int]] | None = None,
    factor: Mapping[int, float] | None = None,
    keys: Collection[str] | None = None,
    sides: tuple[str, ...] = ("baseline", "candidate"),
) -> None:
    """Drive the check's adaptive loop as the pipeline would, with synthetic runs instead of engines.

    ``slow_batch``: the candidate is :data:`SLOW_FACTOR` slower at that batch. ``client``: batch ->
    (speedup, burst): at that batch the candidate's client-timed TPOT reads ``speedup`` x faster than
    the engine-timed one, and each of its runs counts ``burst`` requests delivered in one chunk. ``factor``:
    batch -> the candidate's TPOT there over the baseline's (e.g. 1.3: 30% slower). ``keys``: only these items
    are measured; ``sides``: only these sides' lifetimes run (a run stopped part way)."""
    gate = ctx.scope.gates.perf
    rng = np.random.default_rng(0)
    for group in ctx.plan.groups:
        sched = chk.state.schedules[group.id]
        counts = {"baseline": 0, "candidate": 0}
        for side in group.order:
            lt = counts[side]
            counts[side] += 1
            if side not in sides:
                continue
            shift = float(np.exp(rng.normal(0, lifetime_effect))) if lifetime_effect else 1.0
            for s in chk.state.items.values():
                if s.item.group != group.id or s.final or (keys is not None and s.item.key not in keys):
                    continue
                base = 1.0 + 0.3 * (s.item.batch or 1)
                slow = side == "candidate" and slow_batch is not None and s.item.batch == slow_batch
                tpot = base * shift * (SLOW_FACTOR if slow else 1.0)
                if side == "candidate" and factor:
                    tpot *= factor.get(s.item.batch or 0, 1.0)
                speedup, burst = (client or {}).get(s.item.batch or 0, (1.0, 0)) if side == "candidate" else (1.0, 0)

                async def run_once(
                    k: int, s=s, side=side, lt=lt, tpot=tpot, f=1.0 / speedup, burst=burst
                ) -> RunMetrics:
                    return with_goodput(
                        fake_run(
                            s.item,
                            side,
                            lt,
                            k,
                            tpot=tpot,
                            rng=rng,
                            engine_timed=side in engine_timed,
                            client_factor=f,
                            burst=burst,
                        ),
                        gate.slo,
                    )

                s.gpus[side] = 0
                measure(s, sched, gate, side, lt, run_once)
