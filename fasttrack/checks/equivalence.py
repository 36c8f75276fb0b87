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
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from fasttrack.checks._common import (
    BatchCheck,
    EvidenceWindow,
    PromptBuilder,
    PromptItem,
    TokenizerClient,
    WindowRecord,
    clip,
    fold_verdicts,
    load_passages,
    load_prompt_set,
    prompt_set_path,
    run_async,
    run_batched,
    used_standard_path,
    write_artifact,
)
from fasttrack.checks.base import Check, CheckResult, EngineSession, Gate, RunContext, Verdict, register
from fasttrack.errors import FasttrackError
from fasttrack.stats import GreedyComparison, compare_greedy, summarize_greedy

PROBE_TOKENS = 6
"""Tokens per request of the profiled path probe (a prefill and a few decode steps per point)."""
PACER_TOKENS = 1024
"""Prompt length of the prefill-only pacer request sent just before each round (see ``run_batched``)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class GreedyRecord(_Model):
    """One greedy request on one side."""

    point: str
    """Config point id."""
    batch: int
    """Requests sent at once."""
    round: int
    """Round index at this point (rounds run one after another)."""
    prompt_id: str
    """Prompt set id."""
    prompt_text: str
    """The prompt text (before length adjustment)."""
    prompt_ids: list[int]
    """Token ids sent."""
    token_ids: list[int] = Field(default_factory=list)
    """Generated token ids."""
    logprobs: list[float | None] = Field(default_factory=list)
    """Logprob of each generated token."""
    top: list[list[tuple[int, float]]] = Field(default_factory=list)
    """Top-k (token id, logprob) per generated position."""
    text: str = ""
    """Generated text."""
    finish_reason: str | None = None
    error: str | None = None
    """The server's error message, when the request failed."""

    def top_maps(self) -> list[dict[int, float] | None]:
        out: list[dict[int, float] | None] = []
        for i, pos in enumerate(self.top):
            d = {t: lp for t, lp in pos}
            if i < len(self.token_ids) and i < len(self.logprobs) and self.logprobs[i] is not None:
                d.setdefault(self.token_ids[i], float(self.logprobs[i]))  # type: ignore[arg-type]
            out.append(d or None)
        return out


class PointRun(_Model):
    """One side's requests at one config point."""

    point: str
    batch: int
    context: int
    records: list[GreedyRecord] = Field(default_factory=list)
    window: WindowRecord | None = None
    """The profiled path probe of this point (decode steps per batch size, optimized or stock)."""
    round_checks: list[BatchCheck] = Field(default_factory=list)
    """Batch composition per round, from the requests' completion times."""


class Explanation(_Model):
    """Text around a divergence, decoded with the engine's tokenizer."""

    before: str
    """The continuation up to the divergence."""
    baseline_next: str
    """The baseline's continuation from the divergence on."""
    candidate_next: str
    """The candidate's continuation from the divergence on."""
    baseline_token: str
    candidate_token: str
    baseline_top: list[tuple[str, float]]
    """The baseline's top-k at the divergence (text, logprob)."""
    candidate_top: list[tuple[str, float]]


