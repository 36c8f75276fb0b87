"""No-regression gate, intersection-union, sequential looks, MDE, drift and per-GPU normalisation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from fasttrack.stats import (
    DriftCheck,
    PointGate,
    RatioEstimate,
    StatsInputError,
    detect_drift,
    hierarchical_ratio_bootstrap,
    mde_for_estimate,
    minimum_detectable_effect,
    no_regression_gate,
    normalize_per_gpu,
    normalize_speedup_per_gpu,
    overall_gate,
    planned_looks,
    sequential_decision,
)
from fasttrack.stats.lifetime import LifetimeVariance


def _estimate(lo: float, hi: float, speedup: float = 1.0) -> RatioEstimate:
    est = hierarchical_ratio_bootstrap(
        [[1.0, 1.1], [1.0, 0.9]],
        [[1.0, 1.05], [0.95, 1.0]],
        metric="median_tpot_ms",
        direction="lower_is_better",
        n_boot=200,
    )
    return est.model_copy(update={"ci_low": lo, "ci_high": hi, "speedup": speedup})


def _sides(rng: np.random.Generator, ratio: float, lifetimes: int, runs: int, cv: float) -> tuple[list, list]:
    b = [list(rng.lognormal(0, cv, runs)) for _ in range(lifetimes)]
    c = [list(ratio * rng.lognormal(0, cv, runs)) for _ in range(lifetimes)]
    return b, c


@pytest.mark.parametrize(
    "lo, passed, strict",
    [(0.95, True, False), (0.9499, False, False), (1.0, True, False), (1.0001, True, True), (0.5, False, False)],
)
def test_point_gate_boundaries(lo: float, passed: bool, strict: bool) -> None:
    g = no_regression_gate(_estimate(lo, 1.2), noise_margin=0.05, point="tp1-b4")
    assert (g.passed, g.strictly_better) == (passed, strict)
    assert g.threshold == pytest.approx(0.95)
    assert "0.025" in g.rule  # one-sided level of the two-sided 95% interval
    assert PointGate.model_validate_json(g.model_dump_json()) == g


def test_overall_is_intersection_union() -> None:
    ok = no_regression_gate(_estimate(1.02, 1.3), noise_margin=0.05, point="b1")
    meh = no_regression_gate(_estimate(0.97, 1.1), noise_margin=0.05, point="b4")
    bad = no_regression_gate(_estimate(0.80, 0.9), noise_margin=0.05, point="b64")
    assert overall_gate([ok]).passed and overall_gate([ok]).strictly_better
    both = overall_gate([ok, meh])
    assert both.passed and not both.strictly_better and both.not_strictly_better_points == ["b4:median_tpot_ms"]
    allp = overall_gate([ok, meh, bad])
    assert not allp.passed and allp.failing_points == ["b64:median_tpot_ms"] and allp.n_points == 3
    with pytest.raises(StatsInputError, match="not run"):
        overall_gate([])


def test_gate_bad_margin() -> None:
    with pytest.raises(StatsInputError, match="noise_margin"):
        no_regression_gate(_estimate(1.0, 1.1), noise_margin=1.0)


def test_planned_looks() -> None:
    assert planned_looks(min_runs=3, max_runs=8) == 6
    assert planned_looks(min_runs=3, max_runs=8, step=2) == 3
    with pytest.raises(StatsInputError):
        planned_looks(min_runs=5, max_runs=3)


def test_sequential_decisions() -> None:
    rng = np.random.default_rng(7)
    b, c = _sides(rng, 0.7, 2, 4, 0.03)  # candidate latency 30% lower
    d = sequential_decision(
        b, c, metric="tpot", direction="lower_is_better", noise_margin=0.05, look=1, planned_looks=6
    )
    assert d.decision == "decided_pass" and d.final
    assert d.per_look_confidence == pytest.approx(1 - 0.05 / 6)
    assert d.gate.confidence == pytest.approx(1 - 0.05 / 6)

    b, c = _sides(rng, 1.5, 2, 4, 0.03)  # candidate latency 50% higher
    d = sequential_decision(
        b, c, metric="tpot", direction="lower_is_better", noise_margin=0.05, look=1, planned_looks=6
    )
    assert d.decision == "decided_fail" and "beyond the margin" in d.reason

    b, c = _sides(rng, 1.0, 1, 3, 0.2)  # equal but very noisy, one lifetime per side
    # nothing measures the lifetime variance: inconclusive at once (more runs of these lifetimes cannot)
    d = sequential_decision(
        b, c, metric="tpot", direction="lower_is_better", noise_margin=0.05, look=2, planned_looks=6
    )
    assert d.decision == "inconclusive" and d.final and d.gate.inconclusive and not d.gate.passed
    assert not d.gate.strictly_better and "lifetime variance unmeasured" in d.reason
    # calibrated: an interval, undecided until the last look
    var = LifetimeVariance(
        between_var_log=0.01**2, within_var_log=0.2**2, runs_per_lifetime=3, df=10, source="a calibration"
    )
    d = sequential_decision(
        b, c, metric="tpot", direction="lower_is_better", noise_margin=0.05, look=2, planned_looks=6, variance=var
    )
    assert d.decision == "undecided" and not d.final and d.gate.estimate.lifetime_variance.startswith("calibrated")
    last = sequential_decision(
        b, c, metric="tpot", direction="lower_is_better", noise_margin=0.05, look=6, planned_looks=6, variance=var
    )
    assert last.decision == "decided_fail" and last.final and "last planned look" in last.reason
    with pytest.raises(StatsInputError, match="look"):
        sequential_decision(
            b, c, metric="tpot", direction="lower_is_better", noise_margin=0.05, look=7, planned_looks=6
        )


def test_sequential_correction_widens_interval() -> None:
    rng = np.random.default_rng(3)
    b, c = _sides(rng, 1.0, 2, 6, 0.1)
    one = sequential_decision(b, c, metric="m", direction="lower_is_better", noise_margin=0.05, look=1, planned_looks=1)
    six = sequential_decision(b, c, metric="m", direction="lower_is_better", noise_margin=0.05, look=1, planned_looks=6)
    assert six.gate.ci_low < one.gate.ci_low and six.gate.ci_high > one.gate.ci_high


def test_mde_exact_numbers() -> None:
    m = minimum_detectable_effect(se_log=0.1, alpha=0.05, sides=2, power=0.8, noise_margin=0.05)
    za, zp = sps.norm.ppf(0.975), sps.norm.ppf(0.8)
    assert m.mde_log == pytest.approx((za + zp) * 0.1)
    assert m.mde_log == pytest.approx(0.2801585, abs=1e-6)
    assert m.detectable_slowdown == pytest.approx(1 - math.exp(-0.2801585), abs=1e-6)
    assert m.gate_fail_probability_at_parity == pytest.approx(sps.norm.cdf(za + math.log(0.95) / 0.1))
    assert m.gate_detectable_slowdown == 0.0  # 1 - 0.95 * exp((za - zp) * 0.1) < 0: parity fails too often
    m30 = minimum_detectable_effect(se_log=0.1, alpha=0.05, sides=2, power=0.8, noise_margin=0.3)
    assert m30.gate_detectable_slowdown == pytest.approx(1 - 0.7 * math.exp((za - zp) * 0.1))
    one = minimum_detectable_effect(se_log=0.1, alpha=0.05, sides=1)
    assert one.mde_log == pytest.approx((sps.norm.ppf(0.95) + zp) * 0.1)
    with pytest.raises(StatsInputError):
        minimum_detectable_effect(se_log=-1.0)


def test_gate_detectable_slowdown_is_zero_when_parity_already_fails() -> None:
    """A very wide interval (log-SE 0.8 against a 50% margin): even a candidate exactly as
    fast as the baseline fails the gate more often than the stated power, so the slowdown
    the gate detects is 0, never a negative number."""
    wide = minimum_detectable_effect(se_log=0.8, alpha=0.05, sides=2, power=0.8, noise_margin=0.5)
    za, zp = sps.norm.ppf(0.975), sps.norm.ppf(0.8)
    assert 1 - 0.5 * math.exp((za - zp) * 0.8) < 0  # the unclamped formula
    assert wide.gate_detectable_slowdown == 0.0
    assert wide.gate_fail_probability_at_parity is not None and wide.gate_fail_probability_at_parity >= 0.8
    narrow = minimum_detectable_effect(se_log=0.05, alpha=0.05, sides=2, power=0.8, noise_margin=0.5)
    assert 0.45 < narrow.gate_detectable_slowdown < 0.5  # just under the margin


def test_mde_has_the_stated_power_in_simulation() -> None:
    """A true effect of exactly MDE_log is detected (upper 95% bound < 1) in ~80% of normal draws."""
    se = 0.07
    m = minimum_detectable_effect(se_log=se, alpha=0.05, sides=2, power=0.8)
    rng = np.random.default_rng(0)
    est = rng.normal(-m.mde_log, se, 20000)
    detected = np.mean(est + sps.norm.ppf(0.975) * se < 0)
    assert detected == pytest.approx(0.8, abs=0.015)


def test_mde_for_estimate_uses_the_estimate_level() -> None:
    est = _estimate(0.9, 1.1)
    m = mde_for_estimate(est, noise_margin=0.05)
    assert m.se_log == est.log_speedup_se and m.alpha == pytest.approx(0.05) and m.sides == 2


def test_drift_detected_and_not() -> None:
    rng = np.random.default_rng(5)
    first = [list(rng.lognormal(0, 0.05, 6)) for _ in range(3)]
    same = [list(rng.lognormal(0, 0.05, 6)) for _ in range(3)]
    slower = [list(1.3 * rng.lognormal(0, 0.05, 6)) for _ in range(3)]
    ok = detect_drift(first, same, metric="median_tpot_ms")
    assert not ok.drifted and ok.ci_low < 1 < ok.ci_high
    bad = detect_drift(first, slower, metric="median_tpot_ms")
    assert bad.drifted and bad.ratio == pytest.approx(1.3, rel=0.08) and bad.mannwhitney_p < 0.001
    assert len(bad.first_run_values) == 18
    tolerant = detect_drift(first, slower, metric="median_tpot_ms", tolerance=0.5)
    assert not tolerant.drifted
    assert DriftCheck.model_validate_json(bad.model_dump_json()) == bad


def test_per_gpu_normalisation() -> None:
    est = _estimate(1.5, 2.1, speedup=1.8)
    n = normalize_per_gpu(est, baseline_gpus=8, candidate_gpus=16)
    assert n.flagged and not n.equal_resources and n.factor == 0.5
    assert (n.normalized_speedup, n.normalized_ci_low, n.normalized_ci_high) == pytest.approx((0.9, 0.75, 1.05))
    same = normalize_per_gpu(est, baseline_gpus=8, candidate_gpus=8)
    assert not same.flagged and same.normalized_speedup == same.speedup
    claim = normalize_speedup_per_gpu(403.2 / 223.7, baseline_gpus=8, candidate_gpus=16, metric="interactivity_p90")
    assert claim.normalized_speedup == pytest.approx(0.9012, abs=1e-4) and claim.ci_low is None
    with pytest.raises(StatsInputError, match="positive integer"):
        normalize_per_gpu(est, baseline_gpus=0, candidate_gpus=8)


def test_mde_with_t_quantiles() -> None:
    m = minimum_detectable_effect(se_log=0.1, alpha=0.05, sides=2, power=0.8, dof=2)
    assert m.dof == 2 and m.mde_log == pytest.approx((sps.t.ppf(0.975, 2) + sps.t.ppf(0.8, 2)) * 0.1)
    assert m.mde_log > minimum_detectable_effect(se_log=0.1).mde_log
