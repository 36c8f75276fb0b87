"""Proportions and paired score comparisons for model evaluations.

* :func:`wilson_interval`: Wilson score interval for a binomial proportion.
* :func:`paired_binary_difference`: difference of paired proportions (candidate minus
  baseline, e.g. AIME exact match on identical problems) with Newcombe's hybrid score
  ("square-and-add") interval for paired data (Newcombe 1998, Statistics in Medicine
  17:2635, method 10), the form implemented by R's ``contingencytables``
  (``Newcombe_square_and_add_CI_paired_2x2``). The exact McNemar p-value of the
  discordant pairs is reported beside it.
* :func:`paired_bootstrap_difference`: mean paired difference of any per-sample scores
  (binary or continuous, e.g. MRCR ratios in [0, 1]) with a percentile bootstrap over
  pairs, or over clusters of pairs when the same item is scored several times
  (repeats of one AIME problem are not independent evidence: resample problems).
* :func:`non_inferiority_gate`: pass iff the lower bound of (candidate - baseline) is
  at least ``-margin`` and the candidate's mean score is at least ``floor``.
* :func:`discordant_pairs`: the samples on which the sides disagree, for review.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np
from scipy import stats as _sps

from fasttrack.modelbase import DocModel
from fasttrack.stats._base import StatResult, StatsInputError, as_finite_array, check_confidence, make_rng, z_quantile
from fasttrack.stats.hierarchical import MIN_TAIL_REPLICATES


class ProportionInterval(StatResult):
    """A proportion with its Wilson score interval."""

    successes: int
    n: int
    proportion: float
    confidence: float
    ci_low: float
    ci_high: float


class PairedTable(DocModel):
    """The paired 2x2 table of binary scores (candidate first, baseline second)."""

    both_correct: int
    """a: candidate 1, baseline 1."""
    candidate_only: int
    """b: candidate 1, baseline 0."""
    baseline_only: int
    """c: candidate 0, baseline 1."""
    neither: int
    """d: candidate 0, baseline 0."""
    psi: float
    """Newcombe's continuity-corrected estimate of the correlation of the two proportions."""
    mcnemar_exact_p: float
    """Two-sided exact McNemar p-value (binomial test of b against b + c at 1/2); 1.0 when b + c = 0."""


class PairedDifference(StatResult):
    """Mean of candidate minus baseline over paired samples, with an interval."""

    confidence: float
    n_pairs: int
    baseline_mean: float
    candidate_mean: float
    difference: float
    """candidate_mean - baseline_mean."""
    ci_low: float
    ci_high: float
    table: PairedTable | None = None
    """The 2x2 table (binary scores with Newcombe's interval)."""
    n_boot: int | None = None
    seed: int | None = None
    n_clusters: int | None = None
    """Number of resampling units (clusters of pairs, or pairs)."""
    baseline_scores: list[float] | None = None
    candidate_scores: list[float] | None = None
    clusters: list[str] | None = None
    """Cluster label of every pair (e.g. the problem id when problems are repeated)."""


class NonInferiorityGate(StatResult):
    """Paired non-inferiority verdict of an evaluation."""

    margin: float
    floor: float | None
    lower_bound: float
    """Lower end of the interval of candidate - baseline."""
    candidate_score: float
    """Candidate's mean score (point estimate), compared against the floor."""
    non_inferior: bool
    """lower_bound >= -margin."""
    meets_floor: bool
    """candidate_score >= floor (True when no floor is set)."""
    passed: bool
    rule: str
    difference: PairedDifference


class DiscordantPair(DocModel):
    """One sample on which the two sides scored differently."""

    sample_id: str
    baseline: float
    candidate: float
    difference: float
    """candidate - baseline."""


# --------------------------------------------------------------------------- single proportion


