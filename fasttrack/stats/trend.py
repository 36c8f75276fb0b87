"""Drift of an interleaved comparison: a rank test for a trend in the paired differences.

Interleaved, run pair ``k`` is one baseline run and one candidate run taken back to back
(in A B B A blocks), so a host that slows down slows both runs of a pair and cancels in
their ratio. What the pairing cannot cancel is a drift of the *comparison itself*: one
engine warming up or degrading during its lifetime, a cache that fills on one side. That
shows as a trend in the paired differences over time.

The test: ``d_k = log(baseline_k / candidate_k)`` for each run pair (the per-run statistic of
the gated metric), in time order; **Kendall's tau** between ``d_k`` and the pair's position
in time (a rank test, so one outlying pair cannot make a trend), two-sided, with scipy's
exact p-value for small samples. With several lifetime pairs the positions run over all of
them in time order. Drift is flagged at ``p < alpha``. With few pairs the test has little
power (with 4 pairs the smallest possible two-sided p-value is 1/12 = 0.083, so nothing is
flagged at alpha 0.05): a flag means a trend, its absence means little, and the p-value
says how much.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fasttrack.stats._base import StatResult, StatsInputError


class TrendTest(StatResult):
    """Kendall's tau of the paired differences against time."""

    pairs: int
    """Run pairs tested."""
    differences: list[float]
    """log(baseline / candidate) per pair, in time order."""
    tau: float | None
    """Kendall's tau-b (None with fewer than 3 pairs or constant differences)."""
    p_value: float | None
    """Two-sided p-value of tau (None when tau is)."""
    alpha: float
    drifted: bool
    """p_value < alpha: the paired differences trend over time."""
    note: str


def paired_trend_test(baseline: Sequence[float], candidate: Sequence[float], *, alpha: float = 0.05) -> TrendTest:
    """Kendall's tau trend test on ``log(baseline_k / candidate_k)`` in the given (time) order."""
    from scipy import stats as _sps

    if len(baseline) != len(candidate):
        raise StatsInputError(
            f"paired_trend_test needs one candidate value per baseline value ({len(baseline)} vs {len(candidate)})"
        )
    if not 0 < alpha < 1:
        raise StatsInputError(f"alpha must lie in (0, 1), got {alpha!r}")
    diffs = []
    for b, c in zip(baseline, candidate, strict=True):
        if not (b > 0 and c > 0 and math.isfinite(b) and math.isfinite(c)):
            raise StatsInputError(f"paired values must be finite and positive, got {b!r} and {c!r}")
        diffs.append(math.log(b / c))
    tau: float | None = None
    p: float | None = None
    note = "Kendall's tau of log(baseline/candidate) per run pair against its position in time, two-sided"
    if len(diffs) < 3:
        note += f"; {len(diffs)} pair(s): too few to test"
    elif len(set(diffs)) == 1:
        note += "; the differences are all equal: no trend"
    else:
        res = _sps.kendalltau(list(range(len(diffs))), diffs)
        tau, p = float(res.statistic), float(res.pvalue)
        if not (math.isfinite(tau) and math.isfinite(p)):
            tau, p = None, None
    return TrendTest(
        name="trend of the paired differences log(baseline/candidate) over time",
        method="Kendall's tau-b (scipy.stats.kendalltau: exact p-value for small samples without ties)",
        pairs=len(diffs),
        differences=diffs,
        tau=tau,
        p_value=p,
        alpha=alpha,
        drifted=bool(p is not None and p < alpha),
        note=note,
    )


__all__ = ["TrendTest", "paired_trend_test"]
