"""Hierarchical bootstrap of the candidate/baseline ratio of a performance metric.

Data are nested: side -> engine lifetime -> run -> samples. A run is either one
number (a per-run summary such as that run's median TPOT or output throughput) or a
sequence of per-request samples (e.g. every request's TPOT in that run). Requests in
a run and runs in a lifetime are not independent evidence; the engine lifetime is
the unit of replication. The bootstrap therefore resamples at the two upper levels:

1. draw ``L`` lifetimes with replacement from the side's ``L`` lifetimes;
2. inside every drawn lifetime with ``R`` runs, draw ``R`` runs with replacement;
3. pool every sample of the drawn runs (a run's requests stay together, they are not
   resampled) and compute the summary statistic (median, mean or a percentile);

independently for each side, then form the ratio. The percentile interval of the
bootstrap distribution of the speedup is reported. (BCa is not offered: its
acceleration needs a jackknife over lifetimes, which is meaningless with the two to
four lifetimes a side has in practice.)

With one lifetime on a side only runs can be resampled, and the interval says nothing
about between-lifetime variance: the result then carries
``ignores_lifetime_variance = true``.

Calibration: with two or three lifetimes per side the percentile interval is too
narrow (a bootstrap over ``L`` units estimates the variance with factor ``(L-1)/L``
and its quantiles are coarse), so the gate's false-pass rate exceeds its nominal
level; ``benchmarks/false_alarm_stats.py`` measures it under the noise of the 2-core
hosts. :func:`lifetime_t_ratio` (a t interval on per-lifetime statistics) holds its
level with few lifetimes, at the cost of a much wider interval.

The nested-sample layout (validation, summary statistics, the two-level draws) lives in
:mod:`fasttrack.stats.nested`.

Speedup is direction-aware: for lower-is-better metrics (latency) it is
baseline / candidate, for higher-is-better metrics (throughput) candidate / baseline,
so a speedup above 1 always means the candidate is better.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, Unpack

import numpy as np
from pydantic import BaseModel, ConfigDict

from fasttrack.stats._base import (
    Direction,
    StatResult,
    StatsInputError,
    check_confidence,
    make_rng,
)
from fasttrack.stats.nested import SideLayout, SideSamples, normalise_side, paired_replicates, parse_statistic

#: Bootstrap quantiles of the speedup stored with every estimate (for re-checks and other levels).
STORED_QUANTILES: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 0.9, 0.95, 0.975, 0.99, 0.995, 0.999)

#: At least this many bootstrap replicates lie beyond each end of every interval (n_boot is raised if needed).
MIN_TAIL_REPLICATES = 25


class SideSummary(BaseModel):
    """One side of a hierarchical comparison: the observed statistic and the raw data."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, ser_json_inf_nan="null")

    value: float
    """Point value of the side: the statistic over the pooled samples of all lifetimes (bootstrap), or the
    geometric mean of the per-lifetime statistics (lifetime t interval)."""
    lifetime_values: list[float]
    """The statistic of each lifetime (its runs' samples pooled)."""
    lifetimes: int
    """Number of engine lifetimes."""
    runs_per_lifetime: list[int]
    """Number of runs in each lifetime."""
    samples: int
    """Total number of values (runs x samples per run)."""
    run_values: list[list[float]]
    """The summary statistic of each run, per lifetime (equal to the data for per-run summaries)."""
    data: list[list[list[float]]] | None = None
    """Raw values: lifetime -> run -> samples (omitted when include_raw=False)."""


class RatioEstimate(StatResult):
    """Candidate/baseline ratio of a metric with a hierarchical bootstrap interval."""

    metric: str
    """Metric name, e.g. 'median_tpot_ms' or 'output_throughput'."""
    direction: Direction
    """lower_is_better (latency) or higher_is_better (throughput)."""
    summary_statistic: str
    """Statistic computed per side on the pooled samples: 'median', 'mean' or 'pNN'."""
    confidence: float
    """Two-sided confidence level of [ci_low, ci_high]."""
    baseline: SideSummary
    candidate: SideSummary
    ratio: float
    """candidate value / baseline value (not direction-aware)."""
    speedup: float
    """Direction-aware: > 1 means the candidate is better."""
    ci_low: float
    """Lower end of the percentile interval of the speedup."""
    ci_high: float
    """Upper end of the percentile interval of the speedup."""
    log_speedup_se: float
    """Standard deviation of log(speedup) over the bootstrap replicates (the SE used for power)."""
    speedup_quantiles: dict[str, float]
    """Bootstrap quantiles of the speedup, keyed by probability (e.g. '0.025')."""
    n_boot: int | None
    """Bootstrap replicates drawn (after raising to MIN_TAIL_REPLICATES per tail); None for the t interval."""
    seed: int | None
    """Seed of numpy.random.default_rng; with the raw data it reproduces the interval exactly. None for the t
    interval."""
    dof: int | None = None
    """Degrees of freedom of the lifetime t interval; None for the bootstrap."""
    ignores_lifetime_variance: bool
    """True when a side has a single engine lifetime: the interval covers run-to-run noise only."""
    paired: bool = False
    """True when the two sides' runs were resampled together (interleaved measurement)."""
    lifetime_variance: str | None = None
    """Where the interval's lifetime variance comes from (a calibration, the run's own lifetimes, or both), in
    words; None for the bootstrap and the plain lifetime t interval."""
    warnings: list[str]
    """Caveats about this estimate (few lifetimes, no replication...)."""


