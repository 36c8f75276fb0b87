"""What the evals check's work costs (its ``cost`` declaration; units in :mod:`fasttrack.planning.cost`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fasttrack.planning.cost import CheckCost, ConfigPoint, GroupWork, Work

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.scope import Estimates, EvalSpec, TierSpec

KNOWN_EVAL_SIZES = {"aime25": 30, "mrcr": 2400}
"""Samples of the public eval datasets (AIME 2025: 30 problems; OpenAI MRCR: 2,400 rows), where an eval names no
limit and the tier none either."""
EVAL_PROMPT_TOKENS = 512
"""Prompt tokens of an eval sample other than MRCR's (an AIME problem is a few hundred)."""
EVIDENCE_TOKENS = 64
"""Tokens per request of an eval's profiled evidence run (2 x batch requests)."""


def _eval_points(spec: EvalSpec, points: Sequence[ConfigPoint]) -> dict[int, list[ConfigPoint]]:
    """The group's points an eval's ``points`` filter selects, by batch (one lm-eval run per batch)."""
    out: dict[int, list[ConfigPoint]] = {}
    for p in points:
        if all(getattr(p, dim, None) in vals or (dim == "context" and p.full_context and "full" in vals)
               for dim, vals in spec.points.items()):  # fmt: skip
            out.setdefault(p.batch, []).append(p)
    return out


def _eval_samples(spec: EvalSpec, tier: TierSpec, est: Estimates) -> int:
    size = est.eval_samples.get(spec.name) or KNOWN_EVAL_SIZES.get(spec.kind) or est.eval_samples.get("*") or 100
    for cap in (spec.limit, tier.eval_limit):
        if cap is not None:
            size = min(size, cap)
    return size


def _per_group(w: Work, on: GroupWork) -> None:
    """Per eval, side and batch of the points its filter selects (not the synthetic-acceptance groups): the
    samples x repeats in waves of the batch, their prompts and the run's overhead; the baseline graded twice (its
    agreement with itself), the candidate once; plus a profiled evidence run per side."""
    if on.group.synthetic_acceptance:
        return
    m, est = w.model, w.est
    for spec in w.scope.evals:
        if w.tier.evals is not None and spec.name not in w.tier.evals:
            continue
        n = _eval_samples(spec, w.tier, est) * spec.repeats
        out = max(1, round(spec.max_tokens * est.eval_output_fraction))
        for b, bpts in _eval_points(spec, on.points).items():
            # MRCR's prompts fill the point's context (its longest samples first at long-context points); other
            # evals' prompts are a problem statement
            ctx = min(p.context for p in bpts)
            prompt = ctx if spec.kind == "mrcr" else min(ctx, EVAL_PROMPT_TOKENS)
            graded = est.eval_run_s + m.decode(n, b, out) + m.prefill(n * prompt)
            evidence = est.eval_run_s + m.decode(2 * b, b, EVIDENCE_TOKENS) + est.profile_window_s
            for runs in (2, 1):  # the baseline graded twice (its own agreement), the candidate once
                w.add(runs * graded + evidence, requests=runs * n + 2 * b, tokens=runs * n * out)


COST = CheckCost(per_group=_per_group)
