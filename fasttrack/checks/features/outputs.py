"""What a request returns besides its text: ``n`` choices and returned logprobs.

``n_best``
``n > 1`` with a seed returns ``n`` complete choices, reproducibly.
``logprobs``
Returned logprobs are well-formed (top-k present, sorted, <= 0, greedy token is
the argmax) and agree across sides: vLLM's close rule, and ``max_abs_logprob_diff`` or,
with ``gates.equivalence.reference``, the KL cap and the calibrated rule against the
reference variants' output of the same request.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from fasttrack.checks.equivalence.reference import Outputs, calibrate_by_gate
from fasttrack.checks.features.api import AtBatch, AtOnePoint
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import FeatureResult, GreedyOutput, Outcome, choice_ids, greedy_output, tops
from fasttrack.checks.features.spec import OnGroup, SideJudgement, judge_sides, serving_feature
from fasttrack.results import Verdict
from fasttrack.stats import compare_greedy

N_BEST_SEED = 99


class NBestResult(AtOnePoint):
    n: int
    max_tokens: int
    temperature: float
    first: list[list[int]]
    """Token ids of each choice, the first time."""
    second: list[list[int]]
    """The same seeded request again."""


@serving_feature
class NBest(AtBatch[NBestResult]):
    name: ClassVar[str] = "n_best"
    decode_steps: ClassVar[int] = 400
    result_model: ClassVar[type[FeatureResult]] = NBestResult
    batch: ClassVar[int] = 3

    async def collect(self, env: FeatureEnv, batch: int) -> None:
        pid = env.point(batch)
        n, mt, t = max(batch, 2), 8, 0.8
        prompt = env.prompts[7].prompt
        env.ctx.provenance.seed("features/n_best", N_BEST_SEED)
        outs = []
        for _ in range(2):
            r = await env.client.complete(prompt, max_tokens=mt, temperature=t, seed=N_BEST_SEED, n=n, ignore_eos=True)
            outs.append([choice_ids(c) for c in r.choices])
        env.side.results[self.name] = NBestResult(
            point=pid, points=[pid], n=n, max_tokens=mt, temperature=t, first=outs[0], second=outs[1]
        )

    def judge(self, on: OnGroup, base: NBestResult, cand: NBestResult) -> Outcome:
        def rule(d: NBestResult) -> list[SideJudgement]:
            problems = []
            if len(d.first) != d.n:
                problems.append(f"{len(d.first)} choices returned for n={d.n}")
            if any(len(c) != d.max_tokens for c in d.first):
                problems.append(f"choice lengths {[len(c) for c in d.first]} (expected {d.max_tokens} each)")
            if d.first != d.second:
                problems.append("the same seeded request returned different choices the second time")
            if len({tuple(c) for c in d.first}) == 1 and d.n > 1 and d.temperature > 0:
                problems.append("all choices are identical (n > 1 at temperature > 0 should vary)")
            fields = {"n": d.n, "choices": len(d.first), "detail": "; ".join(problems)}
            failure = f"{d.point} (batch {d.n}): n={d.n}: " + "; ".join(problems)
            return [SideJudgement(ok=not problems, fields=fields, failure=failure)]

        j = judge_sides(self.name, on.gid, base, cand, rule, point=lambda d: d.point)
        return j.outcome(self.name, "n > 1 returns n reproducible choices")


class LogprobsResult(AtOnePoint, GreedyOutput):
    """A greedy request's returned logprobs."""


