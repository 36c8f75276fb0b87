"""The B-C-B drift check of the perf gate: the baseline before a candidate lifetime against the baseline after it."""

from __future__ import annotations

from typing import Any

from fasttrack.perf.analysis import N_BOOT, ItemState, seed_for
from fasttrack.perf.metrics import METRICS
from fasttrack.stats import detect_drift


def drift_row(state: ItemState, *, metric: str, confidence: float, tolerance: float) -> dict[str, Any] | None:
    """B-C-B drift: the baseline before the first candidate lifetime vs the baseline after it.

    With a drift-only lifetime (a trailing extra baseline), every gate baseline lifetime is the first
    block and the drift lifetime the second; otherwise the first baseline lifetime is the first block
    and the later ones the second (both need data)."""
    lts = state.lifetimes("baseline")
    if not state.lifetimes("candidate") or not lts:
        return None
    md = METRICS[metric]
    if state.drift_runs:
        first_lts = lts
        first = state.nested("baseline", metric, lifetimes=lts)
        second = [runs] if (runs := [s for r in state.drift_runs if (s := md.samples(r)) is not None]) else []
        second_lts = sorted({r.lifetime for r in state.drift_runs})
    elif len(lts) >= 2:
        first_lts, second_lts = lts[:1], lts[1:]
        first = state.nested("baseline", metric, lifetimes=first_lts)
        second = state.nested("baseline", metric, lifetimes=second_lts)
    else:
        return None
    if not first or not second:
        return None
    d = detect_drift(
        first,
        second,
        metric=metric,
        statistic=md.statistic,
        confidence=confidence,
        tolerance=tolerance,
        n_boot=N_BOOT,
        seed=seed_for(state.item.key, "drift"),
    )
    return {
        "workload": state.item.workload,
        "point": state.item.point,
        "metric": metric,
        "first_lifetimes": first_lts,
        "second_lifetimes": second_lts,
        "first_value": md.display(d.first_value),
        "second_value": md.display(d.second_value),
        "ratio": d.ratio,
        "ci_low": d.ci_low,
        "ci_high": d.ci_high,
        "confidence": d.confidence,
        "tolerance": d.tolerance,
        "drifted": d.drifted,
        "mannwhitney_p": d.mannwhitney_p,
        "ignores_lifetime_variance": d.ignores_lifetime_variance,
        "method": d.method,
    }
