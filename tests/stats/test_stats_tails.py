"""Several statistics from one set of bootstrap draws (tails, each side's own interval), and the rank test for
a trend in interleaved paired differences."""

from __future__ import annotations

import numpy as np
import pytest

from fasttrack.stats import StatsInputError, multi_stat_comparison, paired_trend_test
from fasttrack.stats.nested import SideLayout, normalise_side
from fasttrack.stats.tails import _Pooled


def _side(rng: np.random.Generator, scale: float, lifetimes: int = 2, runs: int = 5, n: int = 300) -> list:
    return [[list(rng.gamma(5, scale, n + 7 * r)) for r in range(runs)] for _ in range(lifetimes)]


@pytest.mark.parametrize(
    "data", [None, [[[1.0, 2.0, 3.0], [5.0]], [[2.0], [7.0, 1.0]]], [[[2.0, 2.0, 2.0], [2.0, 1.0]]]]
)
def test_weighted_order_statistics_equal_numpy_on_the_pooled_replicate(data) -> None:
    """A replicate's statistic is computed from draw counts over the side's sorted samples, without pooling: it
    must equal numpy's percentile and mean of the pooled samples exactly."""
    rng = np.random.default_rng(3)
    side = SideLayout(normalise_side(data or _side(rng, 1.0), what="x"))
    pooled = _Pooled(side)
    lt, choice = side.draw(np.random.default_rng(1), 60)
    counts = pooled.counts(lt, choice)
    mine = pooled.stats(counts, ["p50", "p90", "p99", "p1", "mean", "median"])
    runs = [r for lifetime in side.lifetimes for r in lifetime]
    for k in range(60):
        pool = np.concatenate([np.tile(runs[j], int(counts[k, j])) for j in range(len(runs)) if counts[k, j]])
        ref = [np.percentile(pool, q) for q in (50, 90, 99, 1)] + [pool.mean(), np.median(pool)]
        assert np.allclose(mine[k], ref), (k, mine[k], ref)


def test_each_side_and_the_speedup_get_intervals() -> None:
    rng = np.random.default_rng(0)
    b, c = _side(rng, 1.0), _side(rng, 1.25)
    cmp = multi_stat_comparison(
        b, c, metric="itl_ms", statistics=["p50", "p90", "p99"], direction="lower_is_better", seed=5
    )
    assert [f.statistic for f in cmp.figures] == ["p50", "p90", "p99"]
    for f in cmp.figures:
        assert f.baseline_ci_low <= f.baseline <= f.baseline_ci_high
        assert f.candidate_ci_low <= f.candidate <= f.candidate_ci_high
        assert f.ci_low <= f.speedup <= f.ci_high < 1.0, "the candidate is 25% slower everywhere"
        assert f.speedup == pytest.approx(f.baseline / f.candidate)
    again = multi_stat_comparison(
        b, c, metric="itl_ms", statistics=["p50", "p90", "p99"], direction="lower_is_better", seed=5
    )
    assert again.figures == cmp.figures, "deterministic given the seed"
    assert cmp.n_boot >= 2000 and not cmp.paired and not cmp.ignores_lifetime_variance


def test_paired_draws_need_the_same_layout_and_cancel_shared_slowdowns() -> None:
    rng = np.random.default_rng(1)
    host = [1.0, 2.5, 2.5, 1.0, 1.0, 2.5]  # both runs of a pair slowed alike
    b = [[list(rng.gamma(20, 0.05 * h, 200)) for h in host]]
    c = [[list(rng.gamma(20, 0.05 * h, 200)) for h in host]]
    paired = multi_stat_comparison(b, c, metric="x", statistics=["median"], direction="lower_is_better", paired=True)
    indep = multi_stat_comparison(b, c, metric="x", statistics=["median"], direction="lower_is_better")
    (p,), (i,) = paired.figures, indep.figures
    assert paired.paired and paired.ignores_lifetime_variance
    assert p.ci_high - p.ci_low < 0.5 * (i.ci_high - i.ci_low)
    uneven = multi_stat_comparison(
        b, [c[0][:5]], metric="x", statistics=["median"], direction="lower_is_better", paired=True
    )
    assert not uneven.paired


def test_throughputs_are_higher_is_better() -> None:
    cmp = multi_stat_comparison(
        [[10.0, 11.0, 10.5]], [[20.0, 21.0, 19.5]], metric="tput", statistics=["mean"], direction="higher_is_better"
    )
    (f,) = cmp.figures
    assert f.speedup == pytest.approx(20.1666 / 10.5, rel=1e-3) and f.ci_low > 1.5


def test_bad_statistics_are_refused() -> None:
    with pytest.raises(StatsInputError):
        multi_stat_comparison([[1.0]], [[1.0]], metric="x", statistics=["p200"], direction="lower_is_better")
    with pytest.raises(StatsInputError):
        multi_stat_comparison([[1.0]], [[1.0]], metric="x", statistics=[], direction="lower_is_better")


def test_the_trend_test_flags_a_drifting_comparison_and_states_its_p_value() -> None:
    drift = paired_trend_test([1.0 + 0.05 * k for k in range(8)], [1.0] * 8)
    assert drift.drifted and drift.p_value is not None and drift.p_value < 0.01 and drift.tau == pytest.approx(1.0)
    assert "Kendall" in drift.method
    rng = np.random.default_rng(2)
    flat = paired_trend_test(list(1 + 0.01 * rng.standard_normal(8)), [1.0] * 8)
    assert not flat.drifted and flat.p_value is not None and flat.p_value > 0.05
    four = paired_trend_test([1.0, 1.1, 1.2, 1.3], [1.0] * 4)
    assert four.p_value == pytest.approx(1 / 12) and not four.drifted, "4 pairs can never reach p < 0.05"
    assert paired_trend_test([1.0, 2.0], [1.0, 1.0]).p_value is None
    assert paired_trend_test([1.0] * 5, [1.0] * 5).tau is None
    with pytest.raises(StatsInputError):
        paired_trend_test([1.0], [1.0, 2.0])
    with pytest.raises(StatsInputError):
        paired_trend_test([0.0, 1.0, 1.0], [1.0, 1.0, 1.0])
