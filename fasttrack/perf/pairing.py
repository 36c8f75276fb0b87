"""Interleaved run pairs in time order, and the drift test on their paired differences.

Interleaved (``gates.perf.interleave``), run ``k`` of each side on lifetime pair ``i`` is one
run pair, taken back to back in A B B A blocks. The drift test of such a point is a rank
test on the paired differences (:func:`fasttrack.stats.paired_trend_test`: Kendall's tau of
``log(baseline_k / candidate_k)`` against the pairs' order in time, two-sided), reported
with its p-value in the ``drift`` table; it is not gated. A point measured one engine at a
time keeps the baseline-before/after test (``fasttrack.perf.analysis.drift_row``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fasttrack.perf.analysis import ItemState
from fasttrack.perf.metrics import METRICS
from fasttrack.stats import StatsInputError, paired_trend_test, parse_statistic


def run_pairs(state: ItemState, metric: str) -> list[tuple[float, float, float]]:
    """(start time, baseline run value, candidate run value) of every complete run pair with samples, in time
    order (a run's value: the metric's statistic over that run's samples)."""
    md = METRICS[metric]
    reduce = parse_statistic(md.statistic)
    out = []
    for lt in sorted(set(state.runs["baseline"]) & set(state.runs["candidate"])):
        by_run = {sd: {r.run: r for r in state.runs[sd][lt]} for sd in ("baseline", "candidate")}
        for k in sorted(set(by_run["baseline"]) & set(by_run["candidate"])):
            b, c = by_run["baseline"][k], by_run["candidate"][k]
            sb, sc = md.samples(b), md.samples(c)
            if sb is None or sc is None:
                continue
            vb = float(reduce(np.asarray([sb], dtype=float).reshape(1, -1))[0])
            vc = float(reduce(np.asarray([sc], dtype=float).reshape(1, -1))[0])
            starts = [x for x in (b.started_at, c.started_at) if x is not None]
            out.append((min(starts) if starts else float(lt * 10_000 + k), vb, vc))
    return sorted(out, key=lambda x: x[0])


def trend_row(state: ItemState, *, metric: str, alpha: float) -> dict[str, Any] | None:
    """The paired-difference drift test of one interleaved item (None when it was not interleaved)."""
    if not state.interleaved:
        return None
    pairs = run_pairs(state, metric)
    if not pairs:
        return None
    md = METRICS[metric]
    # a latency's paired difference is log(baseline / candidate); a throughput's log(candidate / baseline)
    b = [p[1] for p in pairs]
    c = [p[2] for p in pairs]
    if md.direction == "higher_is_better":
        b, c = c, b
    try:
        t = paired_trend_test(b, c, alpha=alpha)
    except StatsInputError:
        return None
    return {
        "workload": state.item.workload,
        "point": state.item.point,
        "metric": metric,
        "test": "paired_trend",
        "method": t.method,
        "statement": t.note,
        "pairs": t.pairs,
        "differences": t.differences,
        "tau": t.tau,
        "p_value": t.p_value,
        "alpha": t.alpha,
        "trend_drifted": t.drifted,
        "drifted": False,
    }
