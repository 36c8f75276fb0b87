"""Equal-resources check: per-GPU normalisation when the sides used different GPU counts.

A comparison is like-for-like only when both sides ran on the same number of GPUs.
Otherwise it is flagged and a per-GPU speedup is reported next to the raw one::

    normalized_speedup = speedup * baseline_gpus / candidate_gpus

(the interval ends are scaled by the same constant, which is exact). For whole-engine
throughput this is the ratio of tokens/s per GPU. For latency and per-user metrics
(TPOT, interactivity) it is a cost-efficiency view (speedup per unit of hardware),
not a latency: a candidate on twice the GPUs must be more than twice as fast to
reach a normalized speedup above 1.
"""

from __future__ import annotations

import math

from fasttrack.stats._base import StatResult, StatsInputError
from fasttrack.stats.hierarchical import RatioEstimate


class ResourceNormalization(StatResult):
    """Raw and per-GPU speedup of one metric."""

    metric: str
    baseline_gpus: int
    candidate_gpus: int
    equal_resources: bool
    """Both sides used the same number of GPUs."""
    flagged: bool
    """Not like-for-like: judge the normalized figures."""
    factor: float
    """baseline_gpus / candidate_gpus."""
    confidence: float | None
    """Level of the interval (None for a bare point figure such as a published claim)."""
    speedup: float
    ci_low: float | None
    ci_high: float | None
    normalized_speedup: float
    normalized_ci_low: float | None
    normalized_ci_high: float | None
    note: str


def normalize_per_gpu(estimate: RatioEstimate, *, baseline_gpus: int, candidate_gpus: int) -> ResourceNormalization:
    """Flag unequal GPU counts and scale the speedup and its interval by baseline_gpus / candidate_gpus."""
    return _normalize(
        name=f"per-GPU {estimate.name}",
        metric=estimate.metric,
        speedup=estimate.speedup,
        ci=(estimate.ci_low, estimate.ci_high),
        confidence=estimate.confidence,
        baseline_gpus=baseline_gpus,
        candidate_gpus=candidate_gpus,
    )


def normalize_speedup_per_gpu(
    speedup: float, *, baseline_gpus: int, candidate_gpus: int, metric: str = ""
) -> ResourceNormalization:
    """Same for a bare speedup without an interval (e.g. a published claim such as 403.2 / 223.7 on 16 vs 8 GPUs)."""
    if not (isinstance(speedup, (int, float)) and math.isfinite(speedup) and speedup > 0):
        raise StatsInputError(f"speedup must be a finite positive number, got {speedup!r}.")
    return _normalize(
        name=f"per-GPU speedup of {metric or 'a metric'}",
        metric=metric,
        speedup=float(speedup),
        ci=None,
        confidence=None,
        baseline_gpus=baseline_gpus,
        candidate_gpus=candidate_gpus,
    )


def _normalize(
    *,
    name: str,
    metric: str,
    speedup: float,
    ci: tuple[float, float] | None,
    confidence: float | None,
    baseline_gpus: int,
    candidate_gpus: int,
) -> ResourceNormalization:
    for what, n in (("baseline_gpus", baseline_gpus), ("candidate_gpus", candidate_gpus)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise StatsInputError(f"{what} must be a positive integer, got {n!r}.")
    f = baseline_gpus / candidate_gpus
    equal = baseline_gpus == candidate_gpus
    note = (
        "equal resources: the raw speedup is the comparison"
        if equal
        else (
            f"unequal resources ({candidate_gpus} GPUs candidate vs {baseline_gpus} baseline): the raw speedup is "
            "not like-for-like; the normalized speedup is per GPU"
        )
    )
    return ResourceNormalization(
        name=name,
        method="speedup (and interval ends) multiplied by baseline_gpus / candidate_gpus",
        metric=metric,
        baseline_gpus=baseline_gpus,
        candidate_gpus=candidate_gpus,
        equal_resources=equal,
        flagged=not equal,
        factor=f,
        confidence=confidence,
        speedup=speedup,
        ci_low=ci[0] if ci else None,
        ci_high=ci[1] if ci else None,
        normalized_speedup=speedup * f,
        normalized_ci_low=ci[0] * f if ci else None,
        normalized_ci_high=ci[1] * f if ci else None,
        note=note,
    )
