"""Sampling checks: chi-square goodness of fit of sampled tokens, and top-k / top-p masks.

Goodness of fit (:func:`chi_square_sampling_test`). Inputs: the baseline's top-k
logprobs at one position (token -> logprob) and the candidate's sample counts at that
position (token -> count over N samples with distinct seeds).

* ``temperature == 1`` (or logprobs already of the sampled distribution, e.g. vLLM's
  ``processed_logprobs``): expected probabilities are ``exp(logprob)`` for the top-k
  tokens plus a *rest* bin holding ``1 - sum(exp(logprob))`` (or ``rest_mass`` when
  given); samples outside the top-k count in the rest bin. The test is exact.
* ``temperature != 1`` with raw logprobs: the tempered mass of the unknown tail cannot
  be computed from top-k, but the distribution *within* the top-k set is exact:
  ``p_i = exp(lp_i / T) / sum_j exp(lp_j / T)``. The test is then conditional on
  the sample being in the top-k; samples outside it are counted and reported
  (``n_outside_topk``) but not tested.

Bins with an expected count below ``min_expected`` (default 5) are pooled into one
bin; if that pooled bin is still below ``min_expected`` the smallest remaining bin is
merged into it until it is not. Statistic ``X^2 = sum (O - E)^2 / E``, degrees of
freedom = bins - 1, p-value from the chi-square survival function.

Masks: :func:`allowed_tokens` gives the tokens vLLM's sampler can emit under top-k
and/or top-p (applied after temperature, top-k first, then top-p on the renormalised
top-k distribution; a token is kept by top-p iff the mass of the tokens ranked above
it is below ``top_p``), and :func:`mask_violations` counts samples outside that set.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import numpy as np
from scipy import stats as _sps

from fasttrack.modelbase import DocModel
from fasttrack.stats._base import StatResult, StatsInputError, logprob_map

Token = Hashable
REST = "<rest>"
POOLED = "<pooled>"


class ChiSquareBin(DocModel):
    """One bin of the goodness-of-fit table."""

    label: str
    """Token (as text), '<rest>' (tokens outside the top-k) or '<pooled>'."""
    tokens: list[str]
    """Tokens in this bin ('<rest>' stands for every token outside the top-k)."""
    probability: float
    """Expected probability of the bin."""
    expected: float
    """probability * N."""
    observed: int


class ChiSquareTest(StatResult):
    """Chi-square goodness-of-fit of candidate samples against the baseline distribution."""

    alpha: float
    """Level at which `consistent` is decided."""
    statistic: float
    """X^2 = sum over bins of (observed - expected)^2 / expected."""
    dof: int
    """Bins used - 1."""
    p_value: float
    consistent: bool
    """p_value >= alpha: no evidence that the candidate samples from a different distribution."""
    n_samples: int
    """All samples given."""
    n_tested: int
    """Samples in the test (all of them, or only those inside the top-k in conditional mode)."""
    n_outside_topk: int
    """Samples whose token is not in the baseline's top-k."""
    temperature: float
    conditional: bool
    """True when the test is conditional on the top-k set (temperature != 1 with raw logprobs)."""
    rest_mass: float | None
    """Probability outside the top-k (unconditional mode)."""
    min_expected: float
    bins: list[ChiSquareBin]
    """The bins actually used, after pooling."""


class AllowedTokens(StatResult):
    """The set of tokens a sampler may emit under top-k / top-p at one position."""

    top_k: int | None
    top_p: float | None
    temperature: float
    tokens: list[str]
    """Tokens that may be sampled."""
    boundary_tokens: list[str]
    """Tokens whose inclusion depends on rounding (within `tolerance` of the cut); treated as allowed."""
    known_mass: float
    """Probability mass of the known (top-k logprob) tokens at this temperature (1.0 with top_k set)."""
    tolerance: float


class MaskCheck(StatResult):
    """Samples that fell outside the allowed set (a top-k / top-p mask violation)."""

    n_samples: int
    n_violations: int
    passed: bool
    """n_violations == 0."""
    violations: dict[str, int]
    """Violating token -> count."""
    allowed: AllowedTokens


# --------------------------------------------------------------------------- helpers


def _logprob_map(logprobs: Mapping[Token, float], what: str) -> dict[Token, float]:
    if not isinstance(logprobs, Mapping) or len(logprobs) == 0:
        raise StatsInputError(f"{what}: expected a non-empty mapping token -> logprob.")
    return logprob_map(logprobs, what)


