"""The coverage check's evidence: which path ran at every (config point, check) cell, the out-of-scope
situations that must fall back visibly, and the path markers themselves.

Re-judging:

* a cell with decode steps passes when the candidate ran at least ``min_optimized_decode_fraction`` (the judging
  scope's coverage gate) of them on the optimized path and the baseline ran no optimized op, else fails (or is
  not run when the declared device counter could not confirm the steps); a cell without decode steps is
  ``not_exercised`` or not run; ``in_plan`` says whether its point is a point of the judging scope's plan;
* a situation row passes only when its probe produced steps, none of them optimized, and (on the candidate) every
  one showed the stock markers and the fallback was visible where the scope asks; a started unsupported
  deployment that should have been refused fails;
* the bound: every planned point exercised by some check (else not run), no check whose candidate never reached
  the optimized path, and the in-plan cells, the candidate's situations and the failed baseline situations
  folded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from fasttrack import registry
from fasttrack.evidence.base import Checker, CheckEvidence, Rejudged, Row, RowVerdict, TableSpec, fold, headroom, worst
from fasttrack.evidence.expect import RejudgeContext

CHECK = "coverage"


class CoverageCellRow(Row):
    """One (config point, check) cell: the candidate's decode steps on the optimized path at that point."""

    KEY: ClassVar[tuple[str, ...]] = ("point", "check")

    point: str
    check: str
    in_plan: bool
    """Whether the point is a point of the plan (a cell outside it is shown, not judged)."""
    verdict: Literal["pass", "fail", "not_run", "not_exercised"]
    candidate_decode_steps: int
    """The candidate's decode steps at the point within the envelope's batch range."""
    candidate_optimized_decode_steps: int
    candidate_optimized_fraction: float | None = None
    threshold: float | None = None
    candidate_optimized_ops: int | None = None
    candidate_stock_ops: int | None = None
    candidate_fallback_events: int | None = None
    candidate_device_counted: bool | None = None
    candidate_device_unconfirmed_steps: int | None = None
    baseline_decode_steps: int | None = None
    baseline_optimized_ops: int
    baseline_stock_ops: int | None = None
    windows: str | None = None
    detail: str | None = None


class CoverageSituationRow(Row):
    """One out-of-scope situation probed on one side (or the unsupported deployment started on the candidate)."""

    KEY: ClassVar[tuple[str, ...]] = ("group", "situation", "side")

    group: str | None = None
    situation: str
    side: Literal["baseline", "candidate"]
    verdict: RowVerdict
    steps: int | None = None
    optimized_steps: int | None = None
    stock_steps: int | None = None
    fallback_visible: bool | None = None
    fallback_line: str | None = None
    fallback_metric_delta: float | None = None
    detail: str | None = None
    expected: str | None = None
    """An unsupported deployment: what the scope declares (``reject_at_startup`` or ``fallback``)."""
    started: bool | None = None
    exit_code: int | None = None
    args: str | None = None


class CoverageMarkerRow(Row):
    """One path marker of the scope, checked against the ops the engines reported."""

    KEY: ClassVar[tuple[str, ...]] = ("marker",)

    marker: str
    kind: str | None = None
    expected_on: str | None = None
    baseline_windows: int | None = None
    candidate_windows: int | None = None
    baseline_ops: str | None = None
    candidate_ops: str | None = None
    candidate_optimized_steps_with_stock_ops: int | None = None
    verdict: RowVerdict
    detail: str | None = None


def cell_verdicts(r: CoverageCellRow, thr: float) -> tuple[set[str], str]:
    """The verdicts a cell's figures allow, and why."""
    n, opt = r.candidate_decode_steps, r.candidate_optimized_decode_steps
    if n <= 0:
        return {"not_exercised", "not_run"}, "no decode step of the candidate at this point"
    problems = []
    if not opt / n >= thr:
        problems.append(f"{opt} of {n} decode steps on the optimized path (< {thr:g})")
    if r.baseline_optimized_ops:
        problems.append(f"the baseline ran {r.baseline_optimized_ops} optimized-path op(s)")
    allowed = {"fail" if problems else "pass"}
    if r.candidate_device_counted is False:
        allowed.add("not_run")  # the declared device counter could not confirm the steps
    return allowed, "; ".join(problems) or f"{opt} of {n} decode steps on the optimized path (>= {thr:g})"


