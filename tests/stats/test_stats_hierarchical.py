"""Hierarchical bootstrap of the candidate/baseline ratio."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasttrack.stats import RatioEstimate, StatsInputError, hierarchical_ratio_bootstrap


def _sim_side(
    rng: np.random.Generator, mu: float, lifetimes: int, runs: int, cv_l: float, cv_r: float
) -> list[list[float]]:
    sl, sr = math.sqrt(math.log1p(cv_l**2)), math.sqrt(math.log1p(cv_r**2))
    out = []
    for _ in range(lifetimes):
        u = rng.lognormal(0.0, sl)
        out.append([float(mu * u * rng.lognormal(0.0, sr)) for _ in range(runs)])
    return out


def test_point_values_and_direction() -> None:
    base = [[[2.0, 4.0, 6.0]], [[4.0]]]  # pooled median 4
    cand = [[[1.0, 2.0, 3.0]]]  # median 2
    lat = hierarchical_ratio_bootstrap(base, cand, metric="tpot", direction="lower_is_better", n_boot=200)
    assert lat.baseline.value == 4.0 and lat.candidate.value == 2.0
    assert lat.ratio == 0.5 and lat.speedup == 2.0
    thr = hierarchical_ratio_bootstrap(base, cand, metric="tput", direction="higher_is_better", n_boot=200)
    assert thr.speedup == 0.5
    assert thr.baseline.run_values == [[4.0], [4.0]]
    assert thr.baseline.data == [[[2.0, 4.0, 6.0]], [[4.0]]]


def test_lifetimes_are_resampled_exact_distribution() -> None:
    # Two baseline lifetimes whose runs are all 1.0 and all 3.0: a replicate's mean is 1, 2 or 3
    # with probability 1/4, 1/2, 1/4. The candidate is a single value, so speedup = baseline mean.
    base = [[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]]
    est = hierarchical_ratio_bootstrap(
        base, [[1.0], [1.0]], metric="m", direction="lower_is_better", statistic="mean", n_boot=4000, seed=3
    )
    q = est.speedup_quantiles
    assert q["0.025"] == 1.0 and q["0.975"] == 3.0 and q["0.5"] == 2.0
    assert est.ci_low == 1.0 and est.ci_high == 3.0
    assert not est.ignores_lifetime_variance
    assert any("baseline has 2 engine lifetimes" in w for w in est.warnings)


def test_runs_resampled_within_one_lifetime_and_flagged() -> None:
    est = hierarchical_ratio_bootstrap(
        [[1.0, 3.0]], [[1.0]], metric="m", direction="lower_is_better", statistic="mean", n_boot=4000, seed=5
    )
    assert est.ignores_lifetime_variance is True
    assert "ignores lifetime variance" in est.method
    assert (est.ci_low, est.speedup_quantiles["0.5"], est.ci_high) == (1.0, 2.0, 3.0)


def test_requests_within_a_run_are_kept_together() -> None:
    # One lifetime, one run with many per-request samples: nothing is resampled.
    est = hierarchical_ratio_bootstrap(
        [[[1.0, 2.0, 3.0, 10.0]]], [[[1.0, 1.5, 2.0]]], metric="m", direction="lower_is_better", n_boot=500
    )
    assert est.ci_low == est.ci_high == pytest.approx(2.5 / 1.5)
    assert est.log_speedup_se == pytest.approx(0.0, abs=1e-12)
    assert est.ignores_lifetime_variance
    assert any("baseline has one engine lifetime" in w for w in est.warnings)


def test_deterministic_given_seed() -> None:
    rng = np.random.default_rng(0)
    b, c = _sim_side(rng, 1.0, 2, 6, 0.2, 0.1), _sim_side(rng, 1.0, 2, 6, 0.2, 0.1)
    e1 = hierarchical_ratio_bootstrap(b, c, metric="m", direction="lower_is_better", seed=11)
    e2 = hierarchical_ratio_bootstrap(b, c, metric="m", direction="lower_is_better", seed=11)
    e3 = hierarchical_ratio_bootstrap(b, c, metric="m", direction="lower_is_better", seed=12)
    assert e1 == e2
    assert (e1.ci_low, e1.ci_high) != (e3.ci_low, e3.ci_high)


def test_unequal_shapes_and_percentile_statistic() -> None:
    rng = np.random.default_rng(1)
    base = [[list(rng.lognormal(0, 0.2, 30)), list(rng.lognormal(0, 0.2, 17))], [list(rng.lognormal(0, 0.2, 25))]]
    cand = [[list(rng.lognormal(0, 0.2, 20))] * 3, [list(rng.lognormal(0, 0.2, 9)), [1.0]]]
    est = hierarchical_ratio_bootstrap(
        base, cand, metric="itl", direction="lower_is_better", statistic="p90", n_boot=500
    )
    pooled_b = np.concatenate([np.array(r) for lt in base for r in lt])
    assert est.baseline.value == pytest.approx(float(np.percentile(pooled_b, 90)))
    assert est.baseline.runs_per_lifetime == [2, 1] and est.candidate.runs_per_lifetime == [3, 2]
    assert est.ci_low <= est.speedup_quantiles["0.5"] <= est.ci_high


def test_json_round_trip() -> None:
    est = hierarchical_ratio_bootstrap(
        [[1.0, 1.1], [0.9, 1.2]], [[0.8, 0.85], [0.9, 0.7]], metric="m", direction="lower_is_better", n_boot=300
    )
    text = est.model_dump_json()
    assert RatioEstimate.model_validate_json(text) == est
    d = json.loads(text)
    assert {"name", "method", "confidence", "seed", "n_boot"} <= set(d)


@pytest.mark.parametrize(
    "base, msg",
    [
        ([], "non-empty list of engine lifetimes"),
        ([[]], "has no runs"),
        ([[1.0, -1.0]], "<= 0"),
        ([[1.0, float("nan")]], "NaN"),
        ([[[]]], "has no samples"),
        ("abc", "non-empty list"),
    ],
)
def test_bad_input(base: object, msg: str) -> None:
    with pytest.raises(StatsInputError, match=msg):
        hierarchical_ratio_bootstrap(base, [[1.0]], metric="m", direction="lower_is_better")  # type: ignore[arg-type] - ill-typed on purpose: the input check must reject it


def test_bad_options() -> None:
    with pytest.raises(StatsInputError, match="unknown summary statistic"):
        hierarchical_ratio_bootstrap([[1.0]], [[1.0]], metric="m", direction="lower_is_better", statistic="p100")
    with pytest.raises(StatsInputError, match="direction"):
        hierarchical_ratio_bootstrap([[1.0]], [[1.0]], metric="m", direction="up")  # type: ignore[arg-type] - ill-typed on purpose: the input check must reject it
    with pytest.raises(StatsInputError, match="confidence"):
        hierarchical_ratio_bootstrap([[1.0]], [[1.0]], metric="m", direction="lower_is_better", confidence=1.0)
    with pytest.raises(StatsInputError, match="seed"):
        hierarchical_ratio_bootstrap([[1.0]], [[1.0]], metric="m", direction="lower_is_better", seed=1.5)  # type: ignore[arg-type] - ill-typed on purpose: the input check must reject it


def test_n_boot_raised_for_narrow_tails() -> None:
    est = hierarchical_ratio_bootstrap(
        [[1.0, 2.0]], [[1.0, 2.0]], metric="m", direction="lower_is_better", confidence=0.99, n_boot=100
    )
    assert est.n_boot >= 25 / 0.005


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(min_value=0.1, max_value=10.0), seed=st.integers(min_value=0, max_value=2**31))
def test_scaling_the_candidate_scales_the_speedup(scale: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    b, c = _sim_side(rng, 1.0, 2, 4, 0.2, 0.1), _sim_side(rng, 1.0, 2, 4, 0.2, 0.1)
    e1 = hierarchical_ratio_bootstrap(b, c, metric="m", direction="higher_is_better", n_boot=300, seed=seed)
    c2 = [[v * scale for v in lt] for lt in c]
    e2 = hierarchical_ratio_bootstrap(b, c2, metric="m", direction="higher_is_better", n_boot=300, seed=seed)
    assert e2.speedup == pytest.approx(e1.speedup * scale, rel=1e-9)
    assert e2.ci_low == pytest.approx(e1.ci_low * scale, rel=1e-9)
    assert e2.ci_high == pytest.approx(e1.ci_high * scale, rel=1e-9)
    assert e2.log_speedup_se == pytest.approx(e1.log_speedup_se, rel=1e-9, abs=1e-12)


def test_coverage_near_nominal_with_many_lifetimes() -> None:
    """With 10 lifetimes per side the 90% interval covers the true ratio at close to 90%.

    Lifetime noise dominates (CV 15% vs 5% per run, 3 runs); an implementation that only
    resampled runs would cover far less often (its interval ignores the lifetime effect).
    """
    rng = np.random.default_rng(2024)
    true_ratio = 0.9  # candidate/baseline
    hits, sims = 0, 200
    for k in range(sims):
        b = _sim_side(rng, 1.0, 10, 3, 0.15, 0.05)
        c = _sim_side(rng, true_ratio, 10, 3, 0.15, 0.05)
        e = hierarchical_ratio_bootstrap(
            b,
            c,
            metric="m",
            direction="higher_is_better",
            statistic="mean",
            confidence=0.9,
            n_boot=400,
            seed=k,
            include_raw=False,
        )
        hits += e.ci_low <= true_ratio <= e.ci_high
    coverage = hits / sims
    assert 0.78 <= coverage <= 0.97, coverage


def test_lifetime_t_exact_numbers() -> None:
    from fasttrack.stats import lifetime_t_ratio

    # lifetime means: baseline 1 and 4 (geometric mean 2), candidate 2 and 2 -> speedup 1;
    # pooled sd of logs = ln 2 with df = 2, SE = ln 2 * sqrt(1/2 + 1/2) = ln 2.
    est = lifetime_t_ratio(
        [[1.0, 1.0], [4.0, 4.0]], [[2.0], [2.0]], metric="m", direction="lower_is_better", statistic="mean"
    )
    t = 4.302652729749464  # t_{0.975, 2}
    assert est.speedup == pytest.approx(1.0) and est.dof == 2
    assert est.log_speedup_se == pytest.approx(math.log(2))
    assert est.ci_low == pytest.approx(2**-t) and est.ci_high == pytest.approx(2**t)
    assert est.baseline.lifetime_values == [1.0, 4.0] and est.baseline.value == pytest.approx(2.0)
    assert est.n_boot is None and not est.ignores_lifetime_variance
    assert RatioEstimate.model_validate_json(est.model_dump_json()) == est


def test_lifetime_t_needs_three_lifetimes() -> None:
    from fasttrack.stats import lifetime_t_ratio

    with pytest.raises(StatsInputError, match="three engine lifetimes"):
        lifetime_t_ratio([[1.0, 2.0]], [[1.0, 2.0]], metric="m", direction="lower_is_better")


def test_lifetime_t_coverage_with_two_lifetimes_per_side() -> None:
    """Under the log-normal lifetime model the t interval keeps ~95% coverage with 2 + 2 lifetimes
    (where the percentile bootstrap is far too narrow)."""
    from fasttrack.stats import lifetime_t_ratio

    rng = np.random.default_rng(99)
    hits_t = hits_boot = 0
    sims = 300
    for k in range(sims):
        b = _sim_side(rng, 1.0, 2, 6, 0.2, 0.1)
        c = _sim_side(rng, 1.0, 2, 6, 0.2, 0.1)
        t_est = lifetime_t_ratio(b, c, metric="m", direction="lower_is_better", statistic="mean", include_raw=False)
        hits_t += t_est.ci_low <= 1.0 <= t_est.ci_high
        if k < 100:
            bo = hierarchical_ratio_bootstrap(
                b, c, metric="m", direction="lower_is_better", statistic="mean", n_boot=400, seed=k, include_raw=False
            )
            hits_boot += bo.ci_low <= 1.0 <= bo.ci_high
    assert 0.90 <= hits_t / sims <= 0.99, hits_t / sims
    assert hits_boot / 100 < 0.90  # documents the bootstrap's undercoverage with two lifetimes


# ---------------------------------------------------------------------------------- paired (interleaved) runs


def _host_slowed_runs(seed: int, factors: list[float], *, ratio: float = 1.0, n: int = 16) -> tuple[list, list]:
    """One lifetime per side; run pair k slowed by ``factors[k]`` on both sides (a host that slowed down)."""
    rng = np.random.default_rng(seed)
    base = [list(5.0 * f * np.exp(rng.normal(0, 0.03, n))) for f in factors]
    cand = [list(5.0 * ratio * f * np.exp(rng.normal(0, 0.03, n))) for f in factors]
    return [base], [cand]


def test_paired_bootstrap_cancels_a_host_slowdown_shared_by_run_pairs() -> None:
    factors = [1.0, 2.5, 1.0, 1.0, 2.5, 1.0]
    b, c = _host_slowed_runs(3, factors)
    kw = dict(metric="median_tpot_ms", direction="lower_is_better", confidence=0.99, n_boot=2000, seed=1)
    unpaired = hierarchical_ratio_bootstrap(b, c, **kw)
    paired = hierarchical_ratio_bootstrap(b, c, paired=True, **kw)
    assert paired.paired and not unpaired.paired
    assert "together (paired" in paired.method and "independently" in unpaired.method
    # the same data: resampled independently, a draw can take the slow runs on one side only
    assert unpaired.ci_low < 0.7 and unpaired.ci_high > 1.4
    assert 0.9 < paired.ci_low <= paired.speedup <= paired.ci_high < 1.1
    # a real 2x regression is still seen through the slowdowns
    b2, c2 = _host_slowed_runs(4, factors, ratio=2.0)
    reg = hierarchical_ratio_bootstrap(b2, c2, paired=True, **kw)
    assert 0.45 < reg.ci_low <= reg.ci_high < 0.55


def test_paired_bootstrap_with_unequal_layouts_resamples_independently_and_says_so() -> None:
    b, c = _host_slowed_runs(5, [1.0, 1.0, 1.0, 1.0])
    c = [c[0][:3]]  # a run of one side is missing
    est = hierarchical_ratio_bootstrap(b, c, metric="m", direction="lower_is_better", paired=True, n_boot=500)
    assert not est.paired and any("resampled independently" in w for w in est.warnings)


def test_paired_bootstrap_is_deterministic_and_layout_checked_per_lifetime() -> None:
    b, c = _host_slowed_runs(6, [1.0, 1.3, 1.0])
    b2, c2 = _host_slowed_runs(7, [1.0, 1.0, 1.2])
    both_b, both_c = b + b2, c + c2
    kw = dict(metric="m", direction="lower_is_better", paired=True, n_boot=500, seed=9)
    e1 = hierarchical_ratio_bootstrap(both_b, both_c, **kw)
    e2 = hierarchical_ratio_bootstrap(both_b, both_c, **kw)
    assert e1.paired and (e1.ci_low, e1.ci_high) == (e2.ci_low, e2.ci_high)
    mixed = hierarchical_ratio_bootstrap(both_b, [both_c[0] + both_c[1][:1], both_c[1][1:]], **kw)
    assert not mixed.paired, "same run count in total but not per lifetime: not paired"
