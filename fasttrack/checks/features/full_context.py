"""``full_context``: prompts that fill ``max_model_len``, on both sides, equivalent outputs.

At every full-context point, ``batch`` prompts of exactly ``context`` tokens
(``max_model_len - max_tokens``, real passages) run greedy to ``max_model_len``; both
sides must succeed with the reported token counts, and outputs must pass the
equivalence thresholds: vLLM's close rule and the KL cap, and either the absolute
``max_abs_logprob_diff`` or, with ``gates.equivalence.reference``, the calibrated rule
(:mod:`fasttrack.checks.equivalence.reference`) against the reference variants' outputs
of the same prompts (a variant without them leaves the point ``not_run``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from fasttrack import attrs
from fasttrack.checks.batching import BatchCheck, run_batched
from fasttrack.checks.equivalence.reference import Outputs, calibrate_by_gate
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import FeatureResult, GreedyOutput, Outcome, err, greedy_output, tops
from fasttrack.checks.features.spec import GroupPlan, OnGroup, ServingFeature, Step, serving_feature
from fasttrack.checks.outcome import clip, fold_verdicts
from fasttrack.checks.tier import Blocker, TierView
from fasttrack.checks.windows import WindowRecord
from fasttrack.modelbase import DocModel
from fasttrack.planning.plan import ConfigPoint
from fasttrack.results import Verdict
from fasttrack.scope import EquivalenceGate
from fasttrack.stats import GreedyComparison, compare_greedy, summarize_greedy
from fasttrack.stats.logprobs import GreedySummary


class FullRecord(GreedyOutput):
    """One full-context request: its token counts and greedy output, or the error."""

    error: str | None = None
    prompt_tokens: int
    completion_tokens: int
    text: str = ""


class FullRun(DocModel):
    """The requests at one full-context point."""

    point: str
    batch: int
    context: int
    max_tokens: int
    records: list[FullRecord] = Field(default_factory=list)
    batch_check: BatchCheck | None = None


class FullContextResult(FeatureResult):
    runs: list[FullRun] = Field(default_factory=list)


@serving_feature
class FullContext(ServingFeature[FullContextResult]):
    name: ClassVar[str] = "full_context"
    decode_steps: ClassVar[int] = 600
    uses_reference: ClassVar[bool] = True
    result_model: ClassVar[type[FeatureResult]] = FullContextResult

    def steps(self, gp: GroupPlan) -> list[Step]:
        """Every selected full-context point, in one step at the first one."""
        fulls = gp.full_points
        if not fulls:
            return []
        return [Step(point=fulls[0].id, batch=fulls[0].batch, run=lambda env: self.collect(env, fulls))]

    def blockers(self, tier: TierView) -> list[Blocker]:
        if any(p.full_context for p in tier.plan.points):
            return []
        return [
            tier.blocker(
                "feature full_context",
                f"the {tier.tier} tier has no point at the full context",
                f"add 'full' to {tier.hint}.context, or leave full_context out of {tier.hint}.features",
            )
        ]

    async def collect(self, env: FeatureEnv, points: list[ConfigPoint]) -> None:
        """At every full-context point, ``batch`` prompts of exactly ``context`` tokens, greedy to max_model_len."""
        eq = env.ctx.scope.gates.equivalence
        res = self.mine(env)
        res.points.extend(p.id for p in points)
        for point in points:
            res.runs.append(await _full_round(env, point, eq))

    def judge(self, on: OnGroup, base: FullContextResult, cand: FullContextResult) -> Outcome:
        eq = on.ctx.scope.gates.equivalence
        rows, failures, verdicts = [], [], []
        bpts = {r.point: r for r in base.runs}
        variants = self.variant_results(on)
        for crun in cand.runs:
            brun = bpts.get(crun.point)
            if brun is None:
                verdicts.append(Verdict.NOT_RUN)
                continue
            at = {n: _run_at(v, crun.point) for n, v in variants.items()}
            row, failure = _judge_point(on.gid, brun, crun, eq, on.windows, at)
            verdicts.append(Verdict(row["verdict"]))
            rows.append(row)
            if failure:
                failures.append(failure)
        verdict = fold_verdicts(verdicts)
        reason = f"full context: {sum(x is Verdict.PASS for x in verdicts)}/{len(verdicts)} points pass"
        unjudged = [f"{r['point']}: {r['detail']}" for r in rows if r["verdict"] == "not_run" and r.get("detail")]
        if verdict is Verdict.NOT_RUN and unjudged:
            reason += "; not judged: " + "; ".join(unjudged[:2])
        return Outcome(
            feature=self.name,
            verdict=verdict,
            reason=reason,
            rows=rows,
            failures=failures,
        )


async def _full_round(env: FeatureEnv, point: ConfigPoint, eq: EquivalenceGate) -> FullRun:
    ids_all = await env.full_prompts(point)
    max_tokens = (
        (env.ctx.scope.envelope.context.max_model_len - point.context) if env.ctx.scope.envelope else eq.max_tokens
    )
    res, bc = await run_batched(
        lambda: [
            env.client.complete(
                ids, max_tokens=max_tokens, temperature=0.0, logprobs=eq.top_k, tokens_as_ids=True, ignore_eos=True
            )
            for ids in ids_all
        ],
        client=env.client,
        target=point.batch,
        attempts=1,
    )
    recs = []
    for ids, r in zip(ids_all, res, strict=False):
        if isinstance(r, BaseException):
            recs.append(FullRecord(error=err(r), prompt_tokens=len(ids), completion_tokens=0))
            continue
        ch = r.choice
        recs.append(
            FullRecord(
                prompt_tokens=r.usage.prompt_tokens if r.usage else len(ids),
                completion_tokens=r.usage.completion_tokens if r.usage else len(ch.token_ids or []),
                text=ch.text,
                **greedy_output(ch),
            )
        )
    return FullRun(
        point=point.id, batch=point.batch, context=point.context, max_tokens=max_tokens, records=recs, batch_check=bc
    )


def _run_at(res: FullContextResult | str, point: str) -> FullRun | str:
    """A reference variant's run at ``point``, or why it has none."""
    if isinstance(res, str):
        return res
    return next((r for r in res.runs if r.point == point), "it has no run at this point")


