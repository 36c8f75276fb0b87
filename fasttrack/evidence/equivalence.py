"""The equivalence check's evidence: a row per config point (greedy outputs compared over its requests) and a
row per request pair.

A point fails when its requests break the judging scope's equivalence gate (the close fraction below
``min_close_fraction``, candidate vs baseline or, with an ``exact`` reference variant, against it; the mean KL above
``max_kl``; and either the largest |Δ logprob| on matching prefixes above ``max_abs_logprob_diff`` or, with
``reference``, a distance from the reference above the calibrated limit: :mod:`fasttrack.evidence.calibration`),
when a side's batch composition was not verified, when the candidate's profiled window ran no optimized decode
step, or when the point recorded other problems (a failed request, prompts that differ); a condition that could
not be observed (no batch check, no profiled window) leaves it not run.
Re-judging recomputes that verdict from the row's figures and the gate, checks the figures against the
point's request rows (how many, how many close and exact, the largest drift), and requires a row for every
point the plan compares: every point of a non-synthetic engine group except the full-context ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from fasttrack import registry
from fasttrack.evidence.base import (
    Checker,
    CheckEvidence,
    Rejudged,
    Row,
    RowVerdict,
    TableSpec,
    at_most,
    fold,
    headroom,
    worst,
)
from fasttrack.evidence.calibration import CalibratedRow, calibrated_problems, close_vs_reference
from fasttrack.evidence.expect import RejudgeContext

CHECK = "equivalence"


class EquivalencePointRow(CalibratedRow):
    """One config point: its request pairs summarised, the batch checks, the path, the verdict (and, with a
    reference, the calibrated figures)."""

    KEY: ClassVar[tuple[str, ...]] = ("point",)

    group: str | None = None
    point: str
    batch: int | None = None
    context: int | None = None
    verdict: RowVerdict
    requests: int
    """Request pairs sent at the point."""
    n_exact: int
    n_close: int
    close_fraction: float | None
    """Share of the compared requests that satisfy vLLM's check_logprobs_close rule."""
    max_abs_logprob_diff: float | None
    mean_abs_logprob_diff: float | None = None
    kl_mean: float | None
    kl_max: float | None = None
    baseline_batch_verified: bool | None
    baseline_batch_evidence: str | None = None
    candidate_batch_verified: bool | None
    candidate_batch_evidence: str | None = None
    candidate_decode_steps: int | None = None
    candidate_optimized_decode_steps: int | None = None
    candidate_path_evidence: bool | None
    problems: str
    """Every problem found, ``; ``-joined (empty: none)."""
    missing_evidence: str
    """Every required condition that could not be observed (empty: none)."""


class EquivalenceRequestRow(Row):
    """One request pair of one point: exact match, the first divergence and the logprob drift before it."""

    KEY: ClassVar[tuple[str, ...]] = ("point", "round", "prompt_id")

    group: str | None = None
    point: str
    batch: int | None = None
    round: int | None = None
    prompt_id: str | None = None
    prompt_tokens: int | None = None
    prompt_sha: str | None = None
    exact_match: bool
    first_divergence: int | None = None
    close: bool
    close_reason: str | None = None
    n_prefix_compared: int | None = None
    max_abs_logprob_diff: float | None
    mean_abs_logprob_diff: float | None = None
    kl_mean: float | None = None
    kl_max: float | None = None
    baseline_tokens: int | None = None
    candidate_tokens: int | None = None
    baseline_text: str | None = None
    candidate_text: str | None = None


def point_verdict(r: EquivalencePointRow, gate: Any) -> tuple[str, list[str]]:
    """The verdict the gate gives a point's figures, and every reason it is not a pass."""
    problems: list[str] = []
    if r.problems.strip():
        problems.append(f"recorded problems: {r.problems[:200]}")
    compared = r.close_fraction is not None
    if compared:
        # the close rule against the exact reference, where the row was judged there (calibrated_problems)
        vs_baseline = close_vs_reference(r, gate.reference) is None
        if vs_baseline and not (r.close_fraction is not None and r.close_fraction >= gate.min_close_fraction):
            problems.append(f"close fraction {r.close_fraction} < {gate.min_close_fraction:g}")
        fixed = gate.max_abs_logprob_diff if gate.reference is None else None
        if r.max_abs_logprob_diff is not None and fixed is not None and not at_most(r.max_abs_logprob_diff, fixed):
            problems.append(f"max |Δ logprob| {r.max_abs_logprob_diff} > {fixed:g}")
        if r.kl_mean is not None and not at_most(r.kl_mean, gate.max_kl):
            problems.append(f"mean KL {r.kl_mean} > {gate.max_kl:g}")
    uncalibrated: list[str] = []
    if compared and gate.reference is not None:
        broken, uncalibrated = calibrated_problems(r, gate.reference, gate.min_close_fraction)
        problems.extend(broken)
    for who, ok in (("baseline", r.baseline_batch_verified), ("candidate", r.candidate_batch_verified)):
        if ok is False:
            problems.append(f"the {who}'s batch composition was not verified")
    steps, opt = r.candidate_decode_steps, r.candidate_optimized_decode_steps
    if r.candidate_path_evidence and steps and opt == 0:
        problems.append("the candidate's window ran no optimized decode step")
    if problems:
        return "fail", problems
    if not compared:
        return "not_run", ["no request pair was compared"]
    missing = list(uncalibrated)
    if r.missing_evidence.strip():
        missing.append(f"not observed: {r.missing_evidence[:200]}")
    if not r.candidate_path_evidence:
        missing.append("no profiled window of the candidate")
    if r.baseline_batch_verified is None or r.candidate_batch_verified is None:
        missing.append("a side's batch composition has no check")
    if missing:
        return "not_run", missing
    return "pass", []


