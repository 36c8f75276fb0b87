"""Drift detection for a baseline - candidate - baseline measurement order.

If the machine changes while a comparison runs (thermal throttling, a noisy
neighbour, a clock change), the two baseline blocks measured before and after the
candidate differ. The statistic is the ratio of the second baseline block to the
first (of the same summary statistic, e.g. median TPOT) with the same hierarchical
bootstrap the perf gate uses; drift is flagged when the interval excludes the band
``[1 - tolerance, 1 + tolerance]``.

A Mann-Whitney U test (two-sided, scipy's default method) on the per-run summaries
of the two blocks is reported next to it. It treats runs as independent, which they
are not within one engine lifetime; it is context, not the decision.

Caveat: with one engine lifetime per block, the interval covers run-to-run noise
only, so ordinary lifetime-to-lifetime variation (up to 40% on the 2-core hosts)
also reads as drift. Only with several lifetimes per block does a flag mean the
machine changed beyond the usual restart-to-restart variation.
"""

from __future__ import annotations

from scipy import stats as _sps

from fasttrack import attrs
from fasttrack.stats._base import StatResult, StatsInputError
from fasttrack.stats.hierarchical import hierarchical_ratio_bootstrap
from fasttrack.stats.nested import SideSamples


class DriftCheck(StatResult):
    """Do the two baseline blocks of a B-C-B order agree?"""

    metric: str
    summary_statistic: str
    confidence: float
    first_value: float
    """Statistic of the first baseline block."""
    second_value: float
    """Statistic of the second baseline block."""
    ratio: float
    """second / first."""
    ci_low: float
    ci_high: float
    tolerance: float
    """Half-width of the band around 1 that is not called drift."""
    drifted: bool
    """The interval of the ratio lies entirely outside [1 - tolerance, 1 + tolerance]."""
    mannwhitney_u: float
    mannwhitney_p: float
    """Two-sided p-value of the rank test on per-run summaries (runs treated as independent)."""
    first_run_values: list[float]
    second_run_values: list[float]
    ignores_lifetime_variance: bool
    n_boot: int | None
    seed: int | None


def detect_drift(
    first: SideSamples,
    second: SideSamples,
    *,
    metric: str,
    statistic: str = "median",
    confidence: float = 0.95,
    tolerance: float = 0.0,
    n_boot: int = 4000,
    seed: int = 0,
) -> DriftCheck:
    """Compare the baseline block before the candidate (``first``) with the one after (``second``).

    Both blocks use the nested layout of :func:`hierarchical_ratio_bootstrap`
    (lifetime -> run -> samples). ``drifted`` iff the hierarchical-bootstrap interval
    of second/first lies above ``1 + tolerance`` or below ``1 - tolerance``.
    """
    if not (0.0 <= tolerance < 1.0):
        raise StatsInputError(f"tolerance must be in [0, 1), got {tolerance!r}.")
    est = hierarchical_ratio_bootstrap(
        first,
        second,
        metric=metric,
        direction="higher_is_better",
        statistic=statistic,
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
        include_raw=False,
    )
    a = [v for lt in est.baseline.run_values for v in lt]
    b = [v for lt in est.candidate.run_values for v in lt]
    if len(a) >= 1 and len(b) >= 1 and (len(set(a)) > 1 or len(set(b)) > 1 or a[0] != b[0]):
        mw = _sps.mannwhitneyu(a, b, alternative="two-sided")
        u, p = float(mw.statistic), float(mw.pvalue)
    else:
        u, p = float("nan"), 1.0
    drifted = bool(est.ci_low > 1.0 + tolerance or est.ci_high < 1.0 - tolerance)
    return DriftCheck(
        name=f"ratio of {est.summary_statistic} {metric}, second baseline block over first",
        method=est.method + "; plus Mann-Whitney U on per-run summaries",
        metric=metric,
        **attrs(est, "summary_statistic", "confidence", "ratio", "ci_low", "ci_high", "ignores_lifetime_variance"),
        first_value=est.baseline.value,
        second_value=est.candidate.value,
        tolerance=tolerance,
        drifted=drifted,
        mannwhitney_u=u,
        mannwhitney_p=p,
        first_run_values=[float(x) for x in a],
        second_run_values=[float(x) for x in b],
        n_boot=est.n_boot,
        seed=est.seed,
    )


__all__ = ["DriftCheck", "detect_drift"]
