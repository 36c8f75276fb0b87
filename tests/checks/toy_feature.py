"""A toy serving feature, written the way a new one is: one class. ``register_feature(ToyEcho())`` is its
registry line (a shipped feature's is its line in ``fasttrack.checks.features.table``)."""

from __future__ import annotations

from typing import ClassVar

from fasttrack.checks.features import FeatureResult, OnGroup, Outcome, ServingFeature, SideJudgement, Step, judge_sides
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.spec import GroupPlan
from fasttrack.checks.tier import Blocker, TierView

TOKENS = 4


class EchoResult(FeatureResult):
    point: str
    tokens: int
    """Tokens the engine returned for a request of ``max_tokens=TOKENS``."""
    text: str


class ToyEcho(ServingFeature[EchoResult]):
    name: ClassVar[str] = "toy_echo"
    result_model: ClassVar[type[FeatureResult]] = EchoResult

    def steps(self, gp: GroupPlan) -> list[Step]:
        if 1 not in gp.short_batches:
            return []
        return [Step(point=gp.point(1), batch=1, run=self.collect)]

    def blockers(self, tier: TierView) -> list[Blocker]:
        if any(p.batch == 1 and not p.full_context for p in tier.plan.points):
            return []
        return [tier.blocker("feature toy_echo", f"the {tier.tier} tier has no short point at batch 1", "add batch 1")]

    async def collect(self, env: FeatureEnv) -> None:
        pid = env.point(1)
        r = await env.client.complete(env.prompts[0].prompt, max_tokens=TOKENS, temperature=0.0, ignore_eos=True)
        env.side.results[self.name] = EchoResult(point=pid, points=[pid], tokens=len(r.token_ids or []), text=r.text)

    def judge(self, on: OnGroup, base: EchoResult, cand: EchoResult) -> Outcome:
        def rule(d: EchoResult) -> list[SideJudgement]:
            failure = f"{d.point}: max_tokens={TOKENS} returned {d.tokens} tokens"
            return [SideJudgement(ok=d.tokens == TOKENS, fields={"tokens": d.tokens}, failure=failure)]

        j = judge_sides(self.name, on.gid, base, cand, rule, point=lambda d: d.point)
        return j.outcome(self.name, f"max_tokens={TOKENS} returns {TOKENS} tokens")
