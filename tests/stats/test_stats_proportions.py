"""Wilson interval, paired differences, non-inferiority gate, discordant pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from fasttrack.stats import (
    NonInferiorityGate,
    PairedDifference,
    StatsInputError,
    discordant_pairs,
    non_inferiority_gate,
    paired_binary_difference,
    paired_bootstrap_difference,
    wilson_interval,
)


def _paired(a: int, b: int, c: int, d: int) -> tuple[list[int], list[int]]:
    """baseline, candidate lists for a = both 1, b = candidate only, c = baseline only, d = neither."""
    cand = [1] * a + [1] * b + [0] * c + [0] * d
    base = [1] * a + [0] * b + [1] * c + [0] * d
    return base, cand


def test_wilson_known_value() -> None:
    w = wilson_interval(81, 263)
    assert (round(w.ci_low, 4), round(w.ci_high, 4)) == (0.2553, 0.3662)
    assert w.proportion == pytest.approx(81 / 263)
    assert wilson_interval(0, 10).ci_low == 0.0 and wilson_interval(10, 10).ci_high == 1.0


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=5000),
    frac=st.floats(min_value=0, max_value=1),
    conf=st.sampled_from([0.8, 0.9, 0.95, 0.99]),
)
def test_wilson_properties(n: int, frac: float, conf: float) -> None:
    x = round(frac * n)
    w = wilson_interval(x, n, confidence=conf)
    assert 0.0 <= w.ci_low <= w.proportion <= w.ci_high <= 1.0
    ref = sps.binomtest(x, n).proportion_ci(confidence_level=conf, method="wilson")
    assert w.ci_low == pytest.approx(ref.low, abs=1e-9) and w.ci_high == pytest.approx(ref.high, abs=1e-9)


def test_wilson_bad_input() -> None:
    with pytest.raises(StatsInputError, match="zero samples"):
        wilson_interval(0, 0)
    with pytest.raises(StatsInputError, match="0..n"):
        wilson_interval(5, 3)


def test_newcombe_reference_value() -> None:
    # Fagerland, Lydersen & Laake, paired 2x2 table [[59, 6], [16, 80]] (Cavo et al. 2012):
    # estimate -0.0621, 95% CI -0.1186 to -0.0046 (Newcombe square-and-add).
    base, cand = _paired(59, 6, 16, 80)
    d = paired_binary_difference(base, cand)
    assert round(d.difference, 4) == -0.0621
    assert (round(d.ci_low, 4), round(d.ci_high, 4)) == (-0.1186, -0.0046)
    assert d.table is not None and (
        d.table.both_correct,
        d.table.candidate_only,
        d.table.baseline_only,
        d.table.neither,
    ) == (59, 6, 16, 80)
    exact = 2 * sum(math.comb(22, k) for k in range(7)) / 2**22
    assert d.table.mcnemar_exact_p == pytest.approx(exact)
    assert PairedDifference.model_validate_json(d.model_dump_json()) == d


def test_newcombe_identical_sides() -> None:
    base, cand = _paired(10, 0, 0, 5)
    d = paired_binary_difference(base, cand)
    assert d.difference == 0 and d.ci_low < 0 < d.ci_high
    assert d.table is not None and d.table.mcnemar_exact_p == 1.0


@settings(max_examples=150, deadline=None)
@given(a=st.integers(0, 40), b=st.integers(0, 40), c=st.integers(0, 40), d=st.integers(0, 40))
def test_newcombe_properties(a: int, b: int, c: int, d: int) -> None:
    if a + b + c + d == 0:
        return
    base, cand = _paired(a, b, c, d)
    r = paired_binary_difference(base, cand)
    assert -1.0 <= r.ci_low <= r.difference + 1e-12 and r.difference - 1e-12 <= r.ci_high <= 1.0


def test_binary_rejects_non_binary_and_mismatch() -> None:
    with pytest.raises(StatsInputError, match="0/1"):
        paired_binary_difference([0, 1, 0.5], [0, 1, 1])
    with pytest.raises(StatsInputError, match="same samples"):
        paired_binary_difference([0, 1], [0, 1, 1])


def test_paired_bootstrap_basic_and_clusters() -> None:
    same = paired_bootstrap_difference([0.5, 0.7, 0.9], [0.5, 0.7, 0.9])
    assert same.difference == 0 and same.ci_low == 0 and same.ci_high == 0
    # 10 problems x 4 identical repeats: clustering must widen the interval (about 2x).
    rng = np.random.default_rng(0)
    per_problem = rng.integers(-1, 2, size=10).astype(float)  # candidate - baseline per problem
    base = np.repeat(rng.integers(0, 2, size=10), 4).astype(float)
    cand = np.clip(base + np.repeat(per_problem, 4), 0, 1)
    ids = np.repeat(np.arange(10), 4)
    pairs = paired_bootstrap_difference(base, cand, seed=1)
    clus = paired_bootstrap_difference(base, cand, clusters=ids.tolist(), seed=1)
    assert clus.n_clusters == 10 and pairs.n_clusters == 40
    assert clus.difference == pairs.difference
    assert (clus.ci_high - clus.ci_low) > 1.5 * (pairs.ci_high - pairs.ci_low)
    assert clus.clusters is not None and len(clus.clusters) == 40


def test_paired_bootstrap_matches_normal_theory_for_large_n() -> None:
    rng = np.random.default_rng(4)
    base = rng.uniform(0, 1, 2000)
    cand = np.clip(base + rng.normal(-0.02, 0.1, 2000), 0, 1)
    r = paired_bootstrap_difference(base, cand, seed=2)
    d = cand - base
    se = d.std(ddof=1) / math.sqrt(d.size)
    assert r.ci_low == pytest.approx(d.mean() - 1.96 * se, abs=0.15 * se + 1e-4)
    assert r.ci_high == pytest.approx(d.mean() + 1.96 * se, abs=0.15 * se + 1e-4)


def test_non_inferiority_gate() -> None:
    base, cand = _paired(59, 6, 16, 80)
    d = paired_binary_difference(base, cand)  # CI (-0.1186, -0.0046), candidate mean 65/161
    assert non_inferiority_gate(d, margin=0.15).passed
    g = non_inferiority_gate(d, margin=0.10)
    assert not g.passed and not g.non_inferior and g.meets_floor
    f = non_inferiority_gate(d, margin=0.15, floor=0.5)
    assert not f.passed and f.non_inferior and not f.meets_floor and "0.5" in f.rule
    assert NonInferiorityGate.model_validate_json(f.model_dump_json()) == f
    with pytest.raises(StatsInputError, match="margin"):
        non_inferiority_gate(d, margin=-0.1)


def test_discordant_pairs() -> None:
    out = discordant_pairs([1, 0, 1, 0.8, 0.5], [1, 1, 0, 0.75, 0.5], ids=["a", "b", "c", "d", "e"])
    assert [p.sample_id for p in out] == ["c", "d", "b"]
    assert out[0].difference == -1.0
    assert [p.sample_id for p in discordant_pairs([1, 0, 1, 0.8], [1, 1, 0, 0.75], tolerance=0.1)] == ["2", "1"]
