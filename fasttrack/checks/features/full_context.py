"""``full_context``: prompts that fill ``max_model_len``, on both sides, equivalent outputs.

At every full-context point, ``batch`` prompts of exactly ``context`` tokens
(``max_model_len - max_tokens``, real passages) run greedy to ``max_model_len``; both
sides must succeed with the reported token counts, and outputs must pass the
equivalence thresholds.
"""

from __future__ import annotations

from fasttrack.checks.batching import BatchCheck, run_batched
from fasttrack.checks.context import RunContext
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import Outcome, SideData, err, tops
from fasttrack.checks.features.spec import FeatureTest, GroupPlan, Step
from fasttrack.checks.outcome import clip, fold_verdicts
from fasttrack.checks.tier import Blocker, TierView
from fasttrack.plan import ConfigPoint
from fasttrack.results import Verdict
from fasttrack.scope import EquivalenceGate
from fasttrack.stats import compare_greedy, summarize_greedy


def steps(gp: GroupPlan) -> list[Step]:
    """Every selected full-context point, in one step at the first one."""
    fulls = gp.full_points
    if not fulls:
        return []
    return [Step(point=fulls[0].id, batch=fulls[0].batch, run=lambda env: collect(env, fulls))]


async def collect(env: FeatureEnv, points: list[ConfigPoint]) -> None:
    """At every full-context point, ``batch`` prompts of exactly ``context`` tokens, greedy to max_model_len."""
    eq = env.ctx.scope.gates.equivalence
    data = env.side.data.setdefault("full_context", {"runs": [], "points": []})
    data["points"].extend(p.id for p in points)
    for point in points:
        await _full_round(env, point, eq)


async def _full_round(env: FeatureEnv, point: ConfigPoint, eq: EquivalenceGate) -> None:
    data = env.side.data["full_context"]
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
            recs.append(
                {
                    "error": err(r),
                    "prompt_tokens": len(ids),
                    "completion_tokens": 0,
                    "token_ids": [],
                    "logprobs": [],
                    "top": [],
                    "text": "",
                }
            )
            continue
        ch = r.choice
        pos = ch.logprobs or []
        recs.append(
            {
                "error": None,
                "prompt_tokens": r.usage.prompt_tokens if r.usage else len(ids),
                "completion_tokens": r.usage.completion_tokens if r.usage else len(ch.token_ids or []),
                "token_ids": list(ch.token_ids or []),
                "logprobs": [p.logprob for p in pos],
                "top": [[(t.token_id, t.logprob) for t in p.top if t.token_id is not None] for p in pos],
                "text": ch.text,
            }
        )
    data["runs"].append(
        {
            "point": point.id,
            "batch": point.batch,
            "context": point.context,
            "max_tokens": max_tokens,
            "records": recs,
            "batch_check": bc.model_dump(),
        }
    )


def judge(ctx: RunContext, gid: str, base: SideData, cand: SideData) -> Outcome:
    eq = ctx.scope.gates.equivalence
    rows, failures, verdicts = [], [], []
    bpts = {p["point"]: p for p in base.data["full_context"]["runs"]}
    for crun in cand.data["full_context"]["runs"]:
        pid = crun["point"]
        brun = bpts.get(pid)
        if brun is None:
            verdicts.append(Verdict.NOT_RUN)
            continue
        problems, comps = [], []
        for br, cr in zip(brun["records"], crun["records"], strict=False):
            for who, r in (("baseline", br), ("candidate", cr)):
                if r["error"]:
                    problems.append(f"the {who} request failed: {r['error']}")
                elif r["prompt_tokens"] != crun["context"] or r["completion_tokens"] != crun["max_tokens"]:
                    problems.append(
                        f"the {who} reported {r['prompt_tokens']} prompt + {r['completion_tokens']} "
                        f"completion tokens, expected {crun['context']} + {crun['max_tokens']}"
                    )
            if br["error"] or cr["error"]:
                continue
            comps.append(compare_greedy(br["token_ids"], cr["token_ids"], tops(br), tops(cr), top_k=eq.top_k))
        summ = summarize_greedy(comps) if comps else None
        if summ is not None:
            if summ.close_fraction < eq.min_close_fraction:
                problems.append(
                    f"{summ.n_requests - summ.n_close} of {summ.n_requests} outputs break the check_logprobs_close rule"
                )
            if summ.max_abs_logprob_diff is not None and summ.max_abs_logprob_diff > eq.max_abs_logprob_diff:
                problems.append(f"max |Δ logprob| {summ.max_abs_logprob_diff:.4f} > {eq.max_abs_logprob_diff:g}")
            if summ.kl_mean is not None and summ.kl_mean > eq.max_kl:
                problems.append(f"mean top-k KL {summ.kl_mean:.4f} > {eq.max_kl:g}")
        # Batch composition is recorded, not gated: long prompts prefill one after another (chunked prefill
        # admits one long prompt at a time), so short generations may finish before the last prefill ends.
        win = next((w for w in cand.windows.values() if pid in w.points), None)
        bc = BatchCheck.model_validate(crun["batch_check"]) if crun.get("batch_check") else None
        steps_at = win.steps_at(crun["batch"]) if win is not None and win.available else None
        v = Verdict.FAIL if problems else (Verdict.PASS if comps else Verdict.NOT_RUN)
        verdicts.append(v)
        rows.append(
            {
                "feature": "full_context",
                "group": gid,
                "point": pid,
                "batch": crun["batch"],
                "context": crun["context"],
                "max_tokens": crun["max_tokens"],
                "verdict": v.value,
                "n_close": summ.n_close if summ else None,
                "n_exact": summ.n_exact if summ else None,
                "max_abs_logprob_diff": summ.max_abs_logprob_diff if summ else None,
                "kl_mean": summ.kl_mean if summ else None,
                "batch_verified": bc.verified if bc else None,
                "batch_evidence": bc.detail if bc else None,
                "trace_decode_steps_at_batch": steps_at[0] if steps_at else None,
                "detail": "; ".join(problems),
            }
        )
        if problems:
            first = next((c for c in comps if not c.exact_match), None)
            ev = ""
            if first is not None:
                i = comps.index(first)
                ev = (
                    f"; request {i}: first divergence at token {first.first_divergence} ({first.close_reason}); "
                    f"baseline {clip(brun['records'][i]['text'], 50)} "
                    f"vs candidate {clip(crun['records'][i]['text'], 50)}"
                )
            failures.append(
                f"{pid} (batch {crun['batch']}, {crun['context']}-token prompts filling max_model_len): "
                + "; ".join(problems[:3])
                + ev
            )
    v = fold_verdicts(verdicts)
    return Outcome(
        feature="full_context",
        verdict=v,
        reason=f"full context: {sum(x is Verdict.PASS for x in verdicts)}/{len(verdicts)} points pass",
        rows=rows,
        failures=failures,
    )


def blockers(tier: TierView) -> list[Blocker]:
    if any(p.full_context for p in tier.plan.points):
        return []
    return [
        tier.blocker(
            "feature full_context",
            f"the {tier.tier} tier has no point at the full context",
            f"add 'full' to {tier.hint}.context, or leave full_context out of {tier.hint}.features",
        )
    ]


FEATURE = FeatureTest(name="full_context", steps=steps, judge=judge, blockers=blockers)