def _request_problems(r: EquivalencePointRow, reqs: Sequence[EquivalenceRequestRow]) -> list[str]:
    """Where a point's figures disagree with its request rows."""
    out = []
    if len(reqs) > r.requests:
        out.append(f"{len(reqs)} request rows, but the point says {r.requests} requests")
    if reqs:
        n_close = sum(1 for q in reqs if q.close)
        n_exact = sum(1 for q in reqs if q.exact_match)
        if n_close != r.n_close or n_exact != r.n_exact:
            out.append(
                f"its request rows have {n_close} close and {n_exact} exact, the point says {r.n_close} and {r.n_exact}"
            )
        drifts = [q.max_abs_logprob_diff for q in reqs if q.max_abs_logprob_diff is not None]
        if drifts and (r.max_abs_logprob_diff is None or max(drifts) > r.max_abs_logprob_diff + 1e-9):
            out.append(f"a request row drifts by {max(drifts)}, the point says {r.max_abs_logprob_diff}")
        if r.close_fraction is not None and r.close_fraction > n_close / len(reqs) + 1e-9:
            out.append(f"close fraction {r.close_fraction}, but {n_close} of {len(reqs)} request rows are close")
    return out


def rejudge(tables: Mapping[str, Sequence[Row]], gate: Any, ctx: RejudgeContext) -> Rejudged:
    c = Checker(CHECK)
    if gate is None:
        c.gap(None, f"{ctx.source} has no equivalence gate")
        return c.done("not_run")
    requests: dict[tuple[str, str | None], list[EquivalenceRequestRow]] = {}
    for q in tables.get("equivalence_requests", ()):
        assert isinstance(q, EquivalenceRequestRow)
        requests.setdefault((q.point, q.shard), []).append(q)
    verdicts: dict[str, str] = {}
    seen: set[tuple[str, str | None]] = set()
    for i, r in enumerate(tables.get("equivalence_points", ())):
        assert isinstance(r, EquivalencePointRow)
        if (r.point, r.shard) in seen:
            c.row("equivalence_points", i, r, "a second row for this point")
            continue
        seen.add((r.point, r.shard))
        v, why = point_verdict(r, gate)
        c.verdict("equivalence_points", i, r, r.verdict, v, "; ".join(why) or "within every threshold")
        for problem in _request_problems(r, requests.get((r.point, r.shard), [])):
            c.row("equivalence_points", i, r, problem)
            v = worst(v, "not_run")
        verdicts[r.point] = worst(v, verdicts.get(r.point, "pass"))
    want = [p.id for p in ctx.points if not p.full_context and not p.synthetic]
    missing = [p for p in want if p not in verdicts]
    if missing:
        c.gap("equivalence_points", f"no row for {len(missing)} planned point(s): {', '.join(missing[:6])}")
    bound = worst(fold(verdicts.get(p, "not_run") for p in want) if want else fold(verdicts.values()))
    drift = (
        f"max |Δ logprob| <= {gate.max_abs_logprob_diff:g}"
        if gate.reference is None
        else f"each distance from {gate.reference.reference_name} <= {gate.reference.multiple:g} x stock's + tolerance"
    )
    limits = f"close fraction >= {gate.min_close_fraction:g}, {drift}, mean KL <= {gate.max_kl:g}"
    return c.done(bound, [f"{len(verdicts)} point(s) re-judged against {limits}"])


EVIDENCE = registry.register(
    "evidence",
    CHECK,
    CheckEvidence(
        check=CHECK,
        tables=(
            TableSpec(
                "equivalence_points",
                EquivalencePointRow,
                lambda ctx: headroom(ctx.n_points),
                version=2,  # v2: close fractions against the exact reference (v1 rows: candidate vs baseline)
                keep=tuple(EquivalencePointRow.model_fields),
            ),
            TableSpec(
                "equivalence_requests",
                EquivalenceRequestRow,
                lambda ctx: headroom(ctx.n_points * max(8, ctx.max_batch) * 4),
                keep=("exact_match", "close", "max_abs_logprob_diff"),
            ),
        ),
        rejudge=rejudge,
    ),
)