def _prompt_sha(ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


@register
class EquivalenceCheck(Check):
    """Greedy output equivalence, per config point (batch size x context)."""

    name = "equivalence"
    title = "Greedy output equivalence per batch size"

    explain_limit: ClassVar[int] = 3
    max_attempts: ClassVar[int] = 3
    """Tries per round until its requests decode as one batch."""
    """Divergences per point decoded to text for the failure message."""

    def __init__(self, *, requests_per_point: int = 8) -> None:
        self.n_requests = requests_per_point
        """At least this many requests per point (rounded up to whole batches)."""
        self.runs: dict[tuple[str, str], dict[str, PointRun]] = {}
        """(group id, side) -> point id -> run."""
        self.request_plans: dict[str, dict[str, list[list[tuple[PromptItem, list[int]]]]]] = {}
        """group id -> point id -> rounds of (prompt, token ids), fixed by the first side that ran."""
        self.explanations: dict[tuple[str, str, int, str], Explanation] = {}
        self.artifacts: list[str] = []
        self.notes: list[str] = []

    # ------------------------------------------------------------------ plan

    def skip_reason(self, ctx: RunContext) -> str | None:
        if not any(not p.full_context for p in ctx.plan.points):
            return (
                "the plan has no config point with a non-full context (full contexts are checked by the features check)"
            )
        return None

    def wants(self, ctx: RunContext, session: EngineSession) -> bool:
        # Greedy outputs are deterministic; one engine lifetime per side is enough.
        return session.lifetime == 0 and any(not p.full_context for p in ctx.plan.group_points(session.group))

    # ------------------------------------------------------------------ collect

    def collect(self, ctx: RunContext, session: EngineSession) -> None:
        run_async(self._collect(ctx, session))

    async def _collect(self, ctx: RunContext, session: EngineSession) -> None:
        gate = ctx.scope.gates.equivalence
        prompts = load_prompt_set(prompt_set_path(ctx))
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
                    run.records.append(_record(point.id, point.batch, r, item, ids, res))
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
                        await run_batched(
                            lambda point=point: [
                                client.complete(ids, max_tokens=PROBE_TOKENS, temperature=0.0, ignore_eos=True)
                                for _, ids in plans[point.id][0]
                            ],
                            client=client,
                            target=point.batch,
                            attempts=2,
                        )
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

    async def _explain(self, ctx: RunContext, group_id: str, engine: Any) -> None:
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
                comp = _compare(br, cr, top_k)
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

    # ------------------------------------------------------------------ judge

    def judge(self, ctx: RunContext) -> CheckResult:
        gate = ctx.scope.gates.equivalence
        g = Gate(
            statistic=(
                f"per config point: fraction of requests satisfying vLLM's check_logprobs_close rule (top-{gate.top_k}); "
                "max |Δ logprob| of the chosen token on matching prefixes; mean top-k KL(baseline || candidate)"
            ),
            threshold=f"close >= {gate.min_close_fraction:g}; max |Δ logprob| <= {gate.max_abs_logprob_diff:g}; KL <= {gate.max_kl:g}",
            rule=(
                "every point: close fraction, logprob drift and KL within the thresholds, batch composition verified "
                "on both sides from the profiler trace (or metrics), and the candidate's window ran the optimized path"
            ),
        )
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
                    v, row, req_rows, fails = self._judge_point(ctx, gid, brun, crun)
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
            reason = f"greedy outputs equivalent at all {len(point_rows)} config points (batch sizes {', '.join(batch_verdicts)})"
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
                "prompt_set": str(prompt_set_path(ctx)),
                "thresholds": gate.model_dump(),
                "used_standard_path": standard,
            },
            failures=([f"equivalence {standard}"] if standard else []) + failures,
            tables={"equivalence_points": point_rows, "equivalence_requests": request_rows},
            artifacts=list(self.artifacts),
        )

    def _judge_point(
        self, ctx: RunContext, gid: str, brun: PointRun, crun: PointRun
    ) -> tuple[Verdict, dict[str, Any], list[dict[str, Any]], list[str]]:
        gate = ctx.scope.gates.equivalence
        pid, b = crun.point, crun.batch
        failures: list[str] = []
        comps: list[GreedyComparison] = []
        req_rows: list[dict[str, Any]] = []
        errors: list[str] = []
        mismatched_prompts = 0
        for br, cr in zip(brun.records, crun.records, strict=False):
            if br.prompt_id != cr.prompt_id or br.round != cr.round:
                errors.append(f"request order differs between sides ({br.prompt_id} vs {cr.prompt_id})")
                continue
            if br.prompt_ids != cr.prompt_ids:
                mismatched_prompts += 1
            if br.error or cr.error:
                who = "baseline" if br.error else "candidate"
                errors.append(f"{who} request for {br.prompt_id} failed: {br.error or cr.error}")
                continue
            comp = _compare(br, cr, gate.top_k)
            comps.append(comp)
            req_rows.append(
                {
                    "group": gid,
                    "point": pid,
                    "batch": b,
                    "round": br.round,
                    "prompt_id": br.prompt_id,
                    "prompt_tokens": len(br.prompt_ids),
                    "prompt_sha": _prompt_sha(br.prompt_ids),
                    "exact_match": comp.exact_match,
                    "first_divergence": comp.first_divergence,
                    "close": comp.close,
                    "close_reason": comp.close_reason,
                    "n_prefix_compared": comp.n_prefix_compared,
                    "max_abs_logprob_diff": comp.max_abs_logprob_diff,
                    "mean_abs_logprob_diff": comp.mean_abs_logprob_diff,
                    "kl_mean": comp.kl_mean,
                    "kl_max": comp.kl_max,
                    "baseline_tokens": len(br.token_ids),
                    "candidate_tokens": len(cr.token_ids),
                    "baseline_text": br.text,
                    "candidate_text": cr.text,
                }
            )
        bcheck_b = _rounds_check(brun)
        bcheck_c = _rounds_check(crun)
        summary = summarize_greedy(comps) if comps else None
        problems: list[str] = []
        verdict = Verdict.PASS
        if mismatched_prompts:
            problems.append(
                f"{mismatched_prompts} prompt(s) were different token ids on the two sides (different tokenizers?)"
            )
        if errors:
            problems.extend(errors[:3])
        if summary is None:
            verdict = Verdict.NOT_RUN if not errors else Verdict.FAIL
        else:
            if summary.close_fraction < gate.min_close_fraction:
                problems.append(
                    f"{summary.n_requests - summary.n_close} of {summary.n_requests} requests break vLLM's check_logprobs_close "
                    f"rule (close fraction {summary.close_fraction:.2f} < {gate.min_close_fraction:g})"
                )
            if summary.max_abs_logprob_diff is not None and summary.max_abs_logprob_diff > gate.max_abs_logprob_diff:
                problems.append(
                    f"max |Δ logprob| on matching prefixes {summary.max_abs_logprob_diff:.4f} > {gate.max_abs_logprob_diff:g}"
                )
            if summary.kl_mean is not None and summary.kl_mean > gate.max_kl:
                problems.append(f"mean top-{gate.top_k} KL {summary.kl_mean:.4f} > {gate.max_kl:g}")
        for who, bc in (("baseline", bcheck_b), ("candidate", bcheck_c)):
            if bc is not None and not bc.verified:
                problems.append(f"the {who}'s batch composition was not verified: {bc.detail}")
        if crun.window and crun.window.available:
            n_at, opt_at = crun.window.steps_at(b)
            if n_at and opt_at == 0:
                problems.append(
                    f"used the standard path: none of the candidate's {n_at} decode steps at batch {b} ran an "
                    "optimized-path marker"
                )
        if problems:
            verdict = Verdict.FAIL
        if verdict is Verdict.FAIL:
            msg = f"{pid} (batch {b}): " + "; ".join(problems)
            evidence = self._evidence_lines(gid, pid, brun, crun, comps, gate.top_k)
            failures.append(msg + ("\n" + "\n".join(evidence) if evidence else ""))
        row = {
            "group": gid,
            "point": pid,
            "batch": b,
            "context": crun.context,
            "verdict": verdict.value,
            "requests": len(brun.records),
            "n_exact": summary.n_exact if summary else 0,
            "n_close": summary.n_close if summary else 0,
            "close_fraction": summary.close_fraction if summary else None,
            "max_abs_logprob_diff": summary.max_abs_logprob_diff if summary else None,
            "mean_abs_logprob_diff": summary.mean_abs_logprob_diff if summary else None,
            "kl_mean": summary.kl_mean if summary else None,
            "kl_max": summary.kl_max if summary else None,
            "baseline_batch_verified": bcheck_b.verified if bcheck_b else None,
            "baseline_batch_evidence": bcheck_b.detail if bcheck_b else None,
            "candidate_batch_verified": bcheck_c.verified if bcheck_c else None,
            "candidate_batch_evidence": bcheck_c.detail if bcheck_c else None,
            "candidate_decode_steps": crun.window.decode_steps if crun.window else None,
            "candidate_optimized_decode_steps": crun.window.optimized_decode_steps if crun.window else None,
            "candidate_path_evidence": crun.window.available if crun.window else False,
            "problems": "; ".join(problems),
        }
        return verdict, row, req_rows, failures

    def _evidence_lines(
        self, gid: str, pid: str, brun: PointRun, crun: PointRun, comps: list[GreedyComparison], top_k: int
    ) -> list[str]:
        lines: list[str] = []
        pairs = [(br, cr) for br, cr in zip(brun.records, crun.records, strict=False) if not (br.error or cr.error)]
        shown = 0
        for (br, cr), comp in zip(pairs, comps, strict=False):
            if comp.exact_match or shown >= self.explain_limit:
                continue
            shown += 1
            p = comp.first_divergence
            ex = self.explanations.get((gid, pid, br.round, br.prompt_id))
            head = (
                f"  prompt {br.prompt_id} ({len(br.prompt_ids)} tokens, ends {clip(br.prompt_text[-50:], 52)}): "
                f"first divergence at generated token {p}; {comp.close_reason}"
            )
            if comp.max_abs_logprob_diff is not None:
                head += f"; max |Δ logprob| before it {comp.max_abs_logprob_diff:.4f}"
            lines.append(head)
            if p is not None and p < len(br.token_ids) and p < len(cr.token_ids):
                blp = br.logprobs[p] if p < len(br.logprobs) else None
                clp = cr.logprobs[p] if p < len(cr.logprobs) else None
                if ex is not None:
                    lines.append(
                        f"    ...{clip(ex.before, 50)} | baseline {clip(ex.baseline_next, 40)} "
                        f"(token {clip(ex.baseline_token, 16)}, logprob {_f(blp)}) | candidate {clip(ex.candidate_next, 40)} "
                        f"(token {clip(ex.candidate_token, 16)}, logprob {_f(clp)})"
                    )
                    lines.append(
                        "    baseline top-%d: %s; candidate top-%d: %s"
                        % (
                            top_k,
                            ", ".join(f"{s!r} {lp:.3f}" for s, lp in ex.baseline_top),
                            top_k,
                            ", ".join(f"{s!r} {lp:.3f}" for s, lp in ex.candidate_top),
                        )
                    )
                else:
                    lines.append(
                        f"    baseline token id {br.token_ids[p]} (logprob {_f(blp)}) vs candidate token id "
                        f"{cr.token_ids[p]} (logprob {_f(clp)}); baseline text {clip(br.text, 60)}, "
                        f"candidate text {clip(cr.text, 60)}"
                    )
        if not lines:
            worst = max(comps, key=lambda c: c.max_abs_logprob_diff or 0.0, default=None)
            if worst is not None and worst.max_abs_logprob_diff is not None:
                i = comps.index(worst)
                br = pairs[i][0]
                lines.append(
                    f"  largest drift: prompt {br.prompt_id}, max |Δ logprob| {worst.max_abs_logprob_diff:.4f}, "
                    f"KL mean {_f(worst.kl_mean)} over {worst.n_prefix_compared} identical tokens"
                )
        return lines