# --------------------------------------------------------------------------- helpers


def _side_summary(
    side: SideLayout, reducer: Callable[[np.ndarray], np.ndarray], *, include_raw: bool, value: float | None = None
) -> SideSummary:
    return SideSummary(
        value=side.observed(reducer) if value is None else value,
        lifetime_values=side.lifetime_values(reducer),
        lifetimes=side.n_lifetimes,
        runs_per_lifetime=side.runs_per_lifetime.tolist(),
        samples=int(side.all_values.size),
        run_values=side.run_values(reducer),
        data=[[r.tolist() for r in lt] for lt in side.lifetimes] if include_raw else None,
    )


def _n_boot(n_boot: int, confidence: float) -> int:
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 100:
        raise StatsInputError(f"n_boot must be an integer >= 100, got {n_boot!r}.")
    tail = (1.0 - confidence) / 2.0
    return max(int(n_boot), math.ceil(MIN_TAIL_REPLICATES / tail))


def _warnings(name: str, side: SideLayout) -> list[str]:
    out = []
    if side.n_lifetimes == 1:
        out.append(
            f"{name} has one engine lifetime: the interval covers run-to-run noise only, not the variance "
            "between engine restarts (which is the larger part on noisy hosts)."
        )
        if side.runs_per_lifetime[0] == 1 and side.max_len == 1:
            out.append(f"{name} has a single value: nothing is resampled, its side of the interval is degenerate.")
    elif side.n_lifetimes <= 3:
        out.append(
            f"{name} has {side.n_lifetimes} engine lifetimes: the bootstrap underestimates between-lifetime variance "
            f"(by about a factor {side.n_lifetimes - 1}/{side.n_lifetimes}) and its interval is coarse."
        )
    return out


def _quantile_dict(x: np.ndarray) -> dict[str, float]:
    qs = np.quantile(x, STORED_QUANTILES)
    return {f"{p:g}": float(v) for p, v in zip(STORED_QUANTILES, qs, strict=False)}


class MetricSpec(TypedDict):
    """What a ratio estimate compares, shared by :func:`hierarchical_ratio_bootstrap`,
    :func:`lifetime_t_ratio` and the gates built on them: the metric's name and direction, the
    statistic per side (``'median'``, ``'mean'`` or ``'pNN'``; default median) and the two-sided
    confidence of the interval (default 0.95)."""

    metric: str
    direction: Direction
    statistic: NotRequired[str]
    confidence: NotRequired[float]


@dataclass(frozen=True)
class _Sides:
    """Both sides of a comparison, checked: the layouts, the statistic and the interval's level."""

    metric: str
    direction: Direction
    statistic: str
    """The statistic's name, as recorded (stripped, lower case)."""
    confidence: float
    reducer: Callable[[np.ndarray], np.ndarray]
    baseline: SideLayout
    candidate: SideLayout

    def directed(self, b: Any, c: Any) -> Any:
        """The direction-aware speedup of a baseline and a candidate value (or arrays of them)."""
        return b / c if self.direction == "lower_is_better" else c / b

    def estimate_name(self) -> str:
        better = "baseline/candidate" if self.direction == "lower_is_better" else "candidate/baseline"
        return f"speedup of {self.statistic} {self.metric} ({better}; > 1 means the candidate is better)"

    def estimate(
        self, *, include_raw: bool, values: tuple[float, float] | None = None, **figures: Any
    ) -> RatioEstimate:
        """A :class:`RatioEstimate` of these sides: what they compared and their summaries (``values``: the
        sides' point values, else the statistic over each side's pooled samples), with the ``figures`` of
        the interval."""
        b_val, c_val = values if values else (None, None)
        return RatioEstimate(
            name=self.estimate_name(),
            metric=self.metric,
            direction=self.direction,
            summary_statistic=self.statistic,
            confidence=self.confidence,
            baseline=_side_summary(self.baseline, self.reducer, include_raw=include_raw, value=b_val),
            candidate=_side_summary(self.candidate, self.reducer, include_raw=include_raw, value=c_val),
            **figures,
        )


