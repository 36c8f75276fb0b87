"""``speculative_acceptance``: the candidate accepts draft tokens as often as the baseline.

Where the engine group has a speculative config: acceptance from the ``vllm:spec_decode_*``
counters over a fixed greedy workload; the candidate's acceptance rate (accepted / draft
tokens) must not be below the baseline's (its Wilson 95% upper bound reaches the baseline's
rate). The row shows each side's measured acceptance length (1 + accepted / drafts) next to
the configured one: a group run with synthetic acceptance (``rejection_sample_method:
synthetic``) must measure that length on both sides, within :data:`SYNTHETIC_TOLERANCE`, or
the setting did not reach the engine; there the rate comparison is left out (both sides accept
at the configured rates, whatever the model says). Not applicable otherwise.
"""

from __future__ import annotations

from typing import ClassVar

from fasttrack.checks.features.env import FeatureEnv
from fasttrack.checks.features.model import FeatureResult, Outcome
from fasttrack.checks.features.spec import GroupPlan, OnGroup, ServingFeature, Step, serving_feature
from fasttrack.checks.tier import Blocker, TierView
from fasttrack.planning.cost import EngineGroup as GroupShape
from fasttrack.results import Verdict
from fasttrack.stats import wilson_interval

SPEC_ACCEPTANCE_PROMPTS = 4
SPEC_ACCEPTANCE_TOKENS = 64
SYNTHETIC_TOLERANCE = 0.1
"""Largest relative difference between a measured and the configured synthetic acceptance length (the
synthetic sampler draws acceptances at the configured rates; a few hundred drafts keep the mean this close)."""


class SpeculativeResult(FeatureResult):
    """The ``vllm:spec_decode_*`` counters over the acceptance workload."""

    point: str
    configured_acceptance_length: float | None = None
    """The group's synthetic acceptance length (None: the model's own acceptance)."""
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None

    def acceptance_length(self) -> float | None:
        """1 + accepted tokens per draft (None without drafts)."""
        return 1 + (self.accepted_tokens or 0) / self.drafts if self.drafts else None


@serving_feature
class SpeculativeAcceptance(ServingFeature[SpeculativeResult]):
    name: ClassVar[str] = "speculative_acceptance"
    decode_steps: ClassVar[int] = 800
    result_model: ClassVar[type[FeatureResult]] = SpeculativeResult
    optional: ClassVar[str | None] = "no engine group of the plan has a speculative-decoding configuration"
    on_synthetic_acceptance: ClassVar[bool] = True

    def decode_steps_on(self, group: GroupShape) -> int:
        """Only groups with a speculative config probe it."""
        return self.decode_steps if group.speculative_config is not None else 0

    def steps(self, gp: GroupPlan) -> list[Step]:
        """At the short batch size closest to 1, on groups with a speculative config."""
        if not gp.short_batches or gp.group.spec == "none":
            return []
        b = gp.at(1)
        return [Step(point=gp.point(b), batch=b, run=lambda env: self.collect(env, b))]

    def blockers(self, tier: TierView) -> list[Blocker]:
        if any(g.spec != "none" for g in tier.plan.groups):
            return []
        return [
            tier.blocker(
                "feature speculative_acceptance",
                f"the {tier.tier} tier has no engine group with a speculative config",
                f"add a speculative config to {tier.hint}.speculative, or leave speculative_acceptance out of "
                f"{tier.hint}.features",
            )
        ]

    async def collect(self, env: FeatureEnv, batch: int) -> None:
        from fasttrack.engine import metrics_diff, scrape_metrics

        pid = env.point(batch)
        before = await scrape_metrics(env.session.engine)
        for i in range(SPEC_ACCEPTANCE_PROMPTS):
            await env.gather(
                [
                    env.client.complete(
                        env.prompts[(i * batch + j) % len(env.prompts)].prompt,
                        max_tokens=SPEC_ACCEPTANCE_TOKENS,
                        temperature=0.0,
                        ignore_eos=True,
                    )
                    for j in range(batch)
                ]
            )
        d = metrics_diff(before, await scrape_metrics(env.session.engine))
        cfg = env.session.group.speculative_config or {}
        env.side.results[self.name] = SpeculativeResult(
            point=pid,
            points=[pid],
            configured_acceptance_length=cfg.get("synthetic_acceptance_length"),
            drafts=d.delta("vllm:spec_decode_num_drafts_total") or d.delta("vllm:spec_decode_num_drafts"),
            draft_tokens=d.delta("vllm:spec_decode_num_draft_tokens_total")
            or d.delta("vllm:spec_decode_num_draft_tokens"),
            accepted_tokens=(
                d.delta("vllm:spec_decode_num_accepted_tokens_total") or d.delta("vllm:spec_decode_num_accepted_tokens")
            ),
        )

    def judge(self, on: OnGroup, base: SpeculativeResult, cand: SpeculativeResult) -> Outcome:
        gid = on.gid
        if not cand.draft_tokens or not base.draft_tokens:
            return Outcome(
                feature=self.name,
                verdict=Verdict.NOT_RUN,
                reason=f"{gid}: the engine reported no vllm:spec_decode_* draft tokens",
                rows=[{"feature": self.name, "group": gid, "verdict": "not_run"}],
            )
        rate_b = (base.accepted_tokens or 0) / base.draft_tokens
        ci_c = wilson_interval(int(cand.accepted_tokens or 0), int(cand.draft_tokens))
        configured = cand.configured_acceptance_length
        # with synthetic acceptance both sides accept at the configured rates whatever the model says: comparing
        # their rates would compare random draws; each side's measured length against the configured one is the rule
        ok = configured is not None or ci_c.ci_high >= rate_b
        al = {"b": base.acceptance_length(), "c": cand.acceptance_length()}
        synthetic_off = [
            f"the {side} measured acceptance length {a:.2f}"
            for side, a in (("baseline", al["b"]), ("candidate", al["c"]))
            if configured is not None and a is not None and abs(a - configured) > SYNTHETIC_TOLERANCE * configured
        ]
        v = Verdict.PASS if ok and not synthetic_off else Verdict.FAIL
        row = {
            "feature": self.name,
            "group": gid,
            "point": cand.point,
            "verdict": v.value,
            "baseline_acceptance_rate": rate_b,
            "candidate_acceptance_rate": ci_c.proportion,
            "candidate_ci_high": ci_c.ci_high,
            "configured_acceptance_length": configured,
            "baseline_acceptance_length": al["b"],
            "candidate_acceptance_length": al["c"],
        }
        failures = (
            []
            if ok
            else [
                f"{cand.point}: speculative acceptance rate {ci_c.proportion:.3f} (Wilson 95% upper "
                f"{ci_c.ci_high:.3f}, acceptance length {al['c']}) is below the baseline's {rate_b:.3f} "
                f"(acceptance length {al['b']})"
            ]
        )
        if synthetic_off:
            failures.append(
                f"{cand.point}: synthetic acceptance length {configured} configured, but "
                + " and ".join(synthetic_off)
                + f" (more than {SYNTHETIC_TOLERANCE:.0%} off): the synthetic setting did not reach the engine"
            )
        measured = f"acceptance length candidate {al['c']} vs baseline {al['b']}"
        return Outcome(
            feature=self.name,
            verdict=v,
            reason=measured + (f" (configured: {configured}, synthetic)" if configured is not None else ""),
            rows=[row],
            failures=failures,
        )
