"""Several statistics of one metric (e.g. its p50, p90 and p99) on both sides, each with its interval.

Serving engineers read tails: p50, p90 and p99 of TTFT, ITL and TPOT per point, and each
side's own figure with an interval (a curve's point, an SLO's percentile), not only the
ratio. :func:`multi_stat_comparison` draws the hierarchical bootstrap of
:mod:`fasttrack.stats.hierarchical` once (engine lifetimes with replacement, then runs within
each drawn lifetime, a run's samples kept together; both sides from one set of draws when
``paired``) and computes every requested statistic on each replicate, giving per statistic:

* each side's value (the statistic over its pooled samples) with its percentile interval;
* the speedup (direction-aware: > 1 means the candidate is better) with its percentile
  interval.

A side with one lifetime has only its runs resampled: the intervals then ignore
lifetime-to-lifetime variance (``ignores_lifetime_variance``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from fasttrack.stats._base import Direction, StatResult, StatsInputError, check_confidence, make_rng
from fasttrack.stats.hierarchical import MIN_TAIL_REPLICATES
from fasttrack.stats.nested import SideLayout, SideSamples, normalise_side, parse_statistic


class StatFigures(BaseModel):
    """One statistic on both sides: values, intervals and the speedup."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="null")

    statistic: str
    baseline: float
    baseline_ci_low: float
    baseline_ci_high: float
    candidate: float
    candidate_ci_low: float
    candidate_ci_high: float
    speedup: float
    ci_low: float
    ci_high: float


class MultiStatComparison(StatResult):
    """Every requested statistic of one metric on both sides, from one set of bootstrap draws."""

    metric: str
    direction: Direction
    confidence: float
    figures: list[StatFigures]
    baseline_samples: int
    candidate_samples: int
    n_boot: int
    seed: int
    paired: bool
    ignores_lifetime_variance: bool

    def get(self, statistic: str) -> StatFigures:
        for f in self.figures:
            if f.statistic == statistic:
                return f
        raise KeyError(statistic)


def _reduce_all(vals: np.ndarray, stats: list[str]) -> np.ndarray:
    """(b, n) rows of values -> (b, len(stats)), NaN padding ignored (for the observed values)."""
    return np.stack([parse_statistic(s)(vals) for s in stats], axis=1)


class _Pooled:
    """One side's samples sorted once, so a replicate's statistic is a weighted order statistic.

    A replicate draws whole runs with replacement; its pooled samples are every sample of the
    drawn runs, each as many times as its run was drawn. Instead of gathering and sorting those
    samples for every replicate, the order statistics come from the cumulative weights of the
    side's sorted samples (weight = draws of the sample's run): the same values as numpy's
    linear-interpolation percentile of the pooled samples, without a sort per replicate."""

    def __init__(self, side: SideLayout) -> None:
        runs = [r for lt in side.lifetimes for r in lt]
        vals = np.concatenate(runs)
        rid = np.concatenate([np.full(r.size, i) for i, r in enumerate(runs)])
        order = np.argsort(vals, kind="stable")
        self.side = side
        self.xs = vals[order]
        self.rid = rid[order]
        self.n_runs = len(runs)
        self.run_len = np.array([r.size for r in runs], dtype=float)
        self.run_sum = np.array([r.sum() for r in runs], dtype=float)
        onehot = np.zeros((self.n_runs, vals.size), dtype=np.int32)
        onehot[self.rid, np.arange(vals.size)] = 1
        self.upto = np.cumsum(onehot, axis=1, dtype=np.int32)
        """(runs, N): how many of each run's samples are among the first j + 1 sorted samples."""

    def counts(self, lt: np.ndarray, choice: np.ndarray) -> np.ndarray:
        """(b, runs): how often each run is in each replicate drawn by ``SideLayout.draw``."""
        side = self.side
        b = lt.shape[0]
        n_runs = side.runs_per_lifetime[lt][..., None]
        valid = np.arange(side.max_runs)[None, None, :] < n_runs
        gid = side.run_offset[lt][..., None] + np.where(valid, choice, 0)
        flat = (np.arange(b)[:, None, None] * self.n_runs + gid)[valid]
        return np.bincount(flat, minlength=b * self.n_runs).reshape(b, self.n_runs).astype(float)

    def stats(self, counts: np.ndarray, stats: list[str]) -> np.ndarray:
        b, n = counts.shape[0], self.xs.size
        out = np.empty((b, len(stats)))
        total = counts @ self.run_len
        rows = np.arange(b)

        def order_stat(k: np.ndarray) -> np.ndarray:
            """The k-th (0-based) smallest pooled sample of each replicate: the first sorted position whose
            cumulative weight (``counts @ upto[:, j]``) exceeds k, by a binary search per row."""
            lo = np.zeros(b, dtype=np.int64)
            hi = np.full(b, n - 1, dtype=np.int64)
            while True:
                open_ = lo < hi
                if not open_.any():
                    break
                mid = (lo + hi) // 2
                cum = np.einsum("br,rb->b", counts, self.upto[:, mid])
                above = cum > k
                hi = np.where(open_ & above, mid, hi)
                lo = np.where(open_ & ~above, mid + 1, lo)
            return self.xs[lo[rows]]

        for i, s in enumerate(stats):
            if s == "mean":
                out[:, i] = (counts @ self.run_sum) / total
                continue
            q = 50.0 if s == "median" else float(s[1:])
            h = (total - 1.0) * q / 100.0
            k0 = np.floor(h)
            k1 = np.minimum(k0 + 1.0, total - 1.0)
            x0, x1 = order_stat(k0), order_stat(k1)
            out[:, i] = x0 + (h - k0) * (x1 - x0)
        return out


