"""Greedy-equivalence helpers: vLLM's check_logprobs_close rule, drift, top-k KL."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasttrack.stats import GreedyComparison, StatsInputError, compare_greedy, summarize_greedy, topk_kl

L = math.log


def test_identical_outputs() -> None:
    lp = [{1: L(0.9), 2: L(0.05)}, {3: L(0.6), 4: L(0.3)}]
    r = compare_greedy([1, 3], [1, 3], lp, lp)
    assert r.exact_match and r.close and r.first_divergence is None and not r.length_mismatch
    assert r.max_abs_logprob_diff == 0.0 and r.kl_max == pytest.approx(0.0, abs=1e-12)
    assert r.n_prefix_compared == 2 and len(r.kl_per_position) == 2
    assert GreedyComparison.model_validate_json(r.model_dump_json()) == r


def test_divergence_inside_each_others_topk_is_close() -> None:
    base_lp = [{1: L(0.9)}, {3: L(0.5), 4: L(0.45)}, {9: L(0.9)}]
    cand_lp = [{1: L(0.8)}, {4: L(0.5), 3: L(0.45)}, {8: L(0.9)}]
    r = compare_greedy([1, 3, 9], [1, 4, 8], base_lp, cand_lp)
    assert not r.exact_match and r.close and r.first_divergence == 1
    assert r.candidate_token_in_baseline_topk and r.baseline_token_in_candidate_topk
    assert (r.baseline_token_at_divergence, r.candidate_token_at_divergence) == ("3", "4")
    # drift only on the matching prefix (position 0): |ln .9 - ln .8|
    assert r.abs_logprob_diffs == [pytest.approx(abs(L(0.9) - L(0.8)))]
    assert len(r.kl_per_position) == 2  # positions 0 and 1 share their context


def test_divergence_outside_topk_is_not_close() -> None:
    base_lp = [{3: L(0.9), 5: L(0.05)}]
    cand_lp = [{4: L(0.6), 3: L(0.3)}]
    r = compare_greedy([3], [4], base_lp, cand_lp)
    assert not r.close and r.candidate_token_in_baseline_topk is False and r.baseline_token_in_candidate_topk is True
    assert "NOT in baseline" in r.close_reason


def test_top_k_restricts_membership() -> None:
    base_lp = [{3: L(0.5), 5: L(0.3), 4: L(0.1)}]
    cand_lp = [{4: L(0.6), 3: L(0.3)}]
    assert compare_greedy([3], [4], base_lp, cand_lp).close
    assert not compare_greedy([3], [4], base_lp, cand_lp, top_k=2).close


def test_missing_logprobs_at_divergence() -> None:
    r = compare_greedy([1, 2], [1, 3], [None, None], [None, {2: -0.1}])
    assert not r.close and "no logprobs" in r.close_reason
    assert compare_greedy([1, 2], [1, 2], None, None).close


def test_length_mismatch_follows_vllm() -> None:
    r = compare_greedy([1, 2, 3], [1, 2], None, None)
    assert r.close and r.length_mismatch and r.first_divergence == 2 and not r.exact_match


def test_bad_lengths() -> None:
    with pytest.raises(StatsInputError, match="one entry per output token"):
        compare_greedy([1, 2], [1, 2], [None], None)


def test_kl_exact_on_full_support() -> None:
    p = {"x": L(0.5), "y": L(0.5)}
    q = {"x": L(0.9), "y": L(0.1)}
    assert topk_kl(p, q) == pytest.approx(0.5 * L(0.5 / 0.9) + 0.5 * L(0.5 / 0.1), rel=1e-6)


def test_kl_imputes_unlisted_tokens() -> None:
    # P lists a .6, b .3 (rest .1); Q lists a .6, c .3 (rest .1). Imputed: P(c) = .1, Q(b) = .1.
    p = {"a": L(0.6), "b": L(0.3)}
    q = {"a": L(0.6), "c": L(0.3)}
    assert topk_kl(p, q) == pytest.approx(0.3 * L(3) + 0.1 * L(1 / 3), rel=1e-6)


@settings(max_examples=100, deadline=None)
@given(
    pv=st.lists(st.floats(min_value=0.001, max_value=1.0), min_size=1, max_size=6),
    qv=st.lists(st.floats(min_value=0.001, max_value=1.0), min_size=1, max_size=6),
    shift=st.integers(0, 3),
)
def test_kl_nonnegative_and_zero_on_self(pv: list[float], qv: list[float], shift: int) -> None:
    sp, sq = sum(pv) * 1.01, sum(qv) * 1.01
    p = {i: L(v / sp) for i, v in enumerate(pv)}
    q = {i + shift: L(v / sq) for i, v in enumerate(qv)}
    assert topk_kl(p, q) >= 0.0
    assert topk_kl(p, p) == pytest.approx(0.0, abs=1e-9)


def test_summary() -> None:
    a = compare_greedy([1, 2], [1, 2], [{1: -0.1}, {2: -0.2}], [{1: -0.15}, {2: -0.2}])
    b = compare_greedy([3], [4], [{3: -0.1}], [{4: -0.1}])
    s = summarize_greedy([a, b])
    assert (s.n_requests, s.n_exact, s.n_close, s.not_close) == (2, 1, 1, [1])
    assert s.max_abs_logprob_diff == pytest.approx(0.05)
    with pytest.raises(StatsInputError):
        summarize_greedy([])


def test_divergence_is_the_share_of_tokens_after_the_outputs_part() -> None:
    """The matched-prefix fraction per request (tokens before the first divergence over the longer output), and
    the divergence over requests: one minus its mean."""
    same = compare_greedy([1, 2, 3, 4], [1, 2, 3, 4], None, None)
    early = compare_greedy([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 9, 9, 9, 9, 9, 9], None, None)
    shorter = compare_greedy([1, 2, 3], [1, 2], None, None)
    assert (same.prefix_fraction, early.prefix_fraction) == (1.0, 0.25)
    assert shorter.prefix_fraction == pytest.approx(2 / 3)
    assert compare_greedy([], [], None, None).prefix_fraction == 1.0
    assert summarize_greedy([same, early]).divergence == pytest.approx(1 - (1.0 + 0.25) / 2)
    assert summarize_greedy([same, same]).divergence == 0.0
