"""Speedup intervals whose unit is the engine lifetime, with a calibrated lifetime variance.

Two lifetimes of the same engine on the same host differ by more than the runs inside one lifetime do
(measured: 0.5% on an ~8B model on an H100, up to 6% on a host-bound 1B model, 5-10% on two CPU cores).
An interval built from the runs of one lifetime per side measures run-to-run noise only: an A/A of
identical engines then reads as a slowdown or as "strictly better". The rule here:

* a side's value is the geometric mean of its lifetimes' statistics; ``d`` = the directed difference of
  the sides' mean log lifetime values (``exp(d)`` is the speedup);
* the variance of one lifetime's log value is ``V = sigma_B^2 + sigma_W^2 / R``: ``sigma_B^2`` between
  lifetimes, ``sigma_W^2`` between the runs of one lifetime, ``R`` runs per lifetime;
* ``sigma_B^2`` comes from a **calibration** (A/A lifetimes of the stock path measured beforehand on the same
  host class, :class:`LifetimeVariance`, with its degrees of freedom), from the run's **own lifetimes**
  (two or more on a side: the pooled within-side variance of the lifetime values), or from both (pooled,
  degrees of freedom added);
* interval: ``d +/- t_{1-alpha/2, df} * sqrt(V * (1/L_b + 1/L_c))``, exponentiated.

Interleaved measurement (``paired``: lifetime ``i`` of both sides up together, their runs taken in pairs) uses
the pairs instead: ``e_i`` = the mean over run pairs ``k`` of ``log b_ik - log c_ik`` (a host slowdown that hit
both runs of a pair cancels), ``d`` = the mean of the ``e_i``, ``Var(e_i) = 2 sigma_B^2 + w / K`` with ``w``
the variance of one run pair's log difference (``2 sigma_W^2``) and ``K`` run pairs, and the interval
``d +/- t * sqrt(Var(e) / L)`` over ``L`` lifetime pairs; the run's own pairs measure ``Var(e)`` when there are
two or more.

With neither source (one lifetime on a side and no calibration for the point) there is no interval that
covers lifetime variance: :func:`lifetime_interval` returns None, and the gate calls the point inconclusive.

Calibration (:func:`variance_components`): from A/A pairs of stock lifetimes, ``V`` is estimated by the mean
square of the pairs' log ratios over two (an A/A's true log ratio is zero, so a systematic bias between the
pair's two engines, e.g. the one started first, counts as variance: conservative), with one degree of freedom
per independent pair; ``sigma_W^2`` by the pooled variance of the runs' log values within each lifetime (paired:
half the pooled variance of the run pairs' log differences); and ``sigma_B^2 = max(0, V - sigma_W^2 / R)``.
A pair's log ratio is the mean of its run pairs' log differences when its runs pair up, as the interleaved
interval takes it, else the log ratio of its two lifetime values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Unpack

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fasttrack.stats._base import StatsInputError
from fasttrack.stats.hierarchical import (
    STORED_QUANTILES,
    MetricSpec,
    RatioEstimate,
    _sides,
)
from fasttrack.stats.nested import SideSamples


class LifetimeVariance(BaseModel):
    """The lifetime variance of one (workload, point, metric) on one host class, from a calibration."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    between_var_log: float = Field(ge=0, le=10)
    """sigma_B^2: variance of log lifetime values between engine lifetimes, beyond the runs' own noise."""
    within_var_log: float = Field(ge=0, le=10)
    """sigma_W^2: variance of log run values between the runs of one lifetime."""
    runs_per_lifetime: float = Field(gt=0, le=10_000)
    """Runs per lifetime in the calibration (V there was sigma_B^2 + sigma_W^2 / this)."""
    df: int = Field(ge=1, le=100_000)
    """Degrees of freedom of the between-lifetime estimate (independent A/A pairs)."""
    source: str = Field(max_length=400)
    """Where it comes from, in words (the calibration record, its host class)."""

    def lifetime_var(self, runs: float, within_var_log: float | None = None) -> float:
        """V for a lifetime of ``runs`` runs (``within_var_log``: this run's own run-to-run variance, else the
        calibration's)."""
        w = self.within_var_log if within_var_log is None else within_var_log
        return self.between_var_log + w / max(runs, 1.0)

    def half_width(self, *, confidence: float = 0.95, lifetimes: int = 1, runs: float | None = None) -> float:
        """Relative half-width of an A/A interval with ``lifetimes`` per side (what a no-op shows): the
        interval's lower end is about ``1 - half_width``."""
        from scipy import stats as sps

        v = self.lifetime_var(self.runs_per_lifetime if runs is None else runs)
        t = float(sps.t.ppf(1.0 - (1.0 - confidence) / 2.0, self.df))
        return 1.0 - math.exp(-t * math.sqrt(2.0 * v / lifetimes))