def _count_map(counts: Mapping[Token, int], what: str) -> dict[Token, int]:
    if not isinstance(counts, Mapping):
        raise StatsInputError(f"{what}: expected a mapping token -> count.")
    out: dict[Token, int] = {}
    for tok, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise StatsInputError(f"{what}: count of token {tok!r} must be a non-negative integer, got {n!r}.")
        if n:
            out[tok] = int(n)
    if sum(out.values()) == 0:
        raise StatsInputError(f"{what}: no samples; the sampling test needs the candidate's sampled tokens.")
    return out


def _check_temperature(t: float) -> float:
    t = float(t)
    if not (t > 0 and math.isfinite(t)):
        raise StatsInputError(
            f"temperature must be a finite number > 0, got {t!r} "
            "(temperature 0 is greedy decoding: compare tokens instead)."
        )
    return t


# --------------------------------------------------------------------------- goodness of fit


_Bin = tuple[str, list[str], float, int]
"""A chi-square bin: its label, its tokens, its expected probability, its observed count."""


def _tempered(lps: dict[Token, float], temperature: float, rest_mass: float | None) -> dict[Token, float]:
    """Expected probabilities at ``temperature``, conditional on the top-k set (the tempered mass outside it is
    unknown)."""
    if rest_mass is not None:
        raise StatsInputError(
            "rest_mass cannot be used with temperature != 1: the tempered mass outside the top-k is unknown. "
            "Pass logprobs of the tempered distribution with temperature=1 instead."
        )
    tokens = list(lps)
    x = np.array([lps[t] for t in tokens]) / temperature
    p = np.exp(x - x.max())
    p /= p.sum()
    return dict(zip(tokens, p.tolist(), strict=False))


def _with_rest(lps: dict[Token, float], rest_mass: float | None) -> tuple[dict[Token, float], float]:
    """Expected probabilities ``exp(logprob)`` and the rest bin's (outside the top-k: ``rest_mass``, or what the
    top-k leaves of 1), normalised together."""
    known = float(np.exp(np.array(list(lps.values()))).sum())
    if known > 1.0 + 1e-3:
        raise StatsInputError(
            f"the top-k probabilities sum to {known:.6f} > 1: these are not logprobs of one distribution."
        )
    if rest_mass is None:
        rest = max(0.0, 1.0 - known)
    else:
        if not (0.0 <= rest_mass <= 1.0):
            raise StatsInputError(f"rest_mass must be in [0, 1], got {rest_mass!r}.")
        rest = float(rest_mass)
    total = known + rest
    return {t: math.exp(lp) / total for t, lp in lps.items()}, rest / total


def _pooled(bins: list[_Bin], n_test: int, min_expected: float) -> list[_Bin]:
    """The bins tested: those with an expected count below ``min_expected`` pooled together, with the next
    smallest ones until the pool reaches it; at least two."""
    bins = sorted(bins, key=lambda b: (b[2], b[0]))
    cut = min_expected * (1.0 - 1e-9)  # an expected count of exactly min_expected is not pooled
    small = [b for b in bins if b[2] * n_test < cut]
    used = [b for b in bins if b[2] * n_test >= cut]
    if small:
        pooled = (POOLED, [t for b in small for t in b[1]], sum(b[2] for b in small), sum(b[3] for b in small))
        while pooled[2] * n_test < cut and used:
            b = used.pop(0)  # smallest remaining
            pooled = (POOLED, pooled[1] + b[1], pooled[2] + b[2], pooled[3] + b[3])
        if len(pooled[1]) == 1:  # a single small bin that absorbed nothing keeps its own label
            pooled = (small[0][0], *pooled[1:])
        used.append(pooled)
    if len(used) < 2:
        raise StatsInputError(
            f"only {len(used)} bin has an expected count >= {min_expected:g} with N={n_test}: draw more samples "
            "(or the distribution is nearly deterministic, which this test cannot check)."
        )
    return used


