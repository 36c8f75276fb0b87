"""Greedy-equivalence helpers: compare two sides' greedy outputs and their top-k logprobs.

Per request, :func:`compare_greedy` reports:

* exact token match and the first divergence position (when one output is a strict
  prefix of the other, the divergence is at the shorter length);
* vLLM's ``check_logprobs_close`` rule (``tests/models/utils.py``): walk the two token
  sequences in step; if every compared token matches the outputs are close;
  at the first mismatching position both sides must have logprobs there, and each
  side's token must be among the *other* side's returned logprobs; comparison stops
  at that position. Like vLLM, only the common length is walked (a length difference
  alone does not break closeness; it is reported as ``length_mismatch``);
* logprob drift on the matching prefix (positions before the divergence): absolute
  difference of the chosen token's logprob on the two sides, max and mean;
* a KL estimate KL(baseline || candidate) per position from top-k logprobs, over the
  positions whose context is still identical (up to and including the divergence);
* the matched-prefix fraction: the tokens before the first divergence over the longer
  output's length (1 when the outputs are identical, 0 when they differ at the first token).
  Pooled over requests (:func:`summarize_greedy`), ``divergence`` is one minus its mean: the
  share of the generated tokens that came after the outputs parted.

KL estimator (:func:`topk_kl`). Each side lists probabilities only for its top-k
tokens; the rest of its mass, ``r = 1 - sum(listed)``, is spread over the unlisted
vocabulary. Over the union ``U`` of both sides' listed tokens plus one ``<other>``
bin: a token of ``U`` that a side does not list gets ``min(r / m, p_min)`` on that
side, where ``m`` is the number of such tokens and ``p_min`` the side's smallest
listed probability (an unlisted token cannot be more likely than the k-th one); the
side's remaining unlisted mass goes to ``<other>``. Probabilities are floored at
``floor`` and renormalised, and ``KL = sum_i p_i log(p_i / q_i)`` over ``U + <other>``.
If the imputed values were exact this would be the KL of a coarsened distribution,
hence at most the true KL (data-processing inequality); with imputation it is an
estimate. When both sides list the same tokens nothing is imputed and it is exactly the
KL of the two distributions coarsened to (each listed token, everything else).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from fasttrack.stats._base import StatResult, StatsInputError, logprob_map

Token = Hashable
TopLogprobs = Mapping[Token, float]

KL_ESTIMATOR = (
    "KL(baseline || candidate) over the union of both top-k sets plus an <other> bin; a token a side does not "
    "list gets min(leftover mass / number of such tokens, that side's smallest listed probability); floored at "
    "{floor:g} and renormalised"
)


class GreedyComparison(StatResult):
    """Comparison of one request's greedy outputs on the two sides."""

    n_baseline_tokens: int
    n_candidate_tokens: int
    exact_match: bool
    """Same tokens, same length."""
    first_divergence: int | None
    """0-based index of the first differing token (the shorter length if one is a prefix of the other); None if
    identical."""
    length_mismatch: bool
    baseline_token_at_divergence: str | None
    candidate_token_at_divergence: str | None
    candidate_token_in_baseline_topk: bool | None
    """At the first token mismatch: is the candidate's token among the baseline's logprobs there?"""
    baseline_token_in_candidate_topk: bool | None
    close: bool
    """vLLM's check_logprobs_close rule holds."""
    close_reason: str
    top_k: int | None
    """When set, membership uses only the k highest entries of the other side's logprobs."""
    n_prefix_compared: int
    """Matching-prefix positions where both sides returned the chosen token's logprob."""
    max_abs_logprob_diff: float | None
    mean_abs_logprob_diff: float | None
    abs_logprob_diffs: list[float]
    """|logprob_baseline - logprob_candidate| of the chosen token, per compared prefix position."""
    kl_estimator: str
    kl_mean: float | None
    kl_max: float | None
    kl_per_position: list[float]
    """KL estimate per position with identical context (up to and including the divergence)."""
    prefix_fraction: float
    """Tokens before the first divergence over the longer output's length (1.0 when identical or both empty)."""


class GreedySummary(StatResult):
    """Aggregate of many requests' greedy comparisons (e.g. one batch size)."""

    n_requests: int
    n_exact: int
    n_close: int
    close_fraction: float
    exact_fraction: float
    max_abs_logprob_diff: float | None
    """Largest chosen-token |logprob difference| over every request's matching prefix."""
    mean_abs_logprob_diff: float | None
    """Mean over all compared prefix positions of all requests."""
    kl_mean: float | None
    """Mean KL estimate over all compared positions of all requests."""
    kl_max: float | None
    divergence: float
    """One minus the mean matched-prefix fraction over the requests: the share of generated tokens after the
    first divergence (0 when every request matches exactly)."""
    not_close: list[int]
    """Indices of requests that fail the check_logprobs_close rule."""

    def breaks(
        self, *, min_close_fraction: float, max_abs_logprob_diff: float | None, max_kl: float
    ) -> tuple[bool, bool, bool]:
        """Which of these limits the comparisons break: the close fraction, the largest logprob difference on
        matching prefixes (None: no absolute limit), the mean KL (a limit whose figure was not measured is not
        broken)."""
        return (
            self.close_fraction < min_close_fraction,
            max_abs_logprob_diff is not None
            and self.max_abs_logprob_diff is not None
            and self.max_abs_logprob_diff > max_abs_logprob_diff,
            self.kl_mean is not None and self.kl_mean > max_kl,
        )