def _sides(
    baseline: SideSamples,
    candidate: SideSamples,
    *,
    metric: str,
    direction: Direction,
    statistic: str = "median",
    confidence: float = 0.95,
) -> _Sides:
    """Check a comparison's inputs (the defaults of :class:`MetricSpec` are here)."""
    confidence = check_confidence(confidence)
    if direction not in ("lower_is_better", "higher_is_better"):
        raise StatsInputError(f"direction must be 'lower_is_better' or 'higher_is_better', got {direction!r}.")
    reducer = parse_statistic(statistic)
    return _Sides(
        metric=metric,
        direction=direction,
        statistic=statistic.strip().lower(),
        confidence=confidence,
        reducer=reducer,
        baseline=SideLayout(normalise_side(baseline, what=f"{metric} baseline")),
        candidate=SideLayout(normalise_side(candidate, what=f"{metric} candidate")),
    )


def _replicates(
    sides: _Sides, rng: np.random.Generator, boots: int, *, paired: bool
) -> tuple[np.ndarray, np.ndarray, bool, list[str]]:
    """The bootstrap replicates of both sides' statistic: drawn together when ``paired`` and the layouts
    match, else independently (baseline first). Also whether they were paired, and a note when they could
    not be."""
    b_side, c_side, reducer = sides.baseline, sides.candidate, sides.reducer
    if paired and b_side.same_layout(c_side):
        b_rep, c_rep = paired_replicates(b_side, c_side, rng, boots, reducer)
        return b_rep, c_rep, True, []
    note = []
    if paired:
        note.append(
            "runs were interleaved but the sides' layouts differ (runs per lifetime "
            f"{b_side.runs_per_lifetime.tolist()} vs {c_side.runs_per_lifetime.tolist()}), "
            "so the sides were resampled independently"
        )
    return b_side.replicates(rng, boots, reducer), c_side.replicates(rng, boots, reducer), False, note


def _bootstrap_method(*, paired: bool, one_lifetime: bool) -> str:
    method = (
        "hierarchical bootstrap: engine lifetimes resampled with replacement, then runs within each drawn "
        "lifetime (samples of a run kept together); statistic on the pooled samples per side; sides resampled "
        + (
            "together (paired: interleaved runs, run k of one side next to run k of the other)"
            if paired
            else "independently"
        )
        + "; percentile interval"
    )
    if one_lifetime:
        method += "; a side with one lifetime has only its runs resampled, so the interval ignores lifetime variance"
    return method


# --------------------------------------------------------------------------- public API


def hierarchical_ratio_bootstrap(
    baseline: SideSamples,
    candidate: SideSamples,
    *,
    n_boot: int = 4000,
    seed: int = 0,
    include_raw: bool = True,
    paired: bool = False,
    **spec: Unpack[MetricSpec],
) -> RatioEstimate:
    """Speedup of the candidate over the baseline with a hierarchical-bootstrap interval.

    Statistic: per side, the ``statistic`` of ``spec`` over the pooled samples of all runs of
    all lifetimes; ratio = candidate / baseline; speedup = baseline / candidate for
    ``lower_is_better`` metrics and candidate / baseline for ``higher_is_better`` ones.

    Interval: two-sided percentile interval at ``confidence`` of the speedup over
    ``n_boot`` hierarchical replicates (lifetimes with replacement, then runs within
    each drawn lifetime; the two sides are resampled independently). ``n_boot`` is
    raised so that at least ``MIN_TAIL_REPLICATES`` replicates lie beyond each end.
    ``log_speedup_se`` is the standard deviation of log(speedup) over the replicates.

    ``paired``: the sides were measured interleaved (lifetime i of both sides up together,
    run k of each side taken next to the other's run k), so the draws are shared: lifetime
    pair i and run pair k are resampled together, and a slowdown of the host that hit both
    runs of a pair cancels in the ratio. Needs the same layout on both sides (lifetimes and
    runs per lifetime); otherwise the sides are resampled independently and the warnings
    say so.

    Deterministic: replicates come from ``numpy.random.default_rng(seed)``, baseline
    first, then candidate (paired: one set of draws).
    """
    sides = _sides(baseline, candidate, **spec)
    boots = _n_boot(n_boot, sides.confidence)
    b_rep, c_rep, paired, pair_note = _replicates(sides, make_rng(seed), boots, paired=paired)
    b_obs, c_obs = sides.baseline.observed(sides.reducer), sides.candidate.observed(sides.reducer)
    speedup, reps = sides.directed(b_obs, c_obs), sides.directed(b_rep, c_rep)
    tail = (1.0 - sides.confidence) / 2.0
    lo, hi = np.quantile(reps, [tail, 1.0 - tail])
    one = sides.baseline.n_lifetimes == 1 or sides.candidate.n_lifetimes == 1
    return sides.estimate(
        include_raw=include_raw,
        method=_bootstrap_method(paired=paired, one_lifetime=one),
        ratio=c_obs / b_obs,
        speedup=float(speedup),
        ci_low=float(lo),
        ci_high=float(hi),
        log_speedup_se=float(np.std(np.log(reps), ddof=1)),
        speedup_quantiles=_quantile_dict(reps),
        n_boot=boots,
        seed=int(seed),
        ignores_lifetime_variance=one,
        paired=paired,
        warnings=_warnings("baseline", sides.baseline) + _warnings("candidate", sides.candidate) + pair_note,
    )