def chi_square_sampling_test(
    expected_logprobs: Mapping[Token, float],
    observed_counts: Mapping[Token, int],
    *,
    temperature: float = 1.0,
    rest_mass: float | None = None,
    min_expected: float = 5.0,
    alpha: float = 0.001,
) -> ChiSquareTest:
    """Pearson chi-square goodness of fit of sampled tokens against top-k logprobs (see module docstring)."""
    lps = _logprob_map(expected_logprobs, "baseline logprobs")
    counts = _count_map(observed_counts, "candidate samples")
    temperature = _check_temperature(temperature)
    if not (0 < alpha < 1):
        raise StatsInputError(f"alpha must be in (0, 1), got {alpha!r}.")
    if not (min_expected > 0):
        raise StatsInputError(f"min_expected must be > 0, got {min_expected!r}.")
    n_all = sum(counts.values())
    n_out = sum(n for t, n in counts.items() if t not in lps)
    conditional = not math.isclose(temperature, 1.0, rel_tol=0, abs_tol=1e-12)
    if conditional:
        probs, rest, n_test = _tempered(lps, temperature, rest_mass), None, n_all - n_out
        if n_test == 0:
            raise StatsInputError(
                "no candidate sample fell inside the baseline's top-k: the conditional test has nothing to test."
            )
    else:
        probs, rest = _with_rest(lps, rest_mass)
        n_test = n_all
    # initial bins: (label, tokens, prob, observed)
    bins: list[_Bin] = [(str(t), [str(t)], probs[t], counts.get(t, 0)) for t in lps]
    if rest is not None:
        bins.append((REST, [REST], rest, n_out))
    used = _pooled(bins, n_test, min_expected)
    obs = np.array([b[3] for b in used], dtype=float)
    exp_ = np.array([b[2] for b in used]) * n_test
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(exp_ > 0, (obs - exp_) ** 2 / np.where(exp_ > 0, exp_, 1.0), np.where(obs > 0, np.inf, 0.0))
    stat = float(terms.sum())
    dof = len(used) - 1
    pval = float(_sps.chi2.sf(stat, dof)) if math.isfinite(stat) else 0.0
    mode = (
        f"conditional on the top-k set, expected p_i proportional to exp(logprob_i / {temperature:g})"
        if conditional
        else "expected p_i = exp(logprob_i), plus a rest bin for tokens outside the top-k"
    )
    return ChiSquareTest(
        name="Pearson chi-square goodness of fit of candidate samples to the baseline's next-token distribution",
        method=f"{mode}; bins with expected count < {min_expected:g} pooled; dof = bins - 1",
        alpha=alpha,
        statistic=stat,
        dof=dof,
        p_value=pval,
        consistent=pval >= alpha,
        n_samples=n_all,
        n_tested=n_test,
        n_outside_topk=n_out,
        temperature=temperature,
        conditional=conditional,
        rest_mass=rest,
        min_expected=min_expected,
        bins=[
            ChiSquareBin(label=b[0], tokens=b[1], probability=b[2], expected=b[2] * n_test, observed=b[3])
            for b in sorted(used, key=lambda b: -b[2])
        ],
    )


# --------------------------------------------------------------------------- masks


def _top_k(
    ranked: list[Token], x: np.ndarray, top_k: int, tolerance: float
) -> tuple[list[Token], np.ndarray, set[Token]]:
    """The top-k mask on the (tempered) logits ``x`` of the ``ranked`` tokens: the tokens kept (ties at the k-th
    value kept), their renormalised probabilities, and the tokens at the boundary."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise StatsInputError(f"top_k must be a positive integer, got {top_k!r}.")
    if len(ranked) < top_k:
        raise StatsInputError(
            f"top_k={top_k} but only {len(ranked)} logprobs are known: "
            "request at least top_k logprobs to know the mask."
        )
    keep = x >= x[top_k - 1] - tolerance
    near = {ranked[i] for i in range(top_k, len(ranked)) if keep[i]}
    # ties (or near ties) at the k-th value: which of them the engine keeps depends on rounding
    boundary = near | {ranked[top_k - 1]} if near else set()
    kept = x[keep]
    p = np.exp(kept - kept.max())
    return [t for t, k in zip(ranked, keep, strict=False) if k], p / p.sum(), boundary


def _probabilities(x: np.ndarray, temperature: float, rest_mass: float | None) -> np.ndarray:
    """The probabilities of the listed tokens without a top-k mask: at temperature 1 out of their mass and the
    rest's; otherwise the logprobs must cover the whole distribution."""
    if math.isclose(temperature, 1.0, abs_tol=1e-12):
        p = np.exp(x)
        return p / (p.sum() + (max(0.0, 1.0 - p.sum()) if rest_mass is None else rest_mass))
    if rest_mass is None or rest_mass > 1e-6:
        raise StatsInputError(
            "top_p with temperature != 1 needs the whole distribution (rest_mass ~ 0) or logprobs of the "
            "tempered distribution passed with temperature=1; with top-k logprobs only the nucleus is unknown."
        )
    p = np.exp(x - x.max())
    return p / p.sum()


