"""Chi-square goodness of fit for sampling, and top-k / top-p mask checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fasttrack.stats import (
    ChiSquareTest,
    StatsInputError,
    allowed_tokens,
    chi_square_sampling_test,
    mask_violations,
)

LP = {"a": math.log(0.5), "b": math.log(0.3), "c": math.log(0.15)}  # rest mass 0.05


def _draw(rng: np.random.Generator, probs: dict[str, float], n: int) -> dict[str, int]:
    toks = list(probs)
    p = np.array([probs[t] for t in toks])
    counts = rng.multinomial(n, p / p.sum())
    return {t: int(k) for t, k in zip(toks, counts, strict=False)}


def test_perfect_fit_exact() -> None:
    r = chi_square_sampling_test(LP, {"a": 50, "b": 30, "c": 15, "zz": 3, "yy": 2})
    assert r.statistic == pytest.approx(0.0, abs=1e-9) and r.p_value == pytest.approx(1.0)
    assert r.dof == 3 and r.n_samples == 100 and r.n_outside_topk == 5
    assert r.rest_mass == pytest.approx(0.05) and r.consistent
    assert ChiSquareTest.model_validate_json(r.model_dump_json()) == r


def test_pooling_exact_numbers() -> None:
    # N=40: expected a 20, b 12, c 6, rest 2 -> rest (<5) pooled, then merged with c -> pooled expected 8.
    r = chi_square_sampling_test(LP, {"a": 25, "b": 10, "c": 4, "q": 1})
    labels = {b.label: b for b in r.bins}
    assert set(labels) == {"a", "b", "<pooled>"}
    assert sorted(labels["<pooled>"].tokens) == ["<rest>", "c"]
    assert labels["<pooled>"].expected == pytest.approx(8.0) and labels["<pooled>"].observed == 5
    stat = (25 - 20) ** 2 / 20 + (10 - 12) ** 2 / 12 + (5 - 8) ** 2 / 8
    assert r.statistic == pytest.approx(stat) and r.dof == 2
    from scipy import stats as sps

    assert r.p_value == pytest.approx(sps.chi2.sf(stat, 2))


def test_conditional_mode_for_other_temperatures() -> None:
    t = 0.5
    w = {k: math.exp(v / t) for k, v in LP.items()}
    z = sum(w.values())
    n = 3000
    counts = {k: round(n * v / z) for k, v in w.items()}
    counts["outside"] = 7
    r = chi_square_sampling_test(LP, counts, temperature=t)
    assert r.conditional and r.n_outside_topk == 7 and r.n_tested == sum(counts.values()) - 7
    assert r.p_value > 0.9
    with pytest.raises(StatsInputError, match="rest_mass"):
        chi_square_sampling_test(LP, counts, temperature=t, rest_mass=0.1)


def test_detects_wrong_temperature() -> None:
    # Candidate samples at T = 1/1.3 while the baseline distribution is at T = 1.
    rng = np.random.default_rng(0)
    lps = {f"t{i}": v for i, v in enumerate(np.log(np.array([0.4, 0.2, 0.1, 0.08, 0.06, 0.05, 0.04, 0.03])))}
    rest = 1 - sum(math.exp(v) for v in lps.values())
    tempered = {t: math.exp(v * 1.3) for t, v in lps.items()}
    tempered["<other>"] = rest**1.3  # any positive tail
    counts = _draw(rng, tempered, 2000)
    r = chi_square_sampling_test(lps, counts)
    assert r.p_value < 1e-6 and not r.consistent
    good = chi_square_sampling_test(lps, _draw(rng, {**{t: math.exp(v) for t, v in lps.items()}, "x": rest}, 2000))
    assert good.p_value > 1e-3


def test_p_values_roughly_uniform_under_h0() -> None:
    rng = np.random.default_rng(123)
    probs = {t: math.exp(v) for t, v in LP.items()} | {"<tail>": 0.05}
    ps = np.array([chi_square_sampling_test(LP, _draw(rng, probs, 400)).p_value for _ in range(400)])
    assert 0.02 <= np.mean(ps < 0.05) <= 0.09
    assert 0.4 <= np.mean(ps < 0.5) <= 0.6


def test_errors() -> None:
    with pytest.raises(StatsInputError, match="draw more samples"):
        chi_square_sampling_test({"a": math.log(0.99)}, {"a": 10})
    with pytest.raises(StatsInputError, match="sum to"):
        chi_square_sampling_test({"a": math.log(0.7), "b": math.log(0.7)}, {"a": 10})
    with pytest.raises(StatsInputError, match="no samples"):
        chi_square_sampling_test(LP, {"a": 0})
    with pytest.raises(StatsInputError, match="temperature"):
        chi_square_sampling_test(LP, {"a": 5}, temperature=0)


def test_top_k_mask() -> None:
    a = allowed_tokens(LP, top_k=2)
    assert a.tokens == ["a", "b"] and a.boundary_tokens == []
    tie = allowed_tokens({"a": -0.5, "b": -1.0, "c": -1.0, "d": -3.0}, top_k=2)
    assert tie.tokens == ["a", "b", "c"] and sorted(tie.boundary_tokens) == ["b", "c"]
    m = mask_violations({"a": 90, "b": 8, "c": 2}, a)
    assert m.n_violations == 2 and not m.passed and m.violations == {"c": 2}
    assert mask_violations({"a": 90, "b": 10}, a).passed
    with pytest.raises(StatsInputError, match="only 3 logprobs"):
        allowed_tokens(LP, top_k=5)


def test_top_p_mask_follows_vllm_rule() -> None:
    # mass ranked above: a 0, b 0.5, c 0.8 -> top_p 0.7 keeps a, b; 0.85 keeps c too.
    assert allowed_tokens(LP, top_p=0.7).tokens == ["a", "b"]
    assert allowed_tokens(LP, top_p=0.85).tokens == ["a", "b", "c"]
    assert allowed_tokens(LP, top_p=0.1).tokens == ["a"]  # at least one token
    edge = allowed_tokens(LP, top_p=0.8)  # c sits exactly on the cut
    assert "c" in edge.tokens and edge.boundary_tokens == ["c"]
    with pytest.raises(StatsInputError, match="less than top_p"):
        allowed_tokens(LP, top_p=0.97)
    with pytest.raises(StatsInputError, match="whole distribution"):
        allowed_tokens(LP, top_p=0.5, temperature=0.7)


def test_top_k_then_top_p() -> None:
    # top-2 renormalised: a 0.625, b 0.375; top_p 0.6 keeps only a; 0.7 keeps both.
    assert allowed_tokens(LP, top_k=2, top_p=0.6).tokens == ["a"]
    assert allowed_tokens(LP, top_k=2, top_p=0.7).tokens == ["a", "b"]
    # temperature sharpens: at T=0.5 top-2 renormalised a = .25/(.25+.09) = 0.735
    assert allowed_tokens(LP, top_k=2, top_p=0.7, temperature=0.5).tokens == ["a"]