LIFETIME_T_MIN_LIFETIMES = 3
"""The lifetime t interval needs this many lifetimes in both sides together (one degree of freedom)."""


def lifetime_t_ratio(
    baseline: SideSamples, candidate: SideSamples, *, include_raw: bool = True, **spec: Unpack[MetricSpec]
) -> RatioEstimate:
    """Speedup with a t interval computed at the unit of replication (the engine lifetime).

    Statistic: per lifetime, the ``statistic`` of ``spec`` over the pooled samples of its runs;
    ``x = log`` of that value. Per side the mean of ``x``; ``d`` = difference of the
    means (direction-aware, so ``exp(d)`` is the speedup, a ratio of geometric means of
    lifetime statistics). Interval: ``d +/- t_{1-alpha/2, df} * s * sqrt(1/L_b + 1/L_c)``
    with the pooled (equal-variance) standard deviation ``s`` of ``x`` and
    ``df = L_b + L_c - 2``; exponentiated. Needs at least three lifetimes in total.

    Compared with the hierarchical bootstrap this interval keeps its nominal level
    with two or three lifetimes per side (the bootstrap is too narrow there), at the
    price of being much wider: with few lifetimes ``t_{df}`` is large (4.30 for
    2 + 2 lifetimes at 95%). It assumes log lifetime statistics are roughly normal with
    equal variance on both sides (same host, same noise).
    """
    from scipy import stats as _sps

    sides = _sides(baseline, candidate, **spec)
    b_side, c_side, reducer, confidence = sides.baseline, sides.candidate, sides.reducer, sides.confidence
    df = b_side.n_lifetimes + c_side.n_lifetimes - 2
    if b_side.n_lifetimes + c_side.n_lifetimes < LIFETIME_T_MIN_LIFETIMES:
        raise StatsInputError(
            "the lifetime t interval needs at least three engine lifetimes in total "
            f"(got {b_side.n_lifetimes} baseline, {c_side.n_lifetimes} candidate); "
            "use hierarchical_ratio_bootstrap, whose interval then ignores lifetime variance."
        )
    xb = np.log(np.array(b_side.lifetime_values(reducer)))
    xc = np.log(np.array(c_side.lifetime_values(reducer)))
    ss = float(np.sum((xb - xb.mean()) ** 2) + np.sum((xc - xc.mean()) ** 2))
    sd = math.sqrt(ss / df)
    se = sd * math.sqrt(1.0 / xb.size + 1.0 / xc.size)
    d_ratio = float(xc.mean() - xb.mean())  # log(candidate / baseline)
    d = -d_ratio if sides.direction == "lower_is_better" else d_ratio
    tq = float(_sps.t.ppf(1.0 - (1.0 - confidence) / 2.0, df))
    quantiles = {f"{p:g}": float(math.exp(d + float(_sps.t.ppf(p, df)) * se)) for p in STORED_QUANTILES}
    b_val, c_val = float(math.exp(xb.mean())), float(math.exp(xc.mean()))
    warns = []
    if min(xb.size, xc.size) == 1:
        warns.append("a side has one lifetime: its lifetime variance is assumed equal to the other side's")
    return sides.estimate(
        include_raw=include_raw,
        values=(b_val, c_val),
        method=(
            "t interval on log per-lifetime statistics (lifetime = unit of replication), pooled variance, "
            f"df = {df}; point estimate = ratio of geometric means of lifetime statistics"
        ),
        ratio=c_val / b_val,
        speedup=float(math.exp(d)),
        ci_low=float(math.exp(d - tq * se)),
        ci_high=float(math.exp(d + tq * se)),
        log_speedup_se=se,
        speedup_quantiles=quantiles,
        n_boot=None,
        seed=None,
        dof=df,
        ignores_lifetime_variance=False,
        warnings=warns,
    )
