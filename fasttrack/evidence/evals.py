"""The evals check's evidence: every lm-eval run and scored sample, and one comparison per (eval, point) with
its two non-inferiority gates.

A comparison passes when the lower bound of the candidate's score difference reaches ``-margin`` and its mean
score reaches ``floor`` (the task gate), and the lower bound of its agreement difference against the
baseline's own repeat reaches ``-margin`` (the agreement gate; none without a repeated baseline run, which is
never a pass). Re-judging recomputes ``task_pass``, ``agreement_pass`` and ``passed`` from those figures and
the margin and floor the judging scope gives the eval, and requires a comparison for every eval of the tier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from fasttrack import registry
from fasttrack.evidence.base import Checker, CheckEvidence, Rejudged, Row, TableSpec, at_least, fold, headroom
from fasttrack.evidence.expect import RejudgeContext

CHECK = "evals"


class EvalComparisonRow(Row):
    """One eval at one point: the task gate and the agreement gate, with their intervals."""

    KEY: ClassVar[tuple[str, ...]] = ("eval", "point")

    eval: str
    kind: str | None = None
    point: str
    batch: int | None = None
    pairs: int | None = None
    samples: int | None = None
    repeats: int | None = None
    margin: float | None = None
    floor: float | None = None
    baseline_score: float | None = None
    candidate_score: float | None
    """The candidate's mean score (the floor applies to it)."""
    score_difference: float | None = None
    score_ci_low: float | None
    """Lower end of the interval of candidate minus baseline score."""
    score_ci_high: float | None = None
    score_method: str | None = None
    newcombe_ci_low: float | None = None
    newcombe_ci_high: float | None = None
    task_pass: bool
    min_detectable_drop: float | None = None
    min_detectable_drop_power: float | None = None
    agreement: float | None = None
    reference_agreement: float | None = None
    agreement_difference: float | None = None
    agreement_ci_low: float | None
    """Lower end of the interval of the candidate's agreement minus the baseline's self-agreement."""
    agreement_ci_high: float | None = None
    exact_match_rate: float | None = None
    reference_exact_match_rate: float | None = None
    agreement_pass: bool | None
    passed: bool


class EvalRunRow(Row):
    """One lm-eval run: eval, point, side, role, repeat and its settings."""

    KEY: ClassVar[tuple[str, ...]] = ("eval", "point", "side", "role", "repeat")

    eval: str | None = None
    kind: str | None = None
    point: str | None = None
    points: str | None = None
    batch: int | None = None
    side: str | None = None
    role: str | None = None
    repeat: int | None = None
    seed: int | None = None
    lifetime: int | None = None
    samples: int | None = None
    mean_score: float | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    num_concurrent: int | None = None
    ignore_eos: bool | None = None
    lm_model: str | None = None
    task_source: str | None = None
    lm_eval_version: str | None = None
    wall_s: float | None = None
    profile_window: str | None = None
    decode_steps: int | None = None
    optimized_decode_steps: int | None = None
    artifact: str | None = None


class EvalSampleRow(Row):
    """One scored sample of one run."""

    KEY: ClassVar[tuple[str, ...]] = ("eval", "point", "side", "role", "sample_id")

    eval: str | None = None
    point: str | None = None
    side: str | None = None
    role: str | None = None
    repeat: int | None = None
    seed: int | None = None
    sample_id: str | None = None
    score: float | None = None
    output: str | None = None
    agreement_with_baseline: float | None = None
    prompt_sha256: str | None = None
    prompt_tokens: int | None = None
    context_bin: str | None = None
    n_needles: int | None = None


class EvalBreakdownRow(Row):
    """Mean scores and agreement of one comparison's pairs grouped by a dimension (context bin, problem...)."""

    KEY: ClassVar[tuple[str, ...]] = ("eval", "point", "dimension", "group")

    eval: str | None = None
    point: str | None = None
    dimension: str | None = None
    group: str | None = None
    pairs: int | None = None
    baseline_score: float | None = None
    candidate_score: float | None = None
    difference: float | None = None
    agreement: float | None = None
    reference_agreement: float | None = None
    exact_match_rate: float | None = None


