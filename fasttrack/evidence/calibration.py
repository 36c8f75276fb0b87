"""The calibrated equivalence figures a row carries when the scope names ``gates.equivalence.reference``, and
how they are re-judged.

With a reference, the equivalence check's points and the ``full_context`` and ``logprobs`` features record, per
distance from the reference (max and mean |Δ logprob| on matching prefixes, mean top-k KL, divergence), the
candidate's figure, the largest of stock's builds' (and which build gave it) and the limit the run applied.
Re-judging recomputes each limit from the judging scope's ``reference`` (``multiple`` x stock's figure, squared
for the KL, + ``tolerance``), never from the recorded one: a candidate figure above it fails the row. A row that
was calibrated against another reference than the scope's, that carries no calibration, or where the candidate
has a figure stock's builds did not give, cannot pass (the run could not judge it).

With an ``exact`` variant the row also carries the close rule's fraction against it (the candidate's, and the lowest
of stock's builds'): vLLM's ``check_logprobs_close`` rule is then judged there, against the scope's
``min_close_fraction`` (:func:`close_vs_reference`), instead of candidate against baseline.
"""

from __future__ import annotations

import math
from typing import Any

from fasttrack.evidence.base import Row, at_most
from fasttrack.scope.reference import DISTANCES, StockReference


class CalibratedRow(Row):
    """The calibrated figures (all absent in a run whose scope has no reference)."""

    calibration: str | None = None
    """The calibrated judgement in words (or why it could not be made)."""
    reference: str | None = None
    """What the distances are measured from: the exact variant, or ``baseline``."""
    stock_builds: str | None = None
    """Stock's builds measured against the reference, ``, ``-joined."""
    reference_multiple: float | None = None
    reference_requests: int | None = None
    """Requests every engine answered (the distances are over these)."""
    candidate_max_abs_logprob_diff_vs_reference: float | None = None
    stock_max_abs_logprob_diff_vs_reference: float | None = None
    stock_max_abs_logprob_diff_by: str | None = None
    limit_max_abs_logprob_diff: float | None = None
    candidate_mean_abs_logprob_diff_vs_reference: float | None = None
    stock_mean_abs_logprob_diff_vs_reference: float | None = None
    stock_mean_abs_logprob_diff_by: str | None = None
    limit_mean_abs_logprob_diff: float | None = None
    candidate_kl_mean_vs_reference: float | None = None
    stock_kl_mean_vs_reference: float | None = None
    stock_kl_mean_by: str | None = None
    limit_kl_mean: float | None = None
    candidate_divergence_vs_reference: float | None = None
    stock_divergence_vs_reference: float | None = None
    stock_divergence_by: str | None = None
    limit_divergence: float | None = None
    candidate_close_fraction_vs_reference: float | None = None
    """Share of the candidate's requests that satisfy vLLM's check_logprobs_close rule against the exact reference
    (absent without an ``exact`` variant)."""
    stock_close_fraction_vs_reference: float | None = None
    """The lowest such share of stock's builds."""
    stock_close_fraction_by: str | None = None


def close_vs_reference(r: CalibratedRow, spec: StockReference | None) -> float | None:
    """The candidate's close fraction against the exact reference when the judging scope judges the close rule
    there (an ``exact`` variant, and the row calibrated against it); None: the rule is judged candidate vs baseline."""
    if spec is None or spec.exact is None or r.reference != spec.reference_name:
        return None
    return r.candidate_close_fraction_vs_reference


def limit_for(spec: StockReference, name: str, stock: float) -> float:
    """The largest figure of distance ``name`` the scope allows the candidate where stock's is ``stock``."""
    factor = spec.multiple**2 if name == "kl_mean" else spec.multiple
    return factor * stock + float(getattr(spec.tolerance, name))


def calibrated_problems(
    r: CalibratedRow, spec: StockReference, min_close_fraction: float | None = None
) -> tuple[list[str], list[str]]:
    """What the row's calibrated figures break of ``spec`` (each a failure; with ``min_close_fraction``, the close
    rule against the exact reference too), and why they cannot back a pass."""
    if r.reference is None:
        return [], ["the row carries no calibration against stock's builds (gates.equivalence.reference)"]
    if r.reference != spec.reference_name:
        return [], [f"calibrated against {r.reference!r}, the judging scope's reference is {spec.reference_name!r}"]
    broken: list[str] = []
    missing: list[str] = []
    judged = 0
    for name in DISTANCES:
        cand: Any = getattr(r, f"candidate_{name}_vs_reference")
        stock: Any = getattr(r, f"stock_{name}_vs_reference")
        if cand is None:
            continue
        if stock is None:
            missing.append(f"stock's builds give no {name} from {r.reference}, the candidate's is {cand}")
            continue
        limit = limit_for(spec, name, stock)
        if not math.isfinite(limit):
            missing.append(f"stock's {name} from {r.reference} is {stock}, which gives no finite limit")
            continue
        judged += 1
        if not at_most(cand, limit):
            broken.append(f"{name} from {r.reference} {cand} > {limit:.6g} (stock {stock})")
    close = close_vs_reference(r, spec)
    if min_close_fraction is not None and close is not None and not close >= min_close_fraction:
        broken.append(f"close fraction against {r.reference} {close} < {min_close_fraction:g}")
    if not judged and not missing:
        missing.append("no distance from the reference was measured")
    return broken, missing
