"""The performance gate: no regression per point, intersection-union over points,
and sequential (adaptive) repetition.

Per point the rule is a non-inferiority test on the speedup:

* **pass** iff the lower end of the two-sided ``confidence`` interval of the speedup
  is at least ``1 - noise_margin`` (a one-sided test at level ``(1 - confidence)/2``
  of H0: speedup < 1 - noise_margin);
* **strictly better** (reported, or required by a scope) iff the lower end of the interval at the
  family-wise level exceeds 1: the level is Bonferroni-corrected over the run's points as well (the
  caller passes that bound), so a no-op candidate is strictly better at some point of a run with
  probability at most ``(1 - confidence) / 2``;
* **inconclusive** when the interval covers no lifetime-to-lifetime variance (one engine lifetime on a
  side and no calibration for the point, :mod:`fasttrack.stats.lifetime`): such a point neither passes
  nor fails and is never strictly better. Two lifetimes of one engine differ by more than the runs of
  one lifetime, so an interval of runs alone would call an A/A a slowdown or "strictly better".

Overall the candidate passes iff every supported point passes
(intersection-union test: the overall false-pass rate is bounded by the per-point
level without any multiplicity correction, because every point must reject).

Adaptive repetition looks at the data several times (after ``min_runs``, then after
each added run, up to ``max_runs``). Every look is another chance to pass by luck:
with ``K`` looks at level ``alpha`` each the chance of at least one false pass can
approach ``K * alpha``. ``sequential_decision`` applies a Bonferroni correction over
the *planned* number of looks: every look uses the interval at confidence
``1 - (1 - confidence) / K``, which bounds the family-wise error at the nominal level
(conservatively: consecutive looks share most of their data). The number of looks
must be fixed before the first look; deciding to look more often afterwards voids
the bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Unpack

from fasttrack import attrs
from fasttrack.stats._base import StatResult, StatsInputError, check_confidence
from fasttrack.stats.hierarchical import (
    LIFETIME_T_MIN_LIFETIMES,
    MetricSpec,
    RatioEstimate,
    hierarchical_ratio_bootstrap,
    lifetime_t_ratio,
)
from fasttrack.stats.lifetime import LifetimeVariance, lifetime_interval
from fasttrack.stats.nested import SideSamples, count_lifetimes

Decision = Literal["decided_pass", "decided_fail", "undecided", "inconclusive"]


class PointGate(StatResult):
    """No-regression verdict of one config point for one metric."""

    point: str
    """Config point id (empty when not given)."""
    metric: str
    speedup: float
    """Observed speedup (> 1: candidate better)."""
    ci_low: float
    ci_high: float
    confidence: float
    """Two-sided level of [ci_low, ci_high]; the gate is a one-sided test at (1 - confidence) / 2."""
    noise_margin: float
    threshold: float
    """1 - noise_margin: the lower bound must reach this."""
    passed: bool
    """ci_low >= threshold."""
    strictly_better: bool
    """The family-wise lower bound (``strict_low``) > 1, and the point is not inconclusive."""
    strict_low: float | None = None
    """Lower end of the interval at the family-wise level (Bonferroni over the run's points and looks) that
    ``strictly_better`` is judged by; None: ``ci_low``."""
    ignores_lifetime_variance: bool
    """Copied from the estimate: true when its interval covers run-to-run noise only."""
    inconclusive: bool = False
    """The interval covers no lifetime variance (one lifetime on a side, no calibration): neither passed nor
    failed, never strictly better."""
    rule: str
    estimate: RatioEstimate
    """The estimate the verdict is based on (with raw data, seed and bootstrap quantiles)."""


class OverallGate(StatResult):
    """Intersection-union verdict over every supported point."""

    passed: bool
    """Every point passed."""
    strictly_better: bool
    """Every point is strictly better (lower bound > 1)."""
    n_points: int
    failing_points: list[str]
    """Points (with metric) whose lower bound fell below the threshold."""
    not_strictly_better_points: list[str]
    rule: str


class SequentialDecision(StatResult):
    """Decision of one look of adaptive repetition at one point."""

    decision: Decision
    final: bool
    """True when no more runs should be taken (decided, or the last planned look)."""
    look: int
    """1-based index of this look."""
    planned_looks: int
    nominal_confidence: float
    """Confidence level the whole sequential procedure guarantees (before correction)."""
    per_look_confidence: float
    """Bonferroni-corrected level of the interval used at every look: 1 - (1 - nominal) / planned_looks."""
    reason: str
    gate: PointGate
    """The gate evaluated at the per-look confidence."""


def no_regression_gate(
    estimate: RatioEstimate,
    *,
    noise_margin: float,
    point: str = "",
    strict_low: float | None = None,
    lifetime_rule: bool = True,
) -> PointGate:
    """Gate one point: pass iff ``estimate.ci_low >= 1 - noise_margin``; strictly better iff ``strict_low`` (the
    family-wise lower bound; default ``ci_low``) ``> 1``. With ``lifetime_rule`` an estimate that ignores
    lifetime variance is inconclusive: not passed, not strictly better."""
    if not (0.0 <= noise_margin < 1.0):
        raise StatsInputError(f"noise_margin must be in [0, 1), got {noise_margin!r}.")
    thr = 1.0 - noise_margin
    alpha1 = (1.0 - estimate.confidence) / 2.0
    inconclusive = lifetime_rule and estimate.ignores_lifetime_variance
    low = estimate.ci_low if strict_low is None else strict_low
    return PointGate(
        name=f"no-regression gate on {estimate.name}",
        method=f"non-inferiority: lower end of the {estimate.confidence:.4g} two-sided interval ({estimate.method})",
        point=point,
        **attrs(estimate, "metric", "speedup", "ci_low", "ci_high", "confidence", "ignores_lifetime_variance"),
        noise_margin=noise_margin,
        threshold=thr,
        passed=not inconclusive and estimate.ci_low >= thr,
        strictly_better=not inconclusive and low > 1.0,
        strict_low=strict_low,
        inconclusive=inconclusive,
        rule=(
            f"pass iff lower confidence bound of speedup >= 1 - noise_margin = {thr:.4g} "
            f"(one-sided level {alpha1:.4g}); strictly better iff the family-wise lower bound > 1"
            + ("; inconclusive when the interval covers no lifetime variance" if lifetime_rule else "")
        ),
        estimate=estimate,
    )


def overall_gate(points: Sequence[PointGate]) -> OverallGate:
    """Intersection-union: pass iff every point passes; strictly better iff every point is."""
    if len(points) == 0:
        raise StatsInputError(
            "no config points to gate: the perf check measured nothing, which must be reported as 'not run', "
            "not as a pass."
        )

    def label(p: PointGate) -> str:
        return f"{p.point or '?'}:{p.metric}"

    failing = [label(p) for p in points if not p.passed]
    not_strict = [label(p) for p in points if not p.strictly_better]
    return OverallGate(
        name="overall no-regression verdict",
        method=(
            "intersection-union over config points (each point tested at its own level, "
            "no multiplicity correction needed)"
        ),
        passed=not failing,
        strictly_better=not not_strict,
        n_points=len(points),
        failing_points=failing,
        not_strictly_better_points=not_strict,
        rule="pass iff every supported point passes its no-regression gate",
    )


INTERVALS = ("lifetime", "bootstrap", "lifetime_t")
"""The speedup interval's methods (``PerfGate.interval``)."""

UNMEASURED = "lifetime variance unmeasured"


def ratio_interval(
    baseline: SideSamples,
    candidate: SideSamples,
    *,
    interval: str,
    n_boot: int = 4000,
    seed: int = 0,
    paired: bool = False,
    variance: LifetimeVariance | None = None,
    **spec: Unpack[MetricSpec],
) -> RatioEstimate:
    """The speedup's interval by the scope's method, always one whose unit is the engine lifetime:

    * ``lifetime``: the lifetime t interval with the calibrated lifetime ``variance`` and/or the run's own
      lifetimes (:func:`~fasttrack.stats.lifetime.lifetime_interval`);
    * ``bootstrap``: the hierarchical bootstrap (lifetimes, then runs) when each side has two lifetimes or more;
    * ``lifetime_t``: the t interval over the run's own per-lifetime values, with three lifetimes or more in all.

    Where the chosen method has too few lifetimes, the ``lifetime`` interval is used; where nothing measures the
    lifetime variance (one lifetime on a side, no calibration), the hierarchical bootstrap of the runs, marked
    ``ignores_lifetime_variance`` with the reason among its warnings: the gate calls such a point inconclusive.
    ``paired`` (interleaved runs) applies to the bootstrap."""
    if interval not in INTERVALS:
        raise StatsInputError(f"interval must be one of {', '.join(INTERVALS)}, got {interval!r}.")
    n_b = count_lifetimes(baseline, what=f"{spec['metric']} baseline")
    n_c = count_lifetimes(candidate, what=f"{spec['metric']} candidate")
    if interval == "bootstrap" and min(n_b, n_c) >= 2:
        return hierarchical_ratio_bootstrap(baseline, candidate, n_boot=n_boot, seed=seed, paired=paired, **spec)
    if interval == "lifetime_t" and n_b + n_c >= LIFETIME_T_MIN_LIFETIMES:
        return lifetime_t_ratio(baseline, candidate, **spec)
    est_l = lifetime_interval(baseline, candidate, variance=variance, paired=paired, **spec)
    if est_l is not None:
        return est_l
    est = hierarchical_ratio_bootstrap(baseline, candidate, n_boot=n_boot, seed=seed, paired=paired, **spec)
    why = (
        f"{UNMEASURED}: {n_b} baseline and {n_c} candidate engine lifetime(s) and no calibration of this point on "
        "this host class, so the interval covers run-to-run noise only"
    )
    return est.model_copy(update={"ignores_lifetime_variance": True, "warnings": [*est.warnings, why]})


def planned_looks(*, min_runs: int, max_runs: int, step: int = 1) -> int:
    """Number of looks of adaptive repetition: after min_runs, then every ``step`` runs up to max_runs."""
    if min_runs < 1 or max_runs < min_runs or step < 1:
        raise StatsInputError(f"need 1 <= min_runs <= max_runs and step >= 1, got {min_runs}, {max_runs}, {step}.")
    return (max_runs - min_runs) // step + 1


def sequential_decision(
    baseline: SideSamples,
    candidate: SideSamples,
    *,
    noise_margin: float,
    look: int,
    planned_looks: int,
    point: str = "",
    interval: str = "bootstrap",
    n_boot: int = 4000,
    seed: int = 0,
    paired: bool = False,
    variance: LifetimeVariance | None = None,
    **spec: Unpack[MetricSpec],
) -> SequentialDecision:
    """One look of adaptive repetition (Bonferroni over the planned looks).

    The interval (``interval``: see :func:`ratio_interval`) is computed at
    ``1 - (1 - confidence) / planned_looks``. Then:
    ``decided_pass`` if its lower end >= 1 - noise_margin; ``decided_fail`` if its
    upper end < 1 - noise_margin (a regression beyond the margin is established), or
    if this is the last planned look and the point has not passed; ``inconclusive`` (final at once: more
    runs of the same lifetimes cannot measure lifetime variance) when the interval covers no lifetime
    variance; otherwise ``undecided`` (take another run and look again).
    """
    confidence = check_confidence(spec.get("confidence", 0.95))
    if planned_looks < 1 or not (1 <= look <= planned_looks):
        raise StatsInputError(
            f"look must be in 1..planned_looks (planned_looks >= 1), got look={look}, planned_looks={planned_looks}."
        )
    per_look = 1.0 - (1.0 - confidence) / planned_looks
    at_look: MetricSpec = {**spec, "confidence": per_look}
    est = ratio_interval(
        baseline, candidate, interval=interval, n_boot=n_boot, seed=seed, paired=paired, variance=variance, **at_look
    )
    gate = no_regression_gate(est, noise_margin=noise_margin, point=point)
    thr = gate.threshold
    if gate.inconclusive:
        decision: Decision = "inconclusive"
        reason = f"inconclusive: {UNMEASURED} (one engine lifetime on a side and no calibration of this point)"
    elif gate.passed:
        decision = "decided_pass"
        reason = f"lower bound {gate.ci_low:.4g} >= {thr:.4g} at look {look}/{planned_looks}"
    elif gate.ci_high < thr:
        decision = "decided_fail"
        reason = (
            f"upper bound {gate.ci_high:.4g} < {thr:.4g}: a regression beyond the margin at look {look}/{planned_looks}"
        )
    elif look == planned_looks:
        decision = "decided_fail"
        reason = (
            f"last planned look ({look}/{planned_looks}) and the lower bound {gate.ci_low:.4g} is still below "
            f"{thr:.4g}: no-regression not shown"
        )
    else:
        decision = "undecided"
        reason = (
            f"interval [{gate.ci_low:.4g}, {gate.ci_high:.4g}] straddles {thr:.4g} at look {look}/{planned_looks}: "
            "take another run"
        )
    return SequentialDecision(
        name=f"sequential no-regression decision on {est.name}",
        method=f"Bonferroni over {planned_looks} planned looks: each look uses the {per_look:.4g} interval",
        decision=decision,
        final=decision != "undecided",
        look=look,
        planned_looks=planned_looks,
        nominal_confidence=confidence,
        per_look_confidence=per_look,
        reason=reason,
        gate=gate,
    )
