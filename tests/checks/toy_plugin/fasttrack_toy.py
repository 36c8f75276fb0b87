"""A check and a serving feature from outside fasttrack, written the way another package adds them: this one
module, and its packaging (``pyproject.toml`` here) naming it in the ``fasttrack`` entry-point group::

    [project.entry-points.fasttrack]
    toy = "fasttrack_toy"

Installed, fasttrack imports it when it first lists the registered parts, and the decorators below register:

* the check ``toy`` (``@register``): its title, its order (after ``features``, before ``coverage``), its gate
  model (``gates.toy``, whose setting says which way is stricter), its cost, its passability rule and its run;
* the serving feature ``toy_echo`` (``@serving_feature``): its probe, its decode steps (the plan's cost), what
  it needs from a tier, its typed result and its judgement.

``fasttrack plan`` prices both, ``validate`` runs them (the feature inside the features check), the bundle
records them, ``verify`` accepts it and the report shows them, with no file of fasttrack changed
(``tests/e2e/test_e2e_wheel.py`` installs this package next to fasttrack's wheel; the fast tests in
``tests/checks/test_registry.py`` load it as an entry point would).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, ClassVar

from pydantic import Field

from fasttrack.checks.base import Blocker, EnginelessCheck, RunContext, TierView, register
from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import FeatureResult, Outcome
from fasttrack.checks.features.spec import (
    GroupPlan,
    OnGroup,
    ServingFeature,
    SideJudgement,
    Step,
    judge_sides,
    serving_feature,
)
from fasttrack.planning.cost import CheckCost, EngineGroup, Work
from fasttrack.results import CheckResult, Gate, Verdict
from fasttrack.scope.gates import CheckGate, stricter

SECONDS_PER_SUITE = 30.0
"""What scoring one kernel suite costs (the toy check's cost)."""
TOKENS = 4
"""Tokens the toy feature asks for."""


class ToyGate(CheckGate, check="toy"):
    min_score: Annotated[float, stricter("higher")] = Field(default=0.5, ge=0, le=1)
    """The lowest toy score that passes."""


def _cost(w: Work, groups: Sequence[EngineGroup]) -> None:
    """Once per plan: every kernel suite of the scope, scored on one node."""
    w.add(SECONDS_PER_SUITE * len(w.scope.kernels), devices=1, nodes=1)


@register
class ToyCheck(
    EnginelessCheck,
    name="toy",
    title="Toy check",
    after=("features",),
    before=("coverage",),
    gate_model=ToyGate,
    cost=CheckCost(per_plan=_cost),
):
    """Scores every kernel suite of the scope (without running anything)."""

    @classmethod
    def passability(cls, tier: TierView) -> list[Blocker]:
        gate = tier.scope.gates.of(ToyGate)
        if gate.min_score <= 0.9:
            return []
        return [tier.blocker("toy score", f"no toy scores above 0.9 (min_score {gate.min_score})", "lower it")]

    @classmethod
    def planned(cls, tier: TierView) -> list[str]:
        return [f"toy-{k.name}" for k in tier.scope.kernels]

    def gate(self, ctx: RunContext) -> Gate:
        return Gate(statistic="toy score", threshold=ctx.scope.gates.of(ToyGate).min_score, rule="score >= min_score")

    def run(self, ctx: RunContext) -> CheckResult:
        floor = ctx.scope.gates.of(ToyGate).min_score
        rows = [
            {"item": f"toy-{k.name}", "score": 0.75, "verdict": "pass" if 0.75 >= floor else "fail"}
            for k in ctx.scope.kernels
        ]
        ok = all(r["verdict"] == "pass" for r in rows)
        return CheckResult(
            check=self.name,
            verdict=Verdict.PASS if ok else Verdict.FAIL,
            reason=f"{len(rows)} toy item(s) scored 0.75 against {floor:g}",
            gate=self.gate(ctx),
            tables={"toy_scores": rows},
        )


class EchoResult(FeatureResult):
    point: str | None = None
    tokens: int = 0
    """Tokens the engine returned for a request of ``max_tokens=TOKENS``."""
    text: str = ""


@serving_feature
class ToyEcho(ServingFeature[EchoResult]):
    name: ClassVar[str] = "toy_echo"
    result_model: ClassVar[type[FeatureResult]] = EchoResult
    decode_steps: ClassVar[int] = TOKENS

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
        tokens = len(r.token_ids or [])
        env.side.results[self.name] = EchoResult(point=pid, points=[pid] if pid else [], tokens=tokens, text=r.text)

    def judge(self, on: OnGroup, base: EchoResult, cand: EchoResult) -> Outcome:
        def rule(d: EchoResult) -> list[SideJudgement]:
            failure = f"{d.point}: max_tokens={TOKENS} returned {d.tokens} tokens"
            return [SideJudgement(ok=d.tokens == TOKENS, fields={"tokens": d.tokens}, failure=failure)]

        j = judge_sides(self.name, on.gid, base, cand, rule, point=lambda d: d.point or "")
        return j.outcome(self.name, f"max_tokens={TOKENS} returns {TOKENS} tokens")