class VarianceComponents(BaseModel):
    """What A/A pairs of stock lifetimes say about one point (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    pairs: int
    """Independent A/A pairs (the between-lifetime estimate's degrees of freedom)."""
    lifetimes: int
    runs_per_lifetime: float
    pair_log_ratios: list[float]
    """log(baseline lifetime value / candidate lifetime value) of every pair (raw, for audit)."""
    lifetime_var_log: float
    """V: mean square of the pair log ratios / 2."""
    within_var_log: float
    """sigma_W^2 (0 when every lifetime has one run)."""
    between_var_log: float
    """sigma_B^2 = max(0, V - sigma_W^2 / R)."""
    lifetime_sd: float
    """sqrt(V): the typical relative spread of one lifetime's value."""
    between_share: float
    """sigma_B^2 / V: how much of a lifetime's variance is between lifetimes (1: all of it)."""


def variance_of_pairs(pairs: Sequence["AAPair"], *, source: str) -> "LifetimeVariance | None":
    """The lifetime variance A/A ``pairs`` give (:func:`variance_components`), with one degree of freedom per pair;
    None with fewer than two pairs."""
    if len(pairs) < 2:
        return None
    c = variance_components(pairs)
    return LifetimeVariance(
        between_var_log=c.between_var_log,
        within_var_log=c.within_var_log,
        runs_per_lifetime=c.runs_per_lifetime,
        df=c.pairs,
        source=source,
    )


class AAPair(BaseModel):
    """One A/A pair of stock engine lifetimes at one point: each lifetime's statistic and its runs' statistics."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    baseline: float = Field(gt=0)
    """The baseline lifetime's statistic (e.g. median engine TPOT over its runs' pooled samples)."""
    candidate: float = Field(gt=0)
    baseline_runs: list[float] = Field(default_factory=list)
    """The statistic of each of the baseline lifetime's runs (in the order they were taken)."""
    candidate_runs: list[float] = Field(default_factory=list)
    paired: bool = False
    """Run ``k`` of one side was taken next to run ``k`` of the other (interleaved)."""

    def run_diffs(self) -> list[float] | None:
        """The run pairs' log differences (baseline over candidate), when the runs pair up."""
        b, c = self.baseline_runs, self.candidate_runs
        if not self.paired or not b or len(b) != len(c):
            return None
        return [math.log(x / y) for x, y in zip(b, c, strict=True)]

    def log_ratio(self) -> float:
        diffs = self.run_diffs()
        return float(np.mean(diffs)) if diffs else math.log(self.baseline / self.candidate)


def _within(runs: Sequence[Sequence[float]]) -> tuple[float, int]:
    """Pooled variance of values within groups (runs of a lifetime, or run-pair differences) and its df."""
    ss, df = 0.0, 0
    for r in runs:
        if len(r) >= 2:
            a = np.asarray(r, dtype=float)
            ss += float(np.sum((a - a.mean()) ** 2))
            df += len(r) - 1
    return (ss / df if df else 0.0), df


def variance_components(pairs: Sequence[AAPair]) -> VarianceComponents:
    """Variance components of one point from A/A pairs of stock lifetimes (module docstring). Needs two pairs."""
    if len(pairs) < 2:
        raise StatsInputError(f"a lifetime variance needs at least two A/A pairs of lifetimes, got {len(pairs)}")
    ratios = [p.log_ratio() for p in pairs]
    diffs = [d for p in pairs if (d := p.run_diffs())]
    if diffs and len(diffs) == len(pairs):
        w_pair, _ = _within(diffs)
        w = w_pair / 2.0
        r = float(np.mean([len(d) for d in diffs]))
    else:
        run_logs = [[math.log(v) for v in rs if v > 0] for p in pairs for rs in (p.baseline_runs, p.candidate_runs)]
        run_logs = [x for x in run_logs if x] or [[0.0]]
        w, _ = _within(run_logs)
        r = float(np.mean([len(x) for x in run_logs]))
    v = float(np.mean(np.square(ratios)) / 2.0)
    between = max(0.0, v - w / r)
    return VarianceComponents(
        pairs=len(pairs),
        lifetimes=2 * len(pairs),
        runs_per_lifetime=r,
        pair_log_ratios=ratios,
        lifetime_var_log=v,
        within_var_log=w,
        between_var_log=between,
        lifetime_sd=math.sqrt(v),
        between_share=between / v if v > 0 else 0.0,
    )


@dataclass(frozen=True)
class LifetimeFigures:
    """The lifetime t interval's figures on the log scale (directed: ``exp(d)`` is the speedup)."""

    d: float
    se: float
    df: int
    source: str

    def interval(self, confidence: float) -> tuple[float, float]:
        from scipy import stats as sps

        tq = float(sps.t.ppf(1.0 - (1.0 - confidence) / 2.0, self.df))
        return math.exp(self.d - tq * self.se), math.exp(self.d + tq * self.se)


def _calibrated_part(variance: LifetimeVariance) -> str:
    return f"calibrated: {variance.source} (sigma_B {math.sqrt(variance.between_var_log):.3%}, df {variance.df})"