@serving_feature
class Logprobs(AtBatch[LogprobsResult]):
    name: ClassVar[str] = "logprobs"
    decode_steps: ClassVar[int] = 300
    uses_reference: ClassVar[bool] = True
    result_model: ClassVar[type[FeatureResult]] = LogprobsResult
    batch: ClassVar[int] = 1

    async def collect(self, env: FeatureEnv, batch: int) -> None:
        eq = env.ctx.scope.gates.equivalence
        pid = env.point(batch)
        prompt = env.prompts[11].prompt
        r = await env.client.complete(
            prompt, max_tokens=8, temperature=0.0, logprobs=eq.top_k, tokens_as_ids=True, ignore_eos=True
        )
        env.side.results[self.name] = LogprobsResult(point=pid, points=[pid], **greedy_output(r))

    def judge(self, on: OnGroup, base: LogprobsResult, cand: LogprobsResult) -> Outcome:
        eq = on.ctx.scope.gates.equivalence

        def rule(d: LogprobsResult) -> list[SideJudgement]:
            problems = logprob_problems(d, eq.top_k)
            fields = {"positions": len(d.token_ids), "detail": "; ".join(problems)}
            failure = f"{d.point} (batch 1): returned logprobs are malformed: " + "; ".join(problems[:3])
            return [SideJudgement(ok=not problems, fields=fields, failure=failure)]

        j = judge_sides(self.name, on.gid, base, cand, rule, point=lambda d: d.point)
        if j.failures or logprob_problems(base, eq.top_k):
            return j.outcome(
                self.name,
                "returned logprobs are malformed" if j.failures else "the baseline's logprobs are malformed",
                verdict=None if j.failures else Verdict.NOT_RUN,
            )
        verdict, row, failure = self._agreement(on, base, cand)
        j.verdicts.append(verdict)
        j.rows.append(row)
        if failure:
            j.failures.append(failure)
        return j.outcome(self.name, "returned logprobs are well-formed and agree across sides")

    def _agreement(
        self, on: OnGroup, base: LogprobsResult, cand: LogprobsResult
    ) -> tuple[Verdict, dict[str, Any], str | None]:
        """The two sides' greedy outputs compared: the close rule, and either the absolute ``max_abs_logprob_diff``
        or, with ``gates.equivalence.reference``, the KL cap and the calibrated rule against the variants' output
        of the same request (a variant without it leaves the row ``not_run``)."""
        eq = on.ctx.scope.gates.equivalence
        comp = compare_greedy(base.token_ids, cand.token_ids, tops(base), tops(cand), top_k=eq.top_k)
        problems: list[str] = []
        cal = None
        if eq.reference is None:
            if comp.max_abs_logprob_diff is not None and comp.max_abs_logprob_diff > eq.max_abs_logprob_diff:
                problems.append(f"max |Δ logprob| {comp.max_abs_logprob_diff} (limit {eq.max_abs_logprob_diff:g})")
        else:
            if comp.kl_mean is not None and comp.kl_mean > eq.max_kl:
                problems.append(f"mean top-k KL {comp.kl_mean:.4f} > {eq.max_kl:g}")
            vouts = {n: v if isinstance(v, str) else _one(v) for n, v in self.variant_results(on).items()}
            cal = calibrate_by_gate(eq, baseline=_one(base), candidate=_one(cand), variants=vouts)
            problems.extend(cal.problems)
        if not comp.close and not (cal is not None and cal.judges_close):
            problems.insert(0, comp.close_reason)
        missing = cal.missing if cal is not None else []
        verdict = Verdict.FAIL if problems else (Verdict.NOT_RUN if missing else Verdict.PASS)
        row: dict[str, Any] = {
            "feature": self.name,
            "group": on.gid,
            "side": "both",
            "point": cand.point,
            "verdict": verdict.value,
            "max_abs_logprob_diff": comp.max_abs_logprob_diff,
            "detail": "; ".join(dict.fromkeys([comp.close_reason, *problems, *missing])),
        }
        if cal is not None:
            row.update(calibration=cal.text(), **cal.row())
        failure = None
        if problems:
            failure = f"{cand.point} (batch 1): returned logprobs differ across sides: " + "; ".join(problems)
        return verdict, row, failure


def _one(d: GreedyOutput) -> Outputs:
    """The one request's output, as the calibrated rule reads outputs."""
    return {0: (d.token_ids, tops(d))}


def logprob_problems(d: GreedyOutput, top_k: int) -> list[str]:
    problems = []
    if len(d.top) != len(d.token_ids):
        problems.append(f"{len(d.top)} logprob positions for {len(d.token_ids)} tokens")
    for i, pos in enumerate(d.top):
        lps = [lp for _, lp in pos]
        if len(pos) < top_k:
            problems.append(f"position {i}: {len(pos)} alternatives for logprobs={top_k}")
        if any(lp > 1e-6 for lp in lps):
            problems.append(f"position {i}: a logprob is positive")
        if sum(math.exp(lp) for lp in lps) > 1 + 1e-3:
            problems.append(f"position {i}: top-k probabilities sum above 1")
        if pos and i < len(d.token_ids):
            best = max(pos, key=lambda x: x[1])
            chosen_lp = d.logprobs[i]
            if chosen_lp is not None and best[1] - chosen_lp > 1e-4:
                problems.append(
                    f"position {i}: greedy token {d.token_ids[i]} (logprob {chosen_lp:.4f}) is not the "
                    f"argmax {best[0]} ({best[1]:.4f})"
                )
    return problems
