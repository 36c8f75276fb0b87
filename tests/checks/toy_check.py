"""A toy check, written the way a new check is: one module. ``register(ToyCheck)`` is its registry line
(a shipped check's is its module name in ``fasttrack.checks.CHECK_MODULES`` and ``@register`` on the class).

Imported only by the registration tests' fixture, which also unregisters it: its gate section exists while
the module is loaded for them."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from fasttrack.checks.base import Blocker, EnginelessCheck, RunContext, TierView
from fasttrack.results import CheckResult, Gate, Verdict
from fasttrack.scope.gates import CheckGate


class ToyGate(CheckGate, check="toy"):
    min_score: float = Field(default=0.5, ge=0, le=1)
    """The lowest toy score that passes."""


class ToyCheck(EnginelessCheck):
    """Scores every kernel suite of the scope (without running anything)."""

    name: ClassVar[str] = "toy"
    title: ClassVar[str] = "Toy check"
    after: ClassVar[tuple[str, ...]] = ("features",)
    before: ClassVar[tuple[str, ...]] = ("coverage",)
    gate_model: ClassVar[type[CheckGate]] = ToyGate

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
