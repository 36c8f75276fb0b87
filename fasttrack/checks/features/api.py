"""API behaviour on the optimized path: seeds, stop strings, ``max_tokens``
(``n`` and returned logprobs: :mod:`fasttrack.checks.features.outputs`).

``seeded_sampling``
The same seeded requests twice, in opposite order within the batch: each seed
gives the same output.
``stop_sequences``
A stop string taken from the baseline's greedy output: both sides stop where
their own greedy output contains it, with ``finish_reason == 'stop'``.
``max_tokens``
Requests with different ``max_tokens`` in one batch each produce exactly that many
tokens (``finish_reason == 'length'``, usage agrees).

Each judges both sides by the same rule (:func:`~fasttrack.checks.features.spec.judge_sides`);
the candidate's verdict decides, the baseline's rows show the stock path's behaviour.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

from pydantic import Field

from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import FeatureError, FeatureResult, Outcome, err
from fasttrack.checks.features.spec import (
    GroupPlan,
    OnGroup,
    R,
    ServingFeature,
    SideJudgement,
    Step,
    judge_sides,
    serving_feature,
)
from fasttrack.checks.outcome import clip
from fasttrack.inputs import TokenizerClient
from fasttrack.modelbase import DocModel

SEEDED_SAMPLING_SEED = 4242
"""Seed of the first seeded request (request ``i`` uses ``SEEDED_SAMPLING_SEED + i``)."""


class AtOnePoint(FeatureResult):
    """A result measured at one short-context point."""

    point: str


class AtBatch(ServingFeature[R]):
    """A feature that runs once per engine group, at the short batch size closest to ``batch``."""

    batch: ClassVar[int] = 1

    def steps(self, gp: GroupPlan) -> list[Step]:
        if not gp.short_batches:
            return []
        b = gp.at(self.batch)
        return [Step(point=gp.point(b), batch=b, run=lambda env: self.collect(env, b))]

    @abstractmethod
    async def collect(self, env: FeatureEnv, batch: int) -> None:
        """Send its requests at ``batch`` and record this side's result."""


# ---------------------------------------------------------------------------------------------- seeded sampling


class SeededResult(AtOnePoint):
    seeds: list[int]
    first: dict[str, list[int]]
    """Seed -> token ids, the first time."""
    second: dict[str, list[int]]
    """Seed -> token ids, with the requests in the opposite order."""


@serving_feature
class SeededSampling(AtBatch[SeededResult]):
    name: ClassVar[str] = "seeded_sampling"
    decode_steps: ClassVar[int] = 400
    result_model: ClassVar[type[FeatureResult]] = SeededResult
    batch: ClassVar[int] = 4

    async def collect(self, env: FeatureEnv, batch: int) -> None:
        pid = env.point(batch)
        seeds = [SEEDED_SAMPLING_SEED + i for i in range(max(batch, 1))]
        env.ctx.provenance.seed("features/seeded_sampling", SEEDED_SAMPLING_SEED)
        prompts = [env.prompts[(i * 5) % len(env.prompts)].prompt for i in range(len(seeds))]

        async def run(order: list[int]) -> dict[str, list[int]]:
            res = await env.gather(
                [
                    env.client.complete(prompts[i], max_tokens=12, temperature=1.0, seed=seeds[i], ignore_eos=True)
                    for i in order
                ]
            )
            out = {}
            for i, r in zip(order, res, strict=False):
                if isinstance(r, BaseException):
                    raise FeatureError(f"a seeded request failed: {err(r)}")
                out[str(seeds[i])] = list(r.token_ids or [])
            return out

        idx = list(range(len(seeds)))
        first = await run(idx)
        second = await run(idx[::-1])
        env.side.results[self.name] = SeededResult(point=pid, points=[pid], seeds=seeds, first=first, second=second)

    def judge(self, on: OnGroup, base: SeededResult, cand: SeededResult) -> Outcome:
        def rule(d: SeededResult) -> list[SideJudgement]:
            diff = [s for s in d.seeds if d.first[str(s)] != d.second[str(s)]]
            failure = None
            if diff:
                s = diff[0]
                failure = (
                    f"{d.point} (batch {len(d.seeds)}): seed {s} gave different outputs in two batches "
                    f"(token ids {d.first[str(s)]} then {d.second[str(s)]})"
                )
            fields = {"seeds": len(d.seeds), "differing_seeds": ",".join(map(str, diff))}
            return [SideJudgement(ok=not diff, fields=fields, failure=failure)]

        j = judge_sides(self.name, on.gid, base, cand, rule, point=lambda d: d.point)
        same = sum(base.first.get(str(s)) == cand.first.get(str(s)) for s in cand.seeds)
        j.rows.append(
            {
                "feature": self.name,
                "group": on.gid,
                "side": "both",
                "point": cand.point,
                "verdict": "info",
                "detail": f"{same} of {len(cand.seeds)} seeds gave the same output on both sides",
            }
        )
        reason = (
            f"seeded sampling: same seed, same output on the candidate ({same}/{len(cand.seeds)} equal across sides)"
        )
        return j.outcome(self.name, reason)


# ---------------------------------------------------------------------------------------------- stop sequences


class StopResult(AtOnePoint):
    stop: str
    """The stop string (the baseline's pick; the candidate reuses it)."""
    greedy_text: str
    """The greedy output without a stop string."""
    text: str
    finish_reason: str | None
    stop_reason: Any = None
    """What the server said stopped it (the stop string, a token id, or None)."""