def _replicates(
    b_side: SideLayout, c_side: SideLayout, stats: list[str], *, boots: int, rng: Any, paired: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``boots`` bootstrap replicates of every statistic on each side (rows: replicates), in chunks of 1,000;
    paired: the candidate reuses the baseline's draws."""
    b_rep = np.empty((boots, len(stats)))
    c_rep = np.empty((boots, len(stats)))
    pb, pc = _Pooled(b_side), _Pooled(c_side)
    chunk = 1000
    for start in range(0, boots, chunk):
        b = min(chunk, boots - start)
        lt, choice = b_side.draw(rng, b)
        b_rep[start : start + b] = pb.stats(pb.counts(lt, choice), stats)
        if not paired:
            lt, choice = c_side.draw(rng, b)
        c_rep[start : start + b] = pc.stats(pc.counts(lt, choice), stats)
    return b_rep, c_rep


def multi_stat_comparison(
    baseline: SideSamples,
    candidate: SideSamples,
    *,
    metric: str,
    statistics: list[str],
    direction: Direction,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    paired: bool = False,
) -> MultiStatComparison:
    """Each of ``statistics`` ('mean', 'median', 'pNN') on both sides with percentile intervals, and its speedup.

    Same data layout and draws as :func:`fasttrack.stats.hierarchical_ratio_bootstrap` (paired draws need
    the same layout on both sides, else the sides are drawn independently); ``n_boot`` is raised so that at
    least 25 replicates lie beyond each end of every interval. Deterministic given ``seed``."""
    confidence = check_confidence(confidence)
    if not statistics:
        raise StatsInputError("statistics must name at least one statistic")
    stats = [s.strip().lower() for s in statistics]
    for s in stats:
        parse_statistic(s)  # validates
    b_side = SideLayout(normalise_side(baseline, what=f"{metric} baseline"))
    c_side = SideLayout(normalise_side(candidate, what=f"{metric} candidate"))
    tail = (1.0 - confidence) / 2.0
    boots = max(int(n_boot), int(np.ceil(MIN_TAIL_REPLICATES / tail)))
    rng = make_rng(seed)
    paired = bool(paired and b_side.same_layout(c_side))
    b_rep, c_rep = _replicates(b_side, c_side, stats, boots=boots, rng=rng, paired=paired)
    b_obs = _reduce_all(b_side.all_values[None, :], stats)[0]
    c_obs = _reduce_all(c_side.all_values[None, :], stats)[0]
    lower = direction == "lower_is_better"
    sp_obs = b_obs / c_obs if lower else c_obs / b_obs
    sp_rep = b_rep / c_rep if lower else c_rep / b_rep
    qs = [tail, 1.0 - tail]
    bq, cq, sq = (np.quantile(x, qs, axis=0) for x in (b_rep, c_rep, sp_rep))
    figures = [
        StatFigures(
            statistic=s,
            baseline=float(b_obs[i]),
            baseline_ci_low=float(bq[0, i]),
            baseline_ci_high=float(bq[1, i]),
            candidate=float(c_obs[i]),
            candidate_ci_low=float(cq[0, i]),
            candidate_ci_high=float(cq[1, i]),
            speedup=float(sp_obs[i]),
            ci_low=float(sq[0, i]),
            ci_high=float(sq[1, i]),
        )
        for i, s in enumerate(stats)
    ]
    one = b_side.n_lifetimes == 1 or c_side.n_lifetimes == 1
    return MultiStatComparison(
        name=f"{', '.join(stats)} of {metric} on both sides",
        method=(
            "hierarchical bootstrap (engine lifetimes, then runs; a run's samples kept together), every statistic "
            "on the same replicates; sides drawn "
            + ("together (paired, interleaved runs)" if paired else "independently")
            + "; percentile intervals"
            + ("; a side with one lifetime has only its runs resampled (lifetime variance ignored)" if one else "")
        ),
        metric=metric,
        direction=direction,
        confidence=confidence,
        figures=figures,
        baseline_samples=int(b_side.all_values.size),
        candidate_samples=int(c_side.all_values.size),
        n_boot=boots,
        seed=int(seed),
        paired=paired,
        ignores_lifetime_variance=one,
    )


__all__ = ["MultiStatComparison", "StatFigures", "multi_stat_comparison"]