class EvalReviewRow(Row):
    """A sample to review: scores that differ between the sides, or an output that agrees less than the baseline's
    own repeat."""

    KEY: ClassVar[tuple[str, ...]] = ("eval", "point", "kind", "sample_id")

    eval: str | None = None
    point: str | None = None
    kind: str | None = None
    sample_id: str | int | None = None
    repeat: int | None = None
    baseline: float | None = None
    candidate: float | None = None
    difference: float | None = None
    agreement: float | None = None
    reference_agreement: float | None = None
    baseline_score: float | None = None
    candidate_score: float | None = None
    baseline_output: str | None = None
    candidate_output: str | None = None


def gates(r: EvalComparisonRow, margin: float, floor: float) -> tuple[bool, bool | None, bool]:
    """(task_pass, agreement_pass, passed) from the row's figures and the eval's margin and floor."""
    task = at_least(r.score_ci_low, -margin) and at_least(r.candidate_score, floor)
    agreement = None if r.agreement_ci_low is None else at_least(r.agreement_ci_low, -margin)
    return task, agreement, task and agreement is True


def rejudge(tables: Mapping[str, Sequence[Row]], gate: Any, ctx: RejudgeContext) -> Rejudged:
    c = Checker(CHECK)
    specs = {e.name: e for e in ctx.scope.evals}
    verdicts: dict[str, list[str]] = {}
    for i, r in enumerate(tables.get("eval_comparisons", ())):
        assert isinstance(r, EvalComparisonRow)
        spec = specs.get(r.eval)
        if spec is None:
            c.row("eval_comparisons", i, r, f"eval {r.eval!r} is not an eval of {ctx.source}")
            continue
        task, agreement, passed = gates(r, spec.margin, spec.floor)
        recorded = (r.task_pass, r.agreement_pass, r.passed)
        if recorded != (task, agreement, passed):
            c.row(
                "eval_comparisons",
                i,
                r,
                f"recorded task_pass/agreement_pass/passed {recorded}, the figures give {(task, agreement, passed)} "
                f"(margin {spec.margin:g}, floor {spec.floor:g})",
            )
        verdicts.setdefault(r.eval, []).append("pass" if passed else "fail")
    want = ctx.tier_evals()
    missing = [e for e in want if e not in verdicts]
    if missing:
        c.gap("eval_comparisons", f"no comparison for {len(missing)} eval(s) of the tier: {', '.join(missing)}")
    bound = fold(fold(verdicts.get(e, [])) for e in want) if want else fold(fold(v) for v in verdicts.values())
    return c.done(
        bound, [f"{sum(map(len, verdicts.values()))} comparison(s) re-judged by each eval's margin and floor"]
    )


def _samples(ctx: RejudgeContext) -> int:
    return headroom(ctx.eval_sample_rows(), factor=2)


EVIDENCE = registry.register(
    "evidence",
    CHECK,
    CheckEvidence(
        check=CHECK,
        tables=(
            TableSpec(
                "eval_comparisons",
                EvalComparisonRow,
                lambda ctx: headroom(len(ctx.scope.evals) * ctx.n_points),
                keep=tuple(EvalComparisonRow.model_fields),
            ),
            TableSpec("eval_runs", EvalRunRow, lambda ctx: headroom(len(ctx.scope.evals) * ctx.n_points * 3 * 2 * 100)),
            TableSpec("eval_samples", EvalSampleRow, _samples),
            TableSpec("eval_breakdown", EvalBreakdownRow, _samples, required=False),
            TableSpec("eval_review", EvalReviewRow, _samples, required=False),
        ),
        rejudge=rejudge,
    ),
)