def wilson_interval(successes: int, n: int, *, confidence: float = 0.95) -> ProportionInterval:
    """Wilson score interval: centre (x + z^2/2)/(n + z^2), half-width z*sqrt(x(n-x)/n + z^2/4)/(n + z^2),
    z = Phi^-1(1 - (1 - confidence)/2). Always inside [0, 1]."""
    confidence = check_confidence(confidence)
    for what, v in (("successes", successes), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise StatsInputError(f"{what} must be an integer, got {v!r}.")
    if n < 1:
        raise StatsInputError(f"n must be at least 1, got {n}: a proportion of zero samples is undefined.")
    if not (0 <= successes <= n):
        raise StatsInputError(f"successes must be in 0..n ({n}), got {successes}.")
    lo, hi = _wilson(int(successes), int(n), confidence)
    return ProportionInterval(
        name="proportion of successes",
        method="Wilson score interval",
        successes=int(successes),
        n=int(n),
        proportion=successes / n,
        confidence=confidence,
        ci_low=lo,
        ci_high=hi,
    )


def _wilson(x: int, n: int, confidence: float) -> tuple[float, float]:
    z = z_quantile(1.0 - (1.0 - confidence) / 2.0)
    z2 = z * z
    denom = n + z2
    centre = (x + z2 / 2.0) / denom
    half = z * math.sqrt(x * (n - x) / n + z2 / 4.0) / denom
    lo = 0.0 if x == 0 else max(0.0, centre - half)
    hi = 1.0 if x == n else min(1.0, centre + half)
    return lo, hi


# --------------------------------------------------------------------------- paired comparisons


def _binary(values: Sequence[int | bool | float], what: str) -> np.ndarray:
    arr = as_finite_array(values, what=what)
    if not np.all((arr == 0) | (arr == 1)):
        raise StatsInputError(f"{what} must contain only 0/1 (or False/True) scores for the binary paired interval.")
    return arr.astype(int)


def _pair_arrays(
    baseline: Sequence[float], candidate: Sequence[float], *, binary: bool
) -> tuple[np.ndarray, np.ndarray]:
    if binary:
        b, c = _binary(baseline, "baseline scores"), _binary(candidate, "candidate scores")
    else:
        b = as_finite_array(baseline, what="baseline scores")
        c = as_finite_array(candidate, what="candidate scores")
    if b.size != c.size:
        raise StatsInputError(
            f"paired scores need the same samples on both sides: baseline has {b.size}, candidate {c.size}. "
            "Align them by sample id (and repeat) before comparing."
        )
    return b, c


def paired_binary_difference(
    baseline: Sequence[float], candidate: Sequence[float], *, confidence: float = 0.95
) -> PairedDifference:
    """Candidate minus baseline proportion on paired binary scores, Newcombe's method-10 interval.

    Scores are 0/1 (ints, bools, or floats equal to 0 or 1; anything else is rejected).
    With a = both 1, b = candidate only, c = baseline only, d = neither, n pairs:
    p1 = (a + b)/n (candidate), p2 = (a + c)/n (baseline), D = p1 - p2. With Wilson
    intervals (l1, u1) of p1 and (l2, u2) of p2 and psi the continuity-corrected phi
    coefficient (A = ad - bc; psi = (A - n/2)/sqrt(prod of margins) if A > n/2, 0 if
    0 <= A <= n/2, A/sqrt(...) if A < 0, 0 if a margin is 0)::

        L = D - sqrt((p1 - l1)^2 + (u2 - p2)^2 - 2 psi (p1 - l1)(u2 - p2))
        U = D + sqrt((p2 - l2)^2 + (u1 - p1)^2 - 2 psi (p2 - l2)(u1 - p1))

    Pairs are assumed independent; with repeated scoring of the same items use
    :func:`paired_bootstrap_difference` with ``clusters``.
    """
    confidence = check_confidence(confidence)
    b, c = _pair_arrays(baseline, candidate, binary=True)
    n = int(b.size)
    a_ = int(np.sum((c == 1) & (b == 1)))
    b_ = int(np.sum((c == 1) & (b == 0)))
    c_ = int(np.sum((c == 0) & (b == 1)))
    d_ = int(np.sum((c == 0) & (b == 0)))
    p1, p2 = (a_ + b_) / n, (a_ + c_) / n
    diff = p1 - p2
    l1, u1 = _wilson(a_ + b_, n, confidence)
    l2, u2 = _wilson(a_ + c_, n, confidence)
    margins = [a_ + b_, c_ + d_, a_ + c_, b_ + d_]
    if min(margins) == 0:
        psi = 0.0
    else:
        prod = math.sqrt(float(np.prod(np.array(margins, dtype=float))))
        big_a = a_ * d_ - b_ * c_
        if big_a > n / 2:
            psi = (big_a - n / 2) / prod
        elif big_a >= 0:
            psi = 0.0
        else:
            psi = big_a / prod
    lo = diff - math.sqrt(max(0.0, (p1 - l1) ** 2 + (u2 - p2) ** 2 - 2 * psi * (p1 - l1) * (u2 - p2)))
    hi = diff + math.sqrt(max(0.0, (p2 - l2) ** 2 + (u1 - p1) ** 2 - 2 * psi * (p2 - l2) * (u1 - p1)))
    disc = b_ + c_
    mc_p = 1.0 if disc == 0 else float(_sps.binomtest(b_, disc, 0.5).pvalue)
    return PairedDifference(
        name="difference of paired proportions (candidate - baseline)",
        method="Newcombe hybrid score interval for paired proportions (method 10, square-and-add of Wilson intervals)",
        confidence=confidence,
        n_pairs=n,
        baseline_mean=p2,
        candidate_mean=p1,
        difference=diff,
        ci_low=max(-1.0, lo),
        ci_high=min(1.0, hi),
        table=PairedTable(
            both_correct=a_, candidate_only=b_, baseline_only=c_, neither=d_, psi=psi, mcnemar_exact_p=mc_p
        ),
    )


def paired_bootstrap_difference(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    clusters: Sequence[Hashable] | None = None,
    confidence: float = 0.95,
    n_boot: int = 4000,
    seed: int = 0,
) -> PairedDifference:
    """Mean of (candidate - baseline) over pairs with a percentile bootstrap interval.

    Resampling unit: the pair, or with ``clusters`` the cluster (all pairs that share
    a label, e.g. the repeats of one problem); a replicate's statistic is the mean
    difference over all pairs of the drawn clusters. ``n_boot`` is raised so that at
    least MIN_TAIL_REPLICATES replicates lie beyond each end. Replicates come from
    ``numpy.random.default_rng(seed)``.
    """
    confidence = check_confidence(confidence)
    b, c = _pair_arrays(baseline, candidate, binary=False)
    d = c - b
    if clusters is None:
        labels = [str(i) for i in range(d.size)]
        codes = np.arange(d.size)
    else:
        if len(clusters) != d.size:
            raise StatsInputError(f"clusters has {len(clusters)} labels for {d.size} pairs; give one label per pair.")
        labels = [str(x) for x in clusters]
        _, codes = np.unique(np.array(labels, dtype=object).astype(str), return_inverse=True)
    n_groups = int(codes.max()) + 1
    sums = np.bincount(codes, weights=d, minlength=n_groups)
    counts = np.bincount(codes, minlength=n_groups).astype(float)
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 100:
        raise StatsInputError(f"n_boot must be an integer >= 100, got {n_boot!r}.")
    tail = (1.0 - confidence) / 2.0
    boots = max(int(n_boot), math.ceil(MIN_TAIL_REPLICATES / tail))
    rng = make_rng(seed)
    reps = np.empty(boots)
    chunk = max(1, 2_000_000 // n_groups)
    for start in range(0, boots, chunk):
        k = min(chunk, boots - start)
        idx = rng.integers(0, n_groups, size=(k, n_groups))
        reps[start : start + k] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    lo, hi = np.quantile(reps, [tail, 1.0 - tail])
    unit = "clusters of pairs" if clusters is not None else "pairs"
    return PairedDifference(
        name="mean paired difference of scores (candidate - baseline)",
        method=f"percentile bootstrap over {unit}",
        confidence=confidence,
        n_pairs=int(d.size),
        baseline_mean=float(b.mean()),
        candidate_mean=float(c.mean()),
        difference=float(d.mean()),
        ci_low=float(lo),
        ci_high=float(hi),
        n_boot=boots,
        seed=int(seed),
        n_clusters=n_groups,
        baseline_scores=b.tolist(),
        candidate_scores=c.tolist(),
        clusters=labels if clusters is not None else None,
    )


def non_inferiority_gate(diff: PairedDifference, *, margin: float, floor: float | None = None) -> NonInferiorityGate:
    """Pass iff ``diff.ci_low >= -margin`` and (no floor, or ``diff.candidate_mean >= floor``).

    The lower end of the two-sided interval makes this a one-sided test at level
    (1 - confidence)/2 of H0: candidate - baseline < -margin.
    """
    if not (0.0 <= margin <= 1.0):
        raise StatsInputError(f"margin must be in [0, 1] on the score scale, got {margin!r}.")
    if floor is not None and not math.isfinite(floor):
        raise StatsInputError(f"floor must be a finite number, got {floor!r}.")
    non_inf = diff.ci_low >= -margin
    meets = True if floor is None else diff.candidate_mean >= floor
    rule = f"pass iff lower bound of (candidate - baseline) >= -{margin:g}"
    if floor is not None:
        rule += f" and candidate mean score >= {floor:g}"
    return NonInferiorityGate(
        name=f"non-inferiority of the candidate ({diff.name})",
        method=f"{diff.method}; lower end of the {diff.confidence:g} two-sided interval",
        margin=margin,
        floor=floor,
        lower_bound=diff.ci_low,
        candidate_score=diff.candidate_mean,
        non_inferior=non_inf,
        meets_floor=meets,
        passed=non_inf and meets,
        rule=rule,
        difference=diff,
    )


def discordant_pairs(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    ids: Sequence[Hashable] | None = None,
    tolerance: float = 0.0,
) -> list[DiscordantPair]:
    """Samples with |candidate - baseline| > tolerance, candidate regressions first (most negative difference)."""
    b, c = _pair_arrays(baseline, candidate, binary=False)
    if ids is not None and len(ids) != b.size:
        raise StatsInputError(f"ids has {len(ids)} entries for {b.size} pairs.")
    names = [str(x) for x in ids] if ids is not None else [str(i) for i in range(b.size)]
    d = c - b
    out = [
        DiscordantPair(sample_id=names[i], baseline=float(b[i]), candidate=float(c[i]), difference=float(d[i]))
        for i in range(b.size)
        if abs(d[i]) > tolerance
    ]
    out.sort(key=lambda p: (p.difference, p.sample_id))
    return out