def _clean(d: Mapping[Token, float] | None, what: str) -> dict[Token, float] | None:
    return None if d is None else logprob_map(d, what)


def _topk_keys(d: Mapping[Token, float], k: int | None) -> set[Token]:
    if k is None or len(d) <= k:
        return set(d)
    return set(sorted(d, key=lambda t: -d[t])[:k])


def _impute(listed: dict[Token, float], union: list[Token]) -> np.ndarray:
    probs = {t: math.exp(v) for t, v in listed.items()}
    listed_mass = sum(probs.values())
    if listed_mass > 1.0 + 1e-3:
        raise StatsInputError(f"top-k probabilities sum to {listed_mass:.6f} > 1: not logprobs of one distribution.")
    rest = max(0.0, 1.0 - listed_mass)
    missing = [t for t in union if t not in probs]
    p_min = min(probs.values()) if probs else 1.0
    each = min(rest / len(missing), p_min) if missing else 0.0
    vec = [probs.get(t, each) for t in union]
    other = max(0.0, rest - each * len(missing))
    return np.array(vec + [other], dtype=float)


def topk_kl(p_logprobs: TopLogprobs, q_logprobs: TopLogprobs, *, floor: float = 1e-10) -> float:
    """KL(P || Q) estimated from two top-k logprob maps at the same position (see module docstring)."""
    p = _clean(p_logprobs, "first logprobs")
    q = _clean(q_logprobs, "second logprobs")
    if not p or not q:
        raise StatsInputError("topk_kl needs non-empty logprob maps on both sides.")
    union = list(dict.fromkeys([*p, *q]))
    pv = np.maximum(_impute(p, union), floor)
    qv = np.maximum(_impute(q, union), floor)
    pv /= pv.sum()
    qv /= qv.sum()
    return float(max(0.0, np.sum(pv * np.log(pv / qv))))


_Positions = list[dict[Token, float] | None]


def _close_rule(
    bt: list[Token], ct: list[Token], blp: _Positions, clp: _Positions, mismatch: int | None, top_k: int | None
) -> tuple[bool, str, bool | None, bool | None]:
    """vLLM's ``check_logprobs_close`` rule: close when the tokens match, or at the first mismatch each side's token
    is among the other's top logprobs. Also why, and the two membership tests (None without a mismatch)."""
    if mismatch is None:
        length = f" (lengths {len(bt)} vs {len(ct)})" if len(bt) != len(ct) else ""
        return True, "tokens identical over the common length" + length, None, None
    eb, ec = blp[mismatch], clp[mismatch]
    if eb is None or ec is None:
        return False, f"tokens differ at position {mismatch} and a side returned no logprobs there", None, None
    c_in_b = ct[mismatch] in _topk_keys(eb, top_k)
    b_in_c = bt[mismatch] in _topk_keys(ec, top_k)
    reason = (
        f"tokens differ at position {mismatch}: candidate token {'in' if c_in_b else 'NOT in'} baseline's top "
        f"logprobs, baseline token {'in' if b_in_c else 'NOT in'} candidate's top logprobs"
    )
    return bool(c_in_b and b_in_c), reason, c_in_b, b_in_c


def _prefix_drift(bt: list[Token], ct: list[Token], blp: _Positions, clp: _Positions, prefix_end: int) -> list[float]:
    """|logprob difference| of the chosen token at every position of the matching prefix where both sides
    report it (two -inf count as equal)."""
    diffs: list[float] = []
    for i in range(prefix_end):
        eb, ec = blp[i], clp[i]
        if eb is not None and ec is not None and bt[i] in eb and ct[i] in ec:
            a, b = eb[bt[i]], ec[ct[i]]
            diffs.append(0.0 if math.isinf(a) and math.isinf(b) else abs(a - b))
    return diffs