def lifetime_figures(
    xb: Sequence[float],
    xc: Sequence[float],
    runs: Sequence[Sequence[float]],
    *,
    variance: LifetimeVariance | None,
    lower_is_better: bool,
) -> LifetimeFigures | None:
    """The interval's figures from the sides' log lifetime values ``xb``, ``xc`` and the log run values of every
    lifetime (``runs``); None when neither ``variance`` nor the lifetimes (three or more) measure it."""
    b, c = np.asarray(xb, dtype=float), np.asarray(xc, dtype=float)
    df_obs = b.size + c.size - 2
    if variance is None and df_obs < 1:
        return None
    ss = float(np.sum((b - b.mean()) ** 2) + np.sum((c - c.mean()) ** 2))
    df, parts = df_obs, []
    if variance is not None:
        w_obs, w_df = _within(runs)
        r_mean = float(np.mean([len(r) for r in runs])) if runs else variance.runs_per_lifetime
        ss += variance.df * variance.lifetime_var(r_mean, w_obs if w_df else None)
        df += variance.df
        parts.append(_calibrated_part(variance))
    if df_obs >= 1:
        parts.append(f"observed: {b.size}+{c.size} lifetimes (df {df_obs})")
    se = math.sqrt(ss / df * (1.0 / b.size + 1.0 / c.size))
    d_ratio = float(c.mean() - b.mean())
    return LifetimeFigures(d=-d_ratio if lower_is_better else d_ratio, se=se, df=df, source=" + ".join(parts))


def paired_figures(
    diffs: Sequence[Sequence[float]], *, variance: LifetimeVariance | None, lower_is_better: bool
) -> LifetimeFigures | None:
    """The interleaved interval's figures from each lifetime pair's run-pair log differences ``log b - log c``;
    None when neither ``variance`` nor two lifetime pairs measure it."""
    e = np.asarray([float(np.mean(d)) for d in diffs], dtype=float)
    df_obs = e.size - 1
    if variance is None and df_obs < 1:
        return None
    ss = float(np.sum((e - e.mean()) ** 2))
    df, parts = df_obs, []
    if variance is not None:
        w_pair, w_df = _within(diffs)
        k = float(np.mean([len(d) for d in diffs]))
        w_run = w_pair / 2.0 if w_df else None
        ss += variance.df * 2.0 * variance.lifetime_var(k, w_run)
        df += variance.df
        parts.append(_calibrated_part(variance))
    if df_obs >= 1:
        parts.append(f"observed: {e.size} interleaved lifetime pairs (df {df_obs})")
    se = math.sqrt(ss / df / e.size)
    d = float(e.mean())  # log(baseline / candidate)
    source = "paired run differences within each lifetime pair; " + " + ".join(parts)
    return LifetimeFigures(d=d if lower_is_better else -d, se=se, df=df, source=source)


def lifetime_interval(
    baseline: SideSamples,
    candidate: SideSamples,
    *,
    variance: LifetimeVariance | None = None,
    paired: bool = False,
    include_raw: bool = True,
    **spec: Unpack[MetricSpec],
) -> RatioEstimate | None:
    """The speedup with an interval that covers lifetime variance (module docstring), or None when neither a
    calibration nor the run's own lifetimes measure it. ``paired``: interleaved runs (used when both sides have
    the same lifetimes and runs per lifetime)."""
    from scipy import stats as sps

    sides = _sides(baseline, candidate, **spec)
    b, c, red = sides.baseline, sides.candidate, sides.reducer
    xb = np.log(np.asarray(b.lifetime_values(red), dtype=float))
    xc = np.log(np.asarray(c.lifetime_values(red), dtype=float))
    rb, rc = b.run_values(red), c.run_values(red)
    lower = sides.direction == "lower_is_better"
    use_pairs = paired and b.same_layout(c)
    if use_pairs:
        diffs = [[math.log(x / y) for x, y in zip(lb, lc, strict=True)] for lb, lc in zip(rb, rc, strict=True)]
        fig = paired_figures(diffs, variance=variance, lower_is_better=lower)
    else:
        runs = [[math.log(v) for v in r] for r in rb + rc]
        fig = lifetime_figures(xb.tolist(), xc.tolist(), runs, variance=variance, lower_is_better=lower)
    if fig is None:
        return None
    lo, hi = fig.interval(sides.confidence)
    quantiles = {f"{p:g}": float(math.exp(fig.d + float(sps.t.ppf(p, fig.df)) * fig.se)) for p in STORED_QUANTILES}
    b_val, c_val = float(math.exp(xb.mean())), float(math.exp(xc.mean()))
    return sides.estimate(
        include_raw=include_raw,
        values=(b_val, c_val),
        method=(
            "t interval on log per-lifetime statistics (the engine lifetime is the unit), lifetime variance "
            f"{fig.source}; df = {fig.df}; point estimate = ratio of geometric means of lifetime statistics"
        ),
        ratio=c_val / b_val,
        speedup=float(math.exp(fig.d)),
        ci_low=lo,
        ci_high=hi,
        log_speedup_se=fig.se,
        speedup_quantiles=quantiles,
        n_boot=None,
        seed=None,
        dof=fig.df,
        ignores_lifetime_variance=False,
        paired=use_pairs,
        lifetime_variance=fig.source,
        warnings=[],
    )
