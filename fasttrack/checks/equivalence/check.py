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
* max |Δ logprob| on matching prefixes <= ``max_abs_logprob_diff``,
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
import math
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, ClassVar

from fasttrack.checks.base import EngineCheck, register
from fasttrack.checks.batching import run_batched
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.equivalence.judge import Explanations, judge_point
from fasttrack.checks.equivalence.records import Explanation, PointRun, compare, record_from
from fasttrack.checks.outcome import fold_verdicts, used_standard_path, write_artifact
from fasttrack.checks.windows import EvidenceWindow, WindowRecord
from fasttrack.errors import FasttrackError
from fasttrack.inputs import (
    PASSAGES,
    PromptBuilder,
    PromptItem,
    TokenizerClient,
    load_passages,
    load_prompt_set,
    prompt_set_path,
)
from fasttrack.plan import ConfigPoint, EngineGroup
from fasttrack.results import CheckResult, Gate, Side, Verdict
from fasttrack.scope.gates import CheckGate, EquivalenceGate

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineHandle

PROBE_TOKENS = 6
"""Tokens per request of the profiled path probe (a prefill and a few decode steps per point)."""
PACER_TOKENS = 1024
"""Prompt length of the prefill-only pacer request sent just before each round (see ``run_batched``)."""


@register
class EquivalenceCheck(EngineCheck):
    """Greedy output equivalence, per config point (batch size x context)."""

    name: ClassVar[str] = "equivalence"
    title: ClassVar[str] = "Output equivalence"
    report_view: ClassVar[str] = "equivalence"
    after: ClassVar[tuple[str, ...]] = ("kernels",)
    gate_model: ClassVar[type[CheckGate]] = EquivalenceGate

    explain_limit: ClassVar[int] = 3
    """Divergences per point decoded to text for the failure message."""
    max_attempts: ClassVar[int] = 3
    """Tries per round until its requests decode as one batch."""

    def __init__(self, *, requests_per_point: int = 8) -> None:
        self.n_requests = requests_per_point
        """At least this many requests per point (rounded up to whole batches)."""
        self.runs: dict[tuple[str, str], dict[str, PointRun]] = {}
        """(group id, side) -> point id -> run."""
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
        return Gate(
            statistic=(
                "per config point: fraction of requests satisfying vLLM's check_logprobs_close rule "
                f"(top-{gate.top_k}); "
                "max |Δ logprob| of the chosen token on matching prefixes; mean top-k KL(baseline || candidate)"
            ),
            threshold=(
                f"close >= {gate.min_close_fraction:g}; max |Δ logprob| <= {gate.max_abs_logprob_diff:g}; "
                f"KL <= {gate.max_kl:g}"
            ),
            rule=(
                "every point: close fraction, logprob drift and KL within the thresholds, batch composition verified "
                "on both sides from the profiler trace (or metrics), and the candidate's window ran the optimized path"
            ),
        )

    async def collect(self, ctx: RunContext, session: EngineSession) -> None:
        gate = ctx.scope.gates.equivalence
        prompt_file = prompt_set_path(ctx.scope, ctx.base_dir)
        prompts = load_prompt_set(prompt_file)
        ctx.provenance.input_file(prompt_file)
        ctx.provenance.input_file(PASSAGES)
        builder = PromptBuilder(TokenizerClient(session.engine), load_passages())
        group = session.group
        points = [p for p in ctx.plan.group_points(group) if not p.full_context]
        max_len = ctx.scope.envelope.context.max_model_len if ctx.scope.envelope else None
        side_runs: dict[str, PointRun] = {}
        self.runs[(group.id, session.side)] = side_runs
        # The first side to run fixes the requests (prompt ids per round); the other side reuses them.
        plans = self.request_plans.setdefault(group.id, {})
        async with session.engine.client() as client:
            for idx, point in enumerate(points):
                if point.id in plans:
                    continue
                b = point.batch
                rounds = max(1, math.ceil(self.n_requests / b))
                high = point.context if max_len is None else min(point.context, max_len - gate.max_tokens)
                low = max(1, high // 2)
                rows: list[list[tuple[PromptItem, list[int]]]] = []
                for r in range(rounds):
                    row = []
                    for j in range(b):
                        item = prompts[(idx * 7 + r * b + j) % len(prompts)]
                        ids = await builder.bounded(item.prompt, key=f"{point.id}/{item.id}", low=low, high=high)
                        row.append((item, ids))
                    rows.append(row)
                plans[point.id] = rows

            pacer_len = max(16, min(PACER_TOKENS, (max_len or PACER_TOKENS + 64) - 64))
            pacer_count = 0

            async def pacer() -> Any:
                # a prefill-only request with a fresh (uncached) prompt, so the engine is busy when the round arrives
                nonlocal pacer_count
                pacer_count += 1
                ids = await builder.exact(key=f"pacer-{session.side}-{pacer_count}", length=pacer_len)
                return await client.complete(ids, max_tokens=1, temperature=0.0)

            async def run_round(point: Any, r: int) -> None:
                run = side_runs.setdefault(point.id, PointRun(point=point.id, batch=point.batch, context=point.context))
                row = plans[point.id][r]
                # A round whose timing shows the requests did not decode together is repeated (greedy outputs are
                # deterministic, so this selects the batch composition, not the outputs); attempts are recorded.
                results, bc = await run_batched(
                    lambda: [
                        client.complete(
                            ids,
                            max_tokens=gate.max_tokens,
                            temperature=0.0,
                            logprobs=gate.top_k,
                            tokens_as_ids=True,
                            ignore_eos=True,
                        )
                        for _, ids in row
                    ],
                    client=client,
                    target=len(row),
                    attempts=self.max_attempts,
                    pacer=pacer,
                )
                for (item, ids), res in zip(row, results, strict=False):
                    run.records.append(record_from(point.id, point.batch, r, item, ids, res))
                run.round_checks.append(bc)

            # Path evidence: a short probe per point (its first round's prompts, PROBE_TOKENS tokens), all points
            # of one context in one profiler window, split by batch size. Trace export costs seconds per window
            # and tens of ms per engine step on small hosts, so the measured rounds below are not profiled.
            for c in sorted({p.context for p in points}):
                at_c = [p for p in points if p.context == c]
                async with EvidenceWindow(
                    ctx,
                    session.engine,
                    check=self.name,
                    name=f"equivalence-{group.id}-ctx{c}",
                    points={p.id: p.batch for p in at_c},
                    side=session.side,
                ) as win:
                    for point in at_c:

                        def probe_round(point: ConfigPoint = point) -> list[Coroutine[Any, Any, Any]]:
                            return [
                                client.complete(ids, max_tokens=PROBE_TOKENS, temperature=0.0, ignore_eos=True)
                                for _, ids in plans[point.id][0]
                            ]

                        await run_batched(probe_round, client=client, target=point.batch, attempts=2)
                for point in at_c:
                    side_runs.setdefault(point.id, PointRun(point=point.id, batch=point.batch, context=point.context))
                    side_runs[point.id].window = win.record
            for point in points:
                for r in range(len(plans[point.id])):
                    await run_round(point, r)
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
        g = self.gate(ctx)
        groups = sorted({gid for gid, _ in self.runs})
        if not groups:
            return CheckResult.not_run(self.name, "no engine ran the equivalence requests", required=self.required)
        point_rows: list[dict[str, Any]] = []
        request_rows: list[dict[str, Any]] = []
        failures: list[str] = []
        verdicts: list[Verdict] = []
        per_batch: dict[int, list[Verdict]] = {}
        windows: list[WindowRecord] = []
        for gid in groups:
            base = self.runs.get((gid, "baseline"))
            cand = self.runs.get((gid, "candidate"))
            if base is None or cand is None:
                missing = "baseline" if base is None else "candidate"
                failures.append(f"group {gid}: the {missing} side never ran, so nothing was compared")
                verdicts.append(Verdict.NOT_RUN)
                continue
            for pid, crun in cand.items():
                brun = base.get(pid)
                if brun is None:
                    verdicts.append(Verdict.NOT_RUN)
                    failures.append(f"{pid}: the baseline has no run at this point")
                    continue
                if crun.window:
                    windows.append(crun.window)
                try:
                    v, row, req_rows, fails = judge_point(gate, gid, brun, crun, self.explanations, self.explain_limit)
                except FasttrackError as exc:
                    v, row, req_rows = (
                        Verdict.NOT_RUN,
                        {
                            "group": gid,
                            "point": pid,
                            "batch": crun.batch,
                            "verdict": "not_run",
                            "problems": exc.message,
                        },
                        [],
                    )
                    fails = [f"{pid}: the outputs could not be compared: {exc.message}"]
                verdicts.append(v)
                per_batch.setdefault(crun.batch, []).append(v)
                point_rows.append(row)
                request_rows.extend(req_rows)
                failures.extend(fails)
        standard = used_standard_path(windows)
        verdict = fold_verdicts(verdicts)
        batch_verdicts = {str(b): fold_verdicts(vs).value for b, vs in sorted(per_batch.items())}
        failing_batches = [b for b, v in batch_verdicts.items() if v == "fail"]
        if standard:
            verdict = Verdict.FAIL
            reason = f"the candidate {standard}; its outputs say nothing about the optimized path"
        elif verdict is Verdict.PASS:
            reason = (
                f"greedy outputs equivalent at all {len(point_rows)} config points "
                f"(batch sizes {', '.join(batch_verdicts)})"
            )
        elif verdict is Verdict.FAIL:
            reason = f"greedy outputs differ beyond the thresholds at batch size(s) {', '.join(failing_batches)}"
        else:
            reason = "some config points could not be judged: " + "; ".join(failures[:2])
        return CheckResult(
            check=self.name,
            verdict=verdict,
            reason=reason,
            required=self.required,
            gate=g,
            summary={
                "per_batch_verdict": batch_verdicts,
                "points": len(point_rows),
                "requests": len(request_rows),
                "requests_per_point": self.n_requests,
                "prompt_set": str(prompt_set_path(ctx.scope, ctx.base_dir)),
                "thresholds": gate.model_dump(),
                "used_standard_path": standard,
            },
            failures=([f"equivalence {standard}"] if standard else []) + failures,
            tables={"equivalence_points": point_rows, "equivalence_requests": request_rows},
            artifacts=list(self.artifacts),
        )
