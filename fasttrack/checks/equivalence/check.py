"""Equivalence: greedy outputs of the candidate match the baseline's at every batch size.

For every config point of an engine group (except full-context points, which the
features check covers), the check sends the shipped real-text prompts ``batch`` at a
time, so the engine decodes them as one batch, greedy, with top-k logprobs. Prompts
are token ids built with the engine's tokenizer: a prompt longer than the point's
context keeps its last tokens, a much shorter one is preceded by passage text, so
prompt lengths vary within [context/2, context].

Batch composition is verified from evidence, not assumed. A short probe of every
point (its first round's prompts, a few tokens each) runs inside one profiler
window per context, whose trace must show decode steps at the point's batch size
(and, on the candidate, those steps must run the optimized path). Every round's
requests must finish together: they have the same ``max_tokens``, so requests
decoded in the same engine steps finish in the same step and a late one finishes
later. A round that was not batched is repeated, up to three times, and the
attempts are recorded. Each round is preceded by a prefill-only "pacer" request
with a fresh long prompt, so the round's requests reach a busy engine and start in
the same step; otherwise the first request is often prefilled alone, stays one
token ahead, and the round's last step runs one request short (a defect at batch
``b - 1`` would then show at batch ``b``).

Per request (``fasttrack.stats.compare_greedy``): exact token match, first divergence,
vLLM's ``check_logprobs_close`` rule at the divergence (each side's token among the
other's top-k), and drift on the matching prefix (max and mean |Δ logprob| of the
chosen token, KL estimate from top-k). A point passes when

* the fraction of requests satisfying the close rule >= ``gates.equivalence.min_close_fraction``,
* max |Δ logprob| on matching prefixes <= ``max_abs_logprob_diff`` (a scope without ``reference``), or, with
  ``gates.equivalence.reference``, every distance of the candidate from the reference within ``multiple`` x
  stock's own builds' + ``tolerance`` (:mod:`fasttrack.checks.equivalence.reference`: the reference variants
  answer the baseline's rounds on engines of their own, without a profiled probe; a variant whose rounds did
  not decode as one batch, or that produced no outputs, leaves the point ``not_run``),
* mean top-k KL <= ``max_kl``,
* the batch composition was verified on both sides, and
* the candidate's window ran the optimized path (a point whose candidate used only
  the standard path proves nothing about the optimization).

A condition that could not be observed makes the point ``not_run`` (with the reason),
never ``pass``: a candidate without a profiled window at the point (no profiler, or
a window that produced no trace), or a side whose rounds carry no batch check.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fasttrack.checks.base import EngineCheck, register
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.equivalence.collect import SideCollection
from fasttrack.checks.equivalence.cost import COST, REQUESTS_PER_POINT
from fasttrack.checks.equivalence.judge import Explanations, judge_point
from fasttrack.checks.equivalence.records import Explanation, PointRun, compare
from fasttrack.checks.equivalence.reference import VariantCollector, stock_builds
from fasttrack.checks.outcome import fold_verdicts, used_standard_path, write_artifact
from fasttrack.checks.windows import WindowRecord
from fasttrack.errors import FasttrackError
from fasttrack.evidence import typed_tables
from fasttrack.inputs import (
    PromptItem,
    TokenizerClient,
    prompt_set_path,
)
from fasttrack.planning.plan import EngineGroup
from fasttrack.results import CheckResult, Gate, Side, Verdict
from fasttrack.scope.gates import EquivalenceGate

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineHandle


@register
class EquivalenceCheck(
    EngineCheck, VariantCollector, name="equivalence", title="Output equivalence", report_view="equivalence"
):
    """Greedy output equivalence, per config point (batch size x context)."""

    after = ("kernels",)
    gate_model = EquivalenceGate
    cost = COST

    explain_limit: ClassVar[int] = 3
    """Divergences per point decoded to text for the failure message."""
    max_attempts: ClassVar[int] = 3
    """Tries per round until its requests decode as one batch."""

    def __init__(self, *, requests_per_point: int = REQUESTS_PER_POINT) -> None:
        self.n_requests = requests_per_point
        """At least this many requests per point (rounded up to whole batches)."""
        self.runs: dict[tuple[str, str], dict[str, PointRun]] = {}
        """(group id, side) -> point id -> run."""
        self.variant_runs: dict[tuple[str, str], dict[str, PointRun]] = {}
        """(group id, reference variant) -> point id -> run."""
        self.variant_errors: dict[tuple[str, str], str] = {}
        """(group id, reference variant) -> why it has no outputs."""
        self.request_plans: dict[str, dict[str, list[list[tuple[PromptItem, list[int]]]]]] = {}
        """group id -> point id -> rounds of (prompt, token ids), fixed by the first side that ran."""
        self.explanations: Explanations = {}
        self.artifacts: list[str] = []
        self.notes: list[str] = []

    def skip_reason(self, ctx: RunContext) -> str | None:
        if not any(not p.full_context for p in ctx.plan.points):
            return (
                "the plan has no config point with a non-full context (full contexts are checked by the features check)"
            )
        return None

    def wants(self, ctx: RunContext, group: EngineGroup, side: Side, lifetime: int) -> bool:
        # Greedy outputs are deterministic; one engine lifetime per side is enough. A group with synthetic
        # acceptance accepts draft tokens at random, whatever the model says: its outputs are not comparable.
        return (
            lifetime == 0
            and not group.synthetic_acceptance
            and any(not p.full_context for p in ctx.plan.group_points(group))
        )

    def gate(self, ctx: RunContext) -> Gate:
        gate = ctx.scope.gates.equivalence
        ref = gate.reference
        statistic = (
            "per config point: fraction of requests satisfying vLLM's check_logprobs_close rule "
            f"(top-{gate.top_k}); mean top-k KL(baseline || candidate); "
        )
        if ref is None:
            return Gate(
                statistic=statistic + "max |Δ logprob| of the chosen token on matching prefixes",
                threshold=(
                    f"close >= {gate.min_close_fraction:g}; max |Δ logprob| <= {gate.max_abs_logprob_diff:g}; "
                    f"KL <= {gate.max_kl:g}"
                ),
                rule=(
                    "every point: close fraction, logprob drift and KL within the thresholds, batch composition "
                    "verified on both sides from the profiler trace (or metrics), and the candidate's window ran the "
                    "optimized path"
                ),
            )
        tol = ref.tolerance
        return Gate(
            statistic=statistic
            + f"distances from {ref.reference_name} (max and mean |Δ logprob| on matching prefixes, mean top-k KL, "
            f"divergence = 1 - matched-prefix fraction) of the candidate and of stock's builds "
            f"({', '.join(stock_builds(ref))})",
            threshold=(
                f"close >= {gate.min_close_fraction:g}; KL <= {gate.max_kl:g}; each distance: candidate <= "
                f"{ref.multiple:g} x stock + tolerance (max |Δ| {tol.max_abs_logprob_diff:g}, mean |Δ| "
                f"{tol.mean_abs_logprob_diff:g}, KL {tol.kl_mean:g}, divergence {tol.divergence:g})"
            ),
            rule=(
                "every point: close fraction and KL (candidate vs baseline) within the caps; every distance of the "
                f"candidate from {ref.reference_name} within {ref.multiple:g} x the largest of stock's builds' + "
                "its tolerance, on the same requests; batch composition verified on every engine; the candidate's "
                "window ran the optimized path"
            ),
        )

    async def collect(self, ctx: RunContext, session: EngineSession) -> None:
        group = session.group
        side_runs: dict[str, PointRun] = {}
        self.runs[(group.id, session.side)] = side_runs
        # The first side to run fixes the requests (prompt ids per round); the other side reuses them.
        plans = self.request_plans.setdefault(group.id, {})
        side = SideCollection(ctx, session, side_runs, plans, check=self.name, max_attempts=self.max_attempts)
        async with session.engine.client() as client:
            await side.run(client, n_requests=self.n_requests)
            if session.side == "candidate":
                await self._explain(ctx, group.id, session.engine)
        self.artifacts.append(
            write_artifact(
                ctx,
                self.name,
                f"{group.id}.{session.side}.json",
                {pid: r.model_dump(mode="json") for pid, r in side_runs.items()},
            )
        )

    def wants_variant(self, ctx: RunContext, group: EngineGroup) -> bool:
        return ctx.scope.gates.equivalence.reference is not None and self.wants(ctx, group, "baseline", 0)

    async def collect_variant(self, ctx: RunContext, session: EngineSession, variant: str) -> None:
        """The baseline's rounds on a reference variant's engine (no profiled probe: no path evidence is needed)."""
        group = session.group
        runs: dict[str, PointRun] = {}
        self.variant_runs[(group.id, variant)] = runs
        plans = self.request_plans.setdefault(group.id, {})
        side = SideCollection(ctx, session, runs, plans, check=self.name, max_attempts=self.max_attempts)
        async with session.engine.client() as client:
            await side.run(client, n_requests=self.n_requests, probe=False)
        self.artifacts.append(
            write_artifact(
                ctx,
                self.name,
                f"{group.id}.reference-{variant}.json",
                {pid: r.model_dump(mode="json") for pid, r in runs.items()},
            )
        )

    def variant_missing(self, ctx: RunContext, group: EngineGroup, variant: str, reason: str) -> None:
        self.variant_errors[(group.id, variant)] = reason

    async def _explain(self, ctx: RunContext, group_id: str, engine: EngineHandle) -> None:
        """Decode the text around the first divergences (needs the baseline's run of this group)."""
        base = self.runs.get((group_id, "baseline"))
        cand = self.runs.get((group_id, "candidate"))
        if not base or not cand:
            return
        tok = TokenizerClient(engine)
        top_k = ctx.scope.gates.equivalence.top_k
        for pid, crun in cand.items():
            brun = base.get(pid)
            if brun is None:
                continue
            n = 0
            for br, cr in zip(brun.records, crun.records, strict=False):
                if n >= self.explain_limit or br.error or cr.error:
                    continue
                comp = compare(br, cr, top_k)
                if comp.first_divergence is None or comp.exact_match:
                    continue
                n += 1
                p = comp.first_divergence
                bt = dict(br.top[p]) if p < len(br.top) else {}
                ct = dict(cr.top[p]) if p < len(cr.top) else {}
                btop = sorted(bt.items(), key=lambda kv: -kv[1])[:top_k]
                ctop = sorted(ct.items(), key=lambda kv: -kv[1])[:top_k]
                texts = await asyncio.gather(
                    tok.detokenize(br.token_ids[max(0, p - 12) : p]),
                    tok.detokenize(br.token_ids[p : p + 8]),
                    tok.detokenize(cr.token_ids[p : p + 8]),
                    tok.detokenize(br.token_ids[p : p + 1]),
                    tok.detokenize(cr.token_ids[p : p + 1]),
                    *(tok.detokenize([t]) for t, _ in btop),
                    *(tok.detokenize([t]) for t, _ in ctop),
                )
                k1 = 5 + len(btop)
                self.explanations[(group_id, pid, br.round, br.prompt_id)] = Explanation(
                    before=texts[0],
                    baseline_next=texts[1],
                    candidate_next=texts[2],
                    baseline_token=texts[3],
                    candidate_token=texts[4],
                    baseline_top=[(s, lp) for s, (_, lp) in zip(texts[5:k1], btop, strict=False)],
                    candidate_top=[(s, lp) for s, (_, lp) in zip(texts[k1:], ctop, strict=False)],
                )

    def judge(self, ctx: RunContext) -> CheckResult:
        gate = ctx.scope.gates.equivalence
        groups = sorted({gid for gid, _ in self.runs})
        if not groups:
            return CheckResult.not_run(self.name, "no engine ran the equivalence requests", required=self.required)
        j = _Judged()
        for gid in groups:
            self._judge_group(gate, gid, j)
        standard = used_standard_path(j.windows)
        verdict = fold_verdicts(j.verdicts)
        batch_verdicts = {str(b): fold_verdicts(vs).value for b, vs in sorted(j.per_batch.items())}
        if standard:
            verdict = Verdict.FAIL
        return CheckResult(
            check=self.name,
            verdict=verdict,
            reason=_reason(verdict, standard, batch_verdicts, len(j.point_rows), j.failures),
            required=self.required,
            gate=self.gate(ctx),
            summary={
                "per_batch_verdict": batch_verdicts,
                "points": len(j.point_rows),
                "requests": len(j.request_rows),
                "requests_per_point": self.n_requests,
                "prompt_set": str(prompt_set_path(ctx.scope, ctx.base_dir)),
                "thresholds": gate.model_dump(),
                "used_standard_path": standard,
            },
            failures=([f"equivalence {standard}"] if standard else []) + j.failures,
            tables=typed_tables(
                self.name, {"equivalence_points": j.point_rows, "equivalence_requests": j.request_rows}
            ),
            artifacts=list(self.artifacts),
        )

    def _judge_group(self, gate: EquivalenceGate, gid: str, j: _Judged) -> None:
        """Every point of one engine group both sides ran (a missing side or point is not run, saying so)."""
        base = self.runs.get((gid, "baseline"))
        cand = self.runs.get((gid, "candidate"))
        if base is None or cand is None:
            missing = "baseline" if base is None else "candidate"
            j.failures.append(f"group {gid}: the {missing} side never ran, so nothing was compared")
            j.verdicts.append(Verdict.NOT_RUN)
            return
        for pid, crun in cand.items():
            brun = base.get(pid)
            if brun is None:
                j.verdicts.append(Verdict.NOT_RUN)
                j.failures.append(f"{pid}: the baseline has no run at this point")
                continue
            if crun.window:
                j.windows.append(crun.window)
            try:
                v, row, req_rows, fails = judge_point(
                    gate,
                    gid,
                    brun,
                    crun,
                    self.explanations,
                    self.explain_limit,
                    variants=self._variants(gate, gid, pid),
                )
            except FasttrackError as exc:
                v, req_rows = Verdict.NOT_RUN, []
                row = {"group": gid, "point": pid, "batch": crun.batch, "verdict": "not_run", "problems": exc.message}
                fails = [f"{pid}: the outputs could not be compared: {exc.message}"]
            j.verdicts.append(v)
            j.per_batch.setdefault(crun.batch, []).append(v)
            j.point_rows.append(row)
            j.request_rows.extend(req_rows)
            j.failures.extend(fails)

    def _variants(self, gate: EquivalenceGate, gid: str, pid: str) -> dict[str, PointRun | str]:
        """Each reference variant's run at the point, or why it has none."""
        if gate.reference is None:
            return {}
        out: dict[str, PointRun | str] = {}
        for name in gate.reference.variants:
            run = self.variant_runs.get((gid, name), {}).get(pid)
            why = self.variant_errors.get((gid, name)) or "its engine answered no request at this point"
            out[name] = run if run is not None else why
        return out


@dataclass
class _Judged:
    """The points' rows, failures and verdicts as the groups are judged."""

    point_rows: list[dict[str, Any]] = field(default_factory=list)
    request_rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    per_batch: dict[int, list[Verdict]] = field(default_factory=dict)
    windows: list[WindowRecord] = field(default_factory=list)


def _reason(
    verdict: Verdict, standard: str | None, batch_verdicts: dict[str, str], points: int, failures: list[str]
) -> str:
    if standard:
        return f"the candidate {standard}; its outputs say nothing about the optimized path"
    if verdict is Verdict.PASS:
        return f"greedy outputs equivalent at all {points} config points (batch sizes {', '.join(batch_verdicts)})"
    if verdict is Verdict.FAIL:
        failing = [b for b, v in batch_verdicts.items() if v == "fail"]
        return f"greedy outputs differ beyond the thresholds at batch size(s) {', '.join(failing)}"
    return "some config points could not be judged: " + "; ".join(failures[:2])