def _rounds_check(run: PointRun) -> BatchCheck | None:
    """Every round's batch check (metrics samples) and the profiled window's decode steps at the batch size, folded
    into one: verified only if every round peaked at the batch size and the trace shows decode steps at it."""
    checks = [(f"round {i}", c) for i, c in enumerate(run.round_checks)]
    if run.window is not None and run.window.available:
        n_at, _ = run.window.steps_at(run.batch)
        sizes = ", ".join(f"{v}x batch {k}" for k, v in sorted(run.window.decode_batch_sizes.items()))
        checks.append(
            (
                "trace",
                BatchCheck(
                    target=run.batch,
                    verified=n_at >= 1,
                    source="profiler",
                    steps_at_target=n_at,
                    decode_steps=run.window.decode_steps,
                    detail=f"{n_at} decode steps at batch {run.batch} in window {run.window.name} ({sizes})",
                ),
            )
        )
    elif not checks and run.window is not None:
        checks.append(("window", run.window.batch_check(run.batch)))
    if not checks:
        return None
    bad = [(lab, c) for lab, c in checks if not c.verified]
    shown = bad or checks[:1] + [x for x in checks if x[0] == "trace"]
    detail = "; ".join(f"{lab}: {c.detail}" for lab, c in shown)
    if not bad and len(checks) > len(shown):
        detail += f"; {len(checks) - len(shown)} more check(s) verified"
    return BatchCheck(
        target=run.batch,
        verified=not bad,
        source="+".join(sorted({c.source for _, c in checks})),
        steps_at_target=sum(c.steps_at_target for _, c in checks),
        decode_steps=sum(c.decode_steps for _, c in checks),
        above_target=sum(c.above_target for _, c in checks),
        detail=detail,
    )


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _compare(br: GreedyRecord, cr: GreedyRecord, top_k: int) -> GreedyComparison:
    return compare_greedy(br.token_ids, cr.token_ids, br.top_maps(), cr.top_maps(), top_k=top_k)


def _record(point: str, batch: int, rnd: int, item: PromptItem, ids: list[int], res: Any) -> GreedyRecord:
    rec = GreedyRecord(point=point, batch=batch, round=rnd, prompt_id=item.id, prompt_text=item.prompt, prompt_ids=ids)
    if isinstance(res, BaseException):
        from fasttrack.engine import EngineCrashed

        if isinstance(res, EngineCrashed) or not isinstance(res, Exception):  # a crash, or Ctrl-C's cancellation
            raise res
        rec.error = getattr(res, "message", None) or f"{type(res).__name__}: {res}"
        return rec
    ch = res.choice
    rec.text = ch.text
    rec.finish_reason = ch.finish_reason
    positions = ch.logprobs or []
    rec.token_ids = list(ch.token_ids or [p.token_id for p in positions if p.token_id is not None])
    rec.logprobs = [p.logprob for p in positions]
    rec.top = [[(t.token_id, t.logprob) for t in p.top if t.token_id is not None] for p in positions]
    return rec