def allowed_tokens(
    logprobs: Mapping[Token, float],
    *,
    top_k: int | None = None,
    top_p: float | None = None,
    temperature: float = 1.0,
    rest_mass: float | None = None,
    tolerance: float = 1e-4,
) -> AllowedTokens:
    """Tokens the sampler may emit at a position, from that position's logprobs.

    top-k keeps every token whose (tempered) logit is at least the k-th largest (ties
    kept, as vLLM does). top-p is applied after top-k to the renormalised
    distribution and keeps a token iff the mass of the tokens ranked above it is below
    ``top_p`` (at least one token is always kept). Tokens within ``tolerance`` of either
    cut are reported as ``boundary_tokens`` and counted as allowed.

    ``logprobs`` must hold at least ``top_k`` tokens. For top-p without top-k the
    known mass must reach ``top_p`` (otherwise the nucleus reaches into tokens the
    logprobs do not list); with ``temperature != 1`` and raw logprobs the tempered
    normaliser is unknown unless the logprobs cover the whole vocabulary
    (``rest_mass`` ~ 0), so that case is rejected.
    """
    lps = _logprob_map(logprobs, "logprobs")
    temperature = _check_temperature(temperature)
    if top_k is None and top_p is None:
        raise StatsInputError("give top_k and/or top_p: without a mask every token is allowed.")
    ranked = sorted(lps, key=lambda t: (-lps[t], str(t)))
    x = np.array([lps[t] for t in ranked]) / temperature
    boundary: set[Token] = set()
    if top_k is not None:
        ranked, p, boundary = _top_k(ranked, x, top_k, tolerance)
        known = 1.0
    else:
        p = _probabilities(x, temperature, rest_mass)
        known = float(p.sum())
    if top_p is not None:
        if not (0.0 < top_p <= 1.0):
            raise StatsInputError(f"top_p must be in (0, 1], got {top_p!r}.")
        if top_k is None and known < top_p - tolerance:
            raise StatsInputError(
                f"the known logprobs carry {known:.4f} of the mass, less than top_p={top_p}: "
                "the nucleus includes tokens that are not listed. Request more logprobs."
            )
        above = np.concatenate([[0.0], np.cumsum(p)[:-1]])  # mass ranked strictly above each token
        keep = above < top_p + tolerance
        keep[0] = True
        boundary |= {ranked[i] for i in range(len(ranked)) if abs(above[i] - top_p) <= tolerance}
        ranked = [t for t, k in zip(ranked, keep, strict=False) if k]
    return AllowedTokens(
        name="tokens allowed by the sampling mask",
        method="vLLM order: temperature, then top-k (ties kept), then top-p on the renormalised top-k distribution",
        top_k=top_k,
        top_p=top_p,
        temperature=temperature,
        tokens=[str(t) for t in ranked],
        boundary_tokens=sorted(str(t) for t in boundary if t in set(ranked)),
        known_mass=known,
        tolerance=tolerance,
    )


def mask_violations(sample_counts: Mapping[Token, int], allowed: AllowedTokens) -> MaskCheck:
    """Count samples whose token is not in ``allowed.tokens`` (tokens compared as strings)."""
    counts = _count_map(sample_counts, "candidate samples")
    ok = set(allowed.tokens)
    viol = {str(t): n for t, n in counts.items() if str(t) not in ok}
    nv = sum(viol.values())
    mask = " and ".join(
        s
        for s in (
            (f"top_k={allowed.top_k}" if allowed.top_k else ""),
            (f"top_p={allowed.top_p}" if allowed.top_p else ""),
        )
        if s
    )
    return MaskCheck(
        name=f"samples outside the {mask} mask",
        method="count of sampled tokens not in the allowed set computed from the position's logprobs",
        n_samples=sum(counts.values()),
        n_violations=nv,
        passed=nv == 0,
        violations=dict(sorted(viol.items(), key=lambda kv: -kv[1])),
        allowed=allowed,
    )