def compare_greedy(
    baseline_tokens: Sequence[Token],
    candidate_tokens: Sequence[Token],
    baseline_logprobs: Sequence[TopLogprobs | None] | None,
    candidate_logprobs: Sequence[TopLogprobs | None] | None,
    *,
    top_k: int | None = None,
    kl_floor: float = 1e-10,
) -> GreedyComparison:
    """Compare one request's greedy outputs (tokens + per-position top-k logprobs); see the module docstring.

    ``*_logprobs[i]`` maps token -> logprob at output position ``i`` (vLLM returns the
    top-k plus the chosen token); it may be None where a side returned none. Token
    types must be consistent across sides (ids or strings).
    """
    bt, ct = list(baseline_tokens), list(candidate_tokens)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise StatsInputError(f"top_k must be a positive integer or None, got {top_k!r}.")
    raw_b: list[TopLogprobs | None] = [None] * len(bt) if baseline_logprobs is None else list(baseline_logprobs)
    raw_c: list[TopLogprobs | None] = [None] * len(ct) if candidate_logprobs is None else list(candidate_logprobs)
    if len(raw_b) != len(bt) or len(raw_c) != len(ct):
        raise StatsInputError(
            f"logprobs must have one entry per output token: baseline {len(raw_b)} for {len(bt)} tokens, "
            f"candidate {len(raw_c)} for {len(ct)} tokens."
        )
    blp = [_clean(d, f"baseline logprobs at position {i}") for i, d in enumerate(raw_b)]
    clp = [_clean(d, f"candidate logprobs at position {i}") for i, d in enumerate(raw_c)]

    common = min(len(bt), len(ct))
    mismatch = next((i for i in range(common) if bt[i] != ct[i]), None)
    length_mismatch = len(bt) != len(ct)
    first_div = mismatch if mismatch is not None else (common if length_mismatch else None)

    close, reason, c_in_b, b_in_c = _close_rule(bt, ct, blp, clp, mismatch, top_k)
    diffs = _prefix_drift(bt, ct, blp, clp, mismatch if mismatch is not None else common)
    kl_end = min(common, (mismatch if mismatch is not None else common) + 1)
    kls = [topk_kl(eb, ec, floor=kl_floor) for eb, ec in zip(blp[:kl_end], clp[:kl_end], strict=True) if eb and ec]

    def tok(x: Token | None) -> str | None:
        return None if x is None else str(x)

    return GreedyComparison(
        name="greedy output equivalence of one request (candidate vs baseline)",
        method=(
            "exact match; vLLM check_logprobs_close rule; chosen-token logprob drift on the matching prefix; top-k KL"
        ),
        n_baseline_tokens=len(bt),
        n_candidate_tokens=len(ct),
        exact_match=bt == ct,
        first_divergence=first_div,
        length_mismatch=length_mismatch,
        baseline_token_at_divergence=tok(bt[mismatch]) if mismatch is not None else None,
        candidate_token_at_divergence=tok(ct[mismatch]) if mismatch is not None else None,
        candidate_token_in_baseline_topk=c_in_b,
        baseline_token_in_candidate_topk=b_in_c,
        close=close,
        close_reason=reason,
        top_k=top_k,
        n_prefix_compared=len(diffs),
        max_abs_logprob_diff=max(diffs) if diffs else None,
        mean_abs_logprob_diff=float(np.mean(diffs)) if diffs else None,
        abs_logprob_diffs=diffs,
        kl_estimator=KL_ESTIMATOR.format(floor=kl_floor),
        kl_mean=float(np.mean(kls)) if kls else None,
        kl_max=max(kls) if kls else None,
        kl_per_position=kls,
        prefix_fraction=prefix_fraction(first_div, len(bt), len(ct)),
    )


def prefix_fraction(first_divergence: int | None, n_baseline: int, n_candidate: int) -> float:
    """Tokens before the first divergence over the longer output's length (1.0 when identical or both empty)."""
    longest = max(n_baseline, n_candidate)
    if first_divergence is None or longest == 0:
        return 1.0
    return first_divergence / longest


def summarize_greedy(comparisons: Sequence[GreedyComparison]) -> GreedySummary:
    """Pool per-request comparisons: counts, fractions, and drift over all compared positions."""
    if len(comparisons) == 0:
        raise StatsInputError("no greedy comparisons to summarise: the equivalence check compared no requests.")
    diffs = [d for c in comparisons for d in c.abs_logprob_diffs]
    kls = [k for c in comparisons for k in c.kl_per_position]
    n = len(comparisons)
    n_close = sum(c.close for c in comparisons)
    n_exact = sum(c.exact_match for c in comparisons)
    return GreedySummary(
        name="greedy equivalence over requests",
        method=(
            "counts of exact / check_logprobs_close requests; drift pooled over compared positions; divergence: "
            "1 - mean matched-prefix fraction"
        ),
        n_requests=n,
        n_exact=n_exact,
        n_close=n_close,
        close_fraction=n_close / n,
        exact_fraction=n_exact / n,
        max_abs_logprob_diff=max(diffs) if diffs else None,
        mean_abs_logprob_diff=float(np.mean(diffs)) if diffs else None,
        kl_mean=float(np.mean(kls)) if kls else None,
        kl_max=max(kls) if kls else None,
        divergence=1.0 - float(np.mean([c.prefix_fraction for c in comparisons])),
        not_close=[i for i, c in enumerate(comparisons) if not c.close],
    )