def _outputs(run: FullRun) -> Outputs:
    return {j: (r.token_ids, tops(r)) for j, r in enumerate(run.records) if not r.error}


def _judge_point(
    gid: str,
    brun: FullRun,
    crun: FullRun,
    eq: EquivalenceGate,
    windows: list[WindowRecord],
    variants: Mapping[str, FullRun | str],
) -> tuple[dict[str, Any], str | None]:
    """The row of one full-context point both sides ran, and its failure message (None when it passes)."""
    problems: list[str] = []
    comps: list[GreedyComparison] = []
    for br, cr in zip(brun.records, crun.records, strict=False):
        for who, r in (("baseline", br), ("candidate", cr)):
            if r.error:
                problems.append(f"the {who} request failed: {r.error}")
            elif r.prompt_tokens != crun.context or r.completion_tokens != crun.max_tokens:
                problems.append(
                    f"the {who} reported {r.prompt_tokens} prompt + {r.completion_tokens} "
                    f"completion tokens, expected {crun.context} + {crun.max_tokens}"
                )
        if br.error or cr.error:
            continue
        comps.append(compare_greedy(br.token_ids, cr.token_ids, tops(br), tops(cr), top_k=eq.top_k))
    summ = summarize_greedy(comps) if comps else None
    cal = None
    if eq.reference is not None and comps:
        vouts = {n: v if isinstance(v, str) else _outputs(v) for n, v in variants.items()}
        cal = calibrate_by_gate(eq, baseline=_outputs(brun), candidate=_outputs(crun), variants=vouts)
    problems.extend(_threshold_problems(summ, eq, close=not (cal is not None and cal.judges_close)))
    if cal is not None:
        problems.extend(cal.problems)
    missing = cal.missing if cal is not None else []
    v = Verdict.FAIL if problems else (Verdict.PASS if comps and not missing else Verdict.NOT_RUN)
    row = _row(gid, crun, v, summ, windows)
    row["detail"] = "; ".join(problems or missing)
    if cal is not None:
        row.update(calibration=cal.text(), **cal.row())
    if not problems:
        return row, None
    return row, _failure(brun, crun, comps, problems)


def _threshold_problems(summ: GreedySummary | None, eq: EquivalenceGate, *, close: bool = True) -> list[str]:
    """The close rule (unless ``close`` is false: judged against the exact reference by the calibration), the KL
    cap and (without ``reference``) the absolute logprob limit, candidate vs baseline."""
    if summ is None:
        return []
    drift_limit = eq.max_abs_logprob_diff if eq.reference is None else None
    broken_close, drift, kl = summ.breaks(
        min_close_fraction=eq.min_close_fraction, max_abs_logprob_diff=drift_limit, max_kl=eq.max_kl
    )
    problems = []
    if broken_close and close:
        problems.append(
            f"{summ.n_requests - summ.n_close} of {summ.n_requests} outputs break the check_logprobs_close rule"
        )
    if drift:
        problems.append(f"max |Δ logprob| {summ.max_abs_logprob_diff:.4f} > {eq.max_abs_logprob_diff:g}")
    if kl:
        problems.append(f"mean top-k KL {summ.kl_mean:.4f} > {eq.max_kl:g}")
    return problems


def _row(
    gid: str, crun: FullRun, v: Verdict, summ: GreedySummary | None, windows: list[WindowRecord]
) -> dict[str, Any]:
    # Batch composition is recorded, not gated: long prompts prefill one after another (chunked prefill
    # admits one long prompt at a time), so short generations may finish before the last prefill ends.
    win = next((w for w in windows if crun.point in w.points), None)
    bc = crun.batch_check
    steps_at = win.steps_at(crun.batch) if win is not None and win.available else None
    return {
        "feature": "full_context",
        "group": gid,
        "point": crun.point,
        "batch": crun.batch,
        "context": crun.context,
        "max_tokens": crun.max_tokens,
        "verdict": v.value,
        **attrs(summ, "n_close", "n_exact", "max_abs_logprob_diff", "kl_mean"),
        "batch_verified": bc.verified if bc else None,
        "batch_evidence": bc.detail if bc else None,
        "trace_decode_steps_at_batch": steps_at[0] if steps_at else None,
    }


def _failure(brun: FullRun, crun: FullRun, comps: list[GreedyComparison], problems: list[str]) -> str:
    ev = ""
    first = next((c for c in comps if not c.exact_match), None)
    if first is not None:
        i = comps.index(first)
        ev = (
            f"; request {i}: first divergence at token {first.first_divergence} ({first.close_reason}); "
            f"baseline {clip(brun.records[i].text, 50)} vs candidate {clip(crun.records[i].text, 50)}"
        )
    return (
        f"{crun.point} (batch {crun.batch}, {crun.context}-token prompts filling max_model_len): "
        + "; ".join(problems[:3])
        + ev
    )