@serving_feature
class StopSequences(AtBatch[StopResult]):
    name: ClassVar[str] = "stop_sequences"
    decode_steps: ClassVar[int] = 300
    result_model: ClassVar[type[FeatureResult]] = StopResult
    batch: ClassVar[int] = 1

    async def collect(self, env: FeatureEnv, batch: int) -> None:
        pid = env.point(batch)
        prompt = env.prompts[3].prompt
        g = await env.client.complete(prompt, max_tokens=16, temperature=0.0, ignore_eos=True)
        ids = list(g.token_ids or [])
        base = self.baseline(env)
        stop = base.stop if base is not None else await pick_stop(env.tok, ids, g.text)
        r = await env.client.complete(prompt, max_tokens=16, temperature=0.0, ignore_eos=True, stop=[stop])
        env.side.results[self.name] = StopResult(
            point=pid,
            points=[pid],
            stop=stop,
            greedy_text=g.text,
            text=r.text,
            finish_reason=r.finish_reason,
            stop_reason=r.choice.stop_reason,
        )

    def judge(self, on: OnGroup, base: StopResult, cand: StopResult) -> Outcome:
        def rule(d: StopResult) -> list[SideJudgement]:
            full = d.greedy_text
            if d.stop in full:
                exp_text, exp_reason = full[: full.index(d.stop)], "stop"
            else:
                exp_text, exp_reason = full, "length"
            ok = (
                d.text == exp_text
                and d.finish_reason == exp_reason
                and (exp_reason != "stop" or d.stop_reason == d.stop)
            )
            fields = {
                "stop": d.stop,
                "text": d.text,
                "expected_text": exp_text,
                "finish_reason": d.finish_reason,
                "stop_reason": str(d.stop_reason),
            }
            failure = (
                f"{d.point} (batch 1): stop string {d.stop!r}: expected {clip(exp_text, 60)} with "
                f"finish_reason {exp_reason!r}, got {clip(d.text, 60)} with {d.finish_reason!r} "
                f"(stop_reason {d.stop_reason!r})"
            )
            return [SideJudgement(ok=ok, fields=fields, failure=failure)]

        j = judge_sides(self.name, on.gid, base, cand, rule, point=lambda d: d.point)
        return j.outcome(self.name, "stop sequences end generation at the stop string")


async def pick_stop(tok: TokenizerClient, ids: list[int], text: str) -> str:
    """A stop string from a greedy output: two tokens of its text whose first occurrence starts at that token."""
    for k in range(3, max(3, len(ids) - 2)):
        s = await tok.detokenize(ids[k : k + 2])
        prefix = await tok.detokenize(ids[:k])
        if s.strip() and text.find(s) == len(prefix) and text.startswith(prefix):
            return s
    for k in range(1, len(ids)):
        s = await tok.detokenize(ids[k : k + 1])
        if s.strip():
            return s
    return text[len(text) // 2 :] or "."


# ---------------------------------------------------------------------------------------------- max_tokens


class MaxTokensRequest(DocModel):
    max_tokens: int
    n_tokens: int
    """Tokens returned (-1: the request failed)."""
    usage: int
    """``usage.completion_tokens`` (-1: not reported)."""
    finish_reason: str | None


class MaxTokensResult(AtOnePoint):
    requests: list[MaxTokensRequest] = Field(default_factory=list)


@serving_feature
class MaxTokens(AtBatch[MaxTokensResult]):
    name: ClassVar[str] = "max_tokens"
    decode_steps: ClassVar[int] = 300
    result_model: ClassVar[type[FeatureResult]] = MaxTokensResult
    batch: ClassVar[int] = 3

    async def collect(self, env: FeatureEnv, batch: int) -> None:
        pid = env.point(batch)
        limits = [(3, 7, 11)[i % 3] + 4 * (i // 3) for i in range(max(batch, 1))]
        prompts = [env.prompts[(i * 3 + 1) % len(env.prompts)].prompt for i in range(len(limits))]
        res = await env.gather(
            [
                env.client.complete(p, max_tokens=m, temperature=0.0, ignore_eos=True)
                for p, m in zip(prompts, limits, strict=False)
            ]
        )
        reqs = []
        for m, r in zip(limits, res, strict=False):
            if isinstance(r, BaseException):
                reqs.append(MaxTokensRequest(max_tokens=m, n_tokens=-1, usage=-1, finish_reason=f"error: {err(r)}"))
            else:
                usage = r.usage.completion_tokens if r.usage else -1
                reqs.append(
                    MaxTokensRequest(
                        max_tokens=m, n_tokens=len(r.token_ids or []), usage=usage, finish_reason=r.finish_reason
                    )
                )
        env.side.results[self.name] = MaxTokensResult(point=pid, points=[pid], requests=reqs)

    def judge(self, on: OnGroup, base: MaxTokensResult, cand: MaxTokensResult) -> Outcome:
        def rule(d: MaxTokensResult) -> list[SideJudgement]:
            out = []
            for r in d.requests:
                ok = r.n_tokens == r.max_tokens and r.usage == r.max_tokens and r.finish_reason == "length"
                failure = (
                    f"{d.point} (batch {len(d.requests)}): max_tokens={r.max_tokens} produced "
                    f"{r.n_tokens} tokens (usage {r.usage}, finish_reason {r.finish_reason!r})"
                )
                out.append(SideJudgement(ok=ok, fields=r.model_dump(), failure=failure))
            return out

        j = judge_sides(self.name, on.gid, base, cand, rule, point=lambda d: d.point)
        return j.outcome(self.name, "max_tokens bounds generation exactly")