def situation_verdicts(r: CoverageSituationRow, scope: Any) -> tuple[set[str], str]:
    """The verdicts a situation row's figures allow (a pass needs each condition shown), and why."""
    if r.situation == "unsupported_deployment" and r.expected is not None:
        if r.started is None:
            return {"not_run"}, "not started"
        if r.expected == "reject_at_startup":
            return ({"fail"}, "it started outside its envelope") if r.started else ({"pass", "fail"}, "refused")
        ok = r.started and bool(r.fallback_visible or not getattr(scope.fallback, "visible", False))
        return ({"pass", "fail"}, "served, fallback visible") if ok else ({"fail"}, "no visible fallback")
    if not r.steps:
        return {"not_run"}, "the probe produced no step of the situation"
    if r.optimized_steps:
        return {"fail"}, f"{r.optimized_steps} of {r.steps} steps ran optimized-path ops"
    if r.side == "candidate":
        fb = scope.fallback
        if fb is not None and fb.visible and r.fallback_visible is False:
            return {"fail"}, "the fallback is not visible"
        if (r.stock_steps or 0) < r.steps:
            return {"fail", "not_run"}, f"only {r.stock_steps} of {r.steps} steps show the stock markers"
    return {"pass", "fail", "not_run"}, "no optimized step"


def _cells(c: Checker, rows: Sequence[Row], thr: float, planned: set[str]) -> tuple[list[str], set[str]]:
    """Re-judge the cells; their verdicts (in plan) and the planned points some check exercised."""
    verdicts, exercised = [], set()
    per_check: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        assert isinstance(r, CoverageCellRow)
        if r.in_plan != (r.point in planned):
            c.row(
                "coverage",
                i,
                r,
                f"in_plan is {r.in_plan}, but the point is {'' if r.point in planned else 'not '}planned",
            )
        allowed, why = cell_verdicts(r, thr)
        if r.verdict not in allowed:
            c.row(
                "coverage",
                i,
                r,
                f"recorded verdict {r.verdict!r}, the numbers give {'/'.join(sorted(allowed))} ({why})",
            )
        v = r.verdict if r.verdict in allowed else worst(*(a for a in allowed if a != "not_exercised"))
        if r.point in planned and v != "not_exercised":
            verdicts.append(v)
            if v in ("pass", "fail"):
                exercised.add(r.point)
        if r.candidate_decode_steps > 0:
            acc = per_check.setdefault(r.check, [0, 0])
            acc[0] += r.candidate_decode_steps
            acc[1] += r.candidate_optimized_decode_steps
    for check, (n, opt) in sorted(per_check.items()):
        if n and opt == 0:
            c.gap("coverage", f"check {check!r} never ran the optimized path ({n} decode steps)")
            verdicts.append("fail")
    return verdicts, exercised


def rejudge(tables: Mapping[str, Sequence[Row]], gate: Any, ctx: RejudgeContext) -> Rejudged:
    c = Checker(CHECK)
    if gate is None:
        c.gap(None, f"{ctx.source} has no coverage gate")
        return c.done("not_run")
    thr = gate.min_optimized_decode_fraction
    planned = {p.id for p in ctx.points}
    verdicts, exercised = _cells(c, tables.get("coverage", ()), thr, planned)
    unseen = sorted(planned - exercised)
    if unseen:
        verdicts.append("not_run")
        c.gap("coverage", f"{len(unseen)} planned point(s) without decode evidence: {', '.join(unseen[:6])}")
    for i, s in enumerate(tables.get("fallback", ())):
        assert isinstance(s, CoverageSituationRow)
        allowed, why = situation_verdicts(s, ctx.scope)
        if s.verdict not in allowed:
            c.row(
                "fallback",
                i,
                s,
                f"recorded verdict {s.verdict!r}, the figures give {'/'.join(sorted(allowed))} ({why})",
            )
        v = s.verdict if s.verdict in allowed else worst(*allowed)
        if s.side == "candidate" or v == "fail":
            verdicts.append(v)
    for m in tables.get("markers", ()):
        assert isinstance(m, CoverageMarkerRow)
        if "scope error" in (m.detail or ""):
            verdicts.append("not_run")
    bound = fold(verdicts) if planned or verdicts else "not_run"
    return c.done(bound, [f"{len(tables.get('coverage', ()))} cell(s) re-judged against fraction >= {thr:g}"])


EVIDENCE = registry.register(
    "evidence",
    CHECK,
    CheckEvidence(
        check=CHECK,
        tables=(
            TableSpec(
                "coverage",
                CoverageCellRow,
                lambda ctx: headroom(ctx.n_points * 16),
                keep=tuple(CoverageCellRow.model_fields),
            ),
            TableSpec(
                "fallback",
                CoverageSituationRow,
                lambda ctx: headroom(ctx.n_groups * 2 * 16),
                keep=tuple(CoverageSituationRow.model_fields),
            ),
            TableSpec("markers", CoverageMarkerRow, lambda ctx: headroom(64), keep=("verdict", "detail")),
        ),
        rejudge=rejudge,
    ),
)
