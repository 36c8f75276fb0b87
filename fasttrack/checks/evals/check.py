"""Model evaluations (AIME25, MRCR) through lm-eval, paired between baseline and candidate.

For every eval of the scope, at every config point its ``points`` filter selects in
this plan (one run per engine group and batch size), the check runs lm-eval against
each side's server with ``num_concurrent`` = the point's batch size, so the engine
decodes batches of that size. In the first engine lifetime of each side:

* baseline: the primary run and a repeated *reference* run (same samples, seeds and
  settings), for every repeat of the eval;
* candidate: the primary run, for every repeat;
* both: an *evidence* run that repeats the first 2 x batch samples (exactly
  :data:`EVIDENCE_MAX_TOKENS` generated tokens each, past the end of the answer, same
  concurrency: short answers of a few tokens would finish before a late request of the
  batch arrived, and the window would show no step at the point's batch) inside a
  profiler window (at most :data:`PROFILE_WINDOW_S` seconds). Its path evidence goes
  to ``ctx.evidence`` (check ``evals``) for the coverage check. Graded runs are never
  profiled: the profiler slows every step, which changes how requests are batched
  together, and a path whose numerics depend on the batch size (split-K tuned per
  batch) then produces different greedy outputs than it does unobserved.

Samples are chosen once and are identical on both sides (:mod:`fasttrack.evals.samples`).

The gate (:mod:`fasttrack.evals.compare`), at every eval point:

1. task score: 95% bootstrap lower bound of mean(candidate - baseline) >= -margin,
   and the candidate's mean score >= floor;
2. output agreement: 95% bootstrap lower bound of mean(agreement of candidate with
   baseline - agreement of the repeated baseline run with the baseline) >= -margin.

A dataset that cannot be found, an eval whose filter selects no point of the plan,
or a run that did not complete makes the check ``not_run`` with the reason.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrack.checks.base import Blocker, EngineCheck, TierView, register
from fasttrack.checks.context import EngineSession, RunContext
from fasttrack.checks.evals.cost import COST
from fasttrack.checks.evals.judge import judge
from fasttrack.checks.evals.units import (
    EVIDENCE_MAX_TOKENS,
    EVIDENCE_SAMPLES_PER_BATCH,
    GATE,
    PROFILE_WINDOW_S,
    EvalState,
    EvalUnit,
    RunRecord,
    TokenCounter,
    matching_units,
)
from fasttrack.checks.requests import in_thread
from fasttrack.checks.windows import fallback_regex, marker_set
from fasttrack.errors import FasttrackError
from fasttrack.evals.compare import SampleOutcome
from fasttrack.evals.datasets import resolve_dataset
from fasttrack.evals.runner import GenerationSettings, LmEvalOutput, run_lm_eval
from fasttrack.evals.samples import Selection, select_samples
from fasttrack.planning.plan import EngineGroup
from fasttrack.results import CheckResult, Gate, PathEvidence, Side
from fasttrack.scope import EvalSpec, Scope

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.engine import EngineHandle


def check_eval_data_names(scope: Scope, names: Iterable[str]) -> None:
    """``--eval-data`` may only name evals the scope declares (an input error otherwise)."""
    unknown = sorted(set(names) - {e.name for e in scope.evals})
    if unknown:
        raise FasttrackError(
            f"--eval-data names eval(s) {unknown} that the scope does not declare.",
            hint=f"The scope's evals: {', '.join(e.name for e in scope.evals) or '(none)'}.",
        )


@register
class EvalsCheck(EngineCheck, name="evals", title="Model evaluations", report_view="evals", after=("coverage",)):
    """Model evaluations (AIME25, MRCR) through lm-eval, paired against the baseline."""

    cost = COST

    @classmethod
    def planned(cls, tier: TierView) -> list[str]:
        return tier.plan.tier_evals([e.name for e in tier.scope.evals])

    @classmethod
    def passability(cls, tier: TierView) -> list[Blocker]:
        """The tier runs an eval; an eval's ``points`` filter must select a config point of the tier; its data must
        exist."""
        if not cls.planned(tier):
            what = (
                "the scope declares no evals" if not tier.scope.evals else "the tier selects none of the scope's evals"
            )
            return [
                tier.blocker(
                    "evals",
                    what,
                    f"declare evals (and select them in {tier.hint}.evals), or leave evals out of {tier.hint}.checks",
                )
            ]
        out = []
        for ev in tier.scope.evals:
            if ev.name in cls.planned(tier):
                out.extend(_eval_blockers(tier, ev))
        return out

    def __init__(self) -> None:
        self.state = EvalState()
        self._prepared = False

    def gate(self, ctx: RunContext) -> Gate:
        return GATE

    def _prepare(self, ctx: RunContext) -> None:
        if self._prepared:
            return
        self._prepared = True
        overrides = {name: str(path) for name, path in ctx.eval_data.items()}
        check_eval_data_names(ctx.scope, overrides)

        in_tier = set(ctx.plan.tier_evals([e.name for e in ctx.scope.evals]))
        for spec in ctx.scope.evals:
            if spec.name not in in_tier:  # the tier leaves it out (tiers.<tier>.evals)
                continue
            try:
                ds = resolve_dataset(
                    name=spec.name,
                    kind=spec.kind,
                    data=spec.data,
                    hub_dataset=spec.hub_dataset,
                    resolve_path=ctx.resolve,
                    override=overrides.get(spec.name),
                )
            except FasttrackError as exc:
                self.state.missing[spec.name] = exc.message
                continue
            self.state.datasets[spec.name] = ds
            ctx.provenance.dataset(f"evals/{spec.name}", ds.sha256)
            units = matching_units(ctx, spec)
            if not units:
                self.state.unusable[spec.name] = (
                    f"eval {spec.name!r}: no config point of this plan ({ctx.plan.tier} tier, shard {ctx.plan.shard}) "
                    f"matches its points filter {spec.points}"
                )
            else:
                self.state.units[spec.name] = units

    def skip_reason(self, ctx: RunContext) -> str | None:
        if not ctx.scope.evals:
            return "the scope declares no evals"
        self._prepare(ctx)
        if not self.state.units:
            reasons = list(self.state.missing.values()) + list(self.state.unusable.values())
            return "; ".join(reasons) or "no eval can run"
        return None

    def wants(self, ctx: RunContext, group: EngineGroup, side: Side, lifetime: int) -> bool:
        self._prepare(ctx)
        if lifetime != 0:
            return False
        return any(u.group == group.id for units in self.state.units.values() for u in units)

    async def collect(self, ctx: RunContext, session: EngineSession) -> None:
        self._prepare(ctx)
        engine = session.engine
        for spec in ctx.scope.evals:
            for unit in self.state.units.get(spec.name, []):
                if unit.group != session.group.id:
                    continue
                try:
                    selection = await in_thread(partial(self._selection, ctx, spec, engine), name="evals-selection")
                except FasttrackError as exc:
                    self.state.unusable.setdefault(spec.name, exc.message)
                    continue
                roles = ("primary", "reference") if session.side == "baseline" else ("primary",)
                runs = [(repeat, role) for repeat in range(spec.repeats) for role in roles] + [(0, "evidence")]
                for repeat, role in runs:
                    try:
                        await self._run(ctx, session, spec, unit, selection, repeat=repeat, role=role)
                    except FasttrackError as exc:
                        where = f"{spec.name} at {unit.point} on the {session.side} ({role}, repeat {repeat})"
                        msg = f"{where}: {exc.message}"
                        self.state.errors.append(msg)
                        ctx.log(f"evals: {msg}")
                        engine.check_alive()

    def _selection(self, ctx: RunContext, spec: EvalSpec, engine: EngineHandle) -> Selection:
        """The eval's samples, chosen once (blocking: MRCR counts prompt tokens over HTTP)."""
        if spec.name in self.state.selections:
            return self.state.selections[spec.name]
        ds = self.state.datasets[spec.name]
        tier_limit = ctx.scope.tiers[ctx.tier].eval_limit if ctx.tier in ctx.scope.tiers else None
        limits = [x for x in (spec.limit, tier_limit) if x]
        limit = min(limits) if limits else None
        if spec.kind == "mrcr":
            counter = TokenCounter(engine.base_url, engine.model)
            max_len = counter.max_model_len
            if max_len is None and ctx.scope.envelope is not None:
                max_len = ctx.scope.envelope.context.max_model_len
            sel = select_samples(
                ds,
                limit=limit,
                count_tokens=counter,
                max_prompt_tokens=(max_len - spec.max_tokens) if max_len else None,
                prefer_long="context" in spec.points,
            )
        else:
            sel = select_samples(ds, limit=limit)
        sel.write(ctx.artifact_dir("evals") / spec.name)
        self.state.selections[spec.name] = sel
        ctx.log(
            f"evals: {spec.name}: {len(sel.samples)} samples from {ds.location} ({ds.source}, sha256 {ds.sha256[:12]})"
            + (f", {sel.skipped_too_long} skipped as too long" if sel.skipped_too_long else "")
        )
        return sel

    async def _run(
        self,
        ctx: RunContext,
        session: EngineSession,
        spec: EvalSpec,
        unit: EvalUnit,
        selection: Selection,
        *,
        repeat: int,
        role: str,
    ) -> None:
        """One lm-eval run. 'primary'/'reference' runs are graded and never profiled; the 'evidence' run
        repeats the first samples (short generations, same concurrency) inside a profiler window."""
        engine = session.engine
        assert selection.file is not None
        samples = selection.samples
        data_file = Path(selection.file)
        max_tokens = spec.max_tokens
        if role == "evidence":
            samples = samples[: min(len(samples), EVIDENCE_SAMPLES_PER_BATCH * unit.batch)]
            data_file = selection.write_subset(ctx.artifact_dir("evals") / spec.name, len(samples))
            max_tokens = min(spec.max_tokens, EVIDENCE_MAX_TOKENS)
        ignore_eos = role == "evidence"
        ctx.provenance.seed(f"evals/{spec.name}/repeat{repeat}", repeat)
        kwargs: dict[str, Any] = dict(
            kind=spec.kind,
            base_url=engine.base_url,
            model=engine.model,
            data_file=data_file,
            settings=GenerationSettings(
                max_tokens=max_tokens,
                temperature=spec.temperature,
                seed=repeat,
                num_concurrent=unit.batch,
                ignore_eos=ignore_eos,
            ),
        )
        label = f"{spec.name} at {unit.point} (batch {unit.batch}) on the {session.side}, {role}, repeat {repeat}"
        ctx.log(f"evals: running {label}")
        evidence: dict[str, Any] | None = None
        if role == "evidence":
            output, evidence = await self._evidence_run(ctx, session, spec, unit, kwargs)
        else:
            output = await in_thread(lambda: run_lm_eval(**kwargs), name=f"lm-eval-{spec.name}")
        by_doc = {s.doc_id: s for s in samples}
        if sorted(r["doc_id"] for r in output.samples) != sorted(by_doc):
            raise FasttrackError(
                f"lm-eval returned {len(output.samples)} samples for {label}; {len(by_doc)} were selected"
            )
        outcomes = [
            SampleOutcome(sample_id=by_doc[r["doc_id"]].sample_id, repeat=repeat, output=r["output"], score=r["score"])
            for r in output.samples
        ]
        rel = self._write_run_artifact(ctx, spec.name, unit, session.side, role, repeat, output, selection, data_file)
        self.state.runs.append(
            RunRecord(
                eval=spec.name,
                kind=spec.kind,
                point=unit.point,
                points=list(unit.points),
                group=unit.group,
                batch=unit.batch,
                side=session.side,
                role=role,
                repeat=repeat,
                lifetime=session.lifetime,
                output=output,
                outcomes=outcomes,
                artifact=rel,
                evidence=evidence,
                engine={"base_url": engine.base_url, "model": engine.model, "owned": engine.owned},
            )
        )
        mean = sum(o.score for o in outcomes) / len(outcomes)
        ctx.log(f"evals: {label}: mean score {mean:.3f} over {len(outcomes)} samples in {output.wall_s:.1f} s")

    async def _evidence_run(
        self, ctx: RunContext, session: EngineSession, spec: EvalSpec, unit: EvalUnit, kwargs: dict[str, Any]
    ) -> tuple[LmEvalOutput, dict[str, Any]]:
        """The evidence run: inside a profiler window, or, where no trace can be taken, unprofiled with its
        path evidence recorded as unavailable (the coverage check reads that as no evidence, never as a pass)."""
        engine = session.engine
        window = f"evals-{spec.name}-b{unit.batch}"
        unavailable = None
        if engine.profiler_dir is None:
            unavailable = f"the {session.side} engine has no profiler (no --profiler-config), so no trace was taken"
        elif ctx.scope.path_markers is None:
            unavailable = "the scope declares no path_markers"
        if unavailable is None:
            return await self._profiled(ctx, engine, window, unit, kwargs)
        output = await in_thread(lambda: run_lm_eval(**kwargs), name=f"lm-eval-{window}")
        ctx.evidence.append(
            PathEvidence(
                check=self.name,
                point=unit.point,
                side=session.side,
                window=window,
                optimized_ops=0,
                stock_ops=0,
                decode_steps=0,
                optimized_decode_steps=0,
                detail={"unavailable": unavailable, "points": unit.points},
            )
        )
        self.state.notes.append(f"{spec.name} at {unit.point} on the {session.side}: {unavailable}")
        return output, {"window": window, "unavailable": unavailable}

    async def _profiled(
        self, ctx: RunContext, engine: EngineHandle, window: str, unit: EvalUnit, kwargs: dict[str, Any]
    ) -> tuple[LmEvalOutput, dict[str, Any]]:
        """Run lm-eval in a worker thread inside a profiler window of at most PROFILE_WINDOW_S."""
        from fasttrack.engine import ProfilerWindow

        # the scope's markers with its device counters: the window reads them around the run (on the H200 run
        # the evals' windows were judged by kernel names alone, without the replay count)
        async with ProfilerWindow(engine, window, markers=marker_set(ctx), fallback_pattern=fallback_regex(ctx)) as win:
            t0 = time.monotonic()
            run = asyncio.ensure_future(in_thread(lambda: run_lm_eval(**kwargs), name=f"lm-eval-{window}"))
            done, _ = await asyncio.wait({run}, timeout=PROFILE_WINDOW_S)
            bounded = not done
        output = await run
        ev = win.evidence
        detail: dict[str, Any] = {"window": window, "bounded": bounded, "window_s": round(time.monotonic() - t0, 3)}
        if ev is not None:
            pe = ev.to_path_evidence(check=self.name, point=unit.point)
            pe.detail["points"] = list(unit.points)
            pe.detail["eval_window_bounded_at_s"] = PROFILE_WINDOW_S if bounded else None
            ctx.evidence.append(pe)
            detail.update(
                decode_steps=ev.decode_steps,
                optimized_decode_steps=ev.optimized_decode_steps,
                optimized_ops=ev.optimized_ops,
                stock_ops=ev.stock_ops,
                fallback_events=ev.fallback_events,
                decode_batch_sizes={str(k): v for k, v in ev.decode_batch_sizes.items()},
                optimized_decode_batch_sizes={str(k): v for k, v in ev.optimized_decode_batch_sizes.items()},
                notes=list(ev.notes),
            )
        return output, detail

    def _write_run_artifact(
        self,
        ctx: RunContext,
        eval_name: str,
        unit: EvalUnit,
        side: str,
        role: str,
        repeat: int,
        output: LmEvalOutput,
        selection: Selection,
        data_file: Path,
    ) -> str:
        d = ctx.artifact_dir("evals") / eval_name / unit.point
        d.mkdir(parents=True, exist_ok=True)
        base = f"{side}-{role}-r{repeat}"
        by_doc = {s.doc_id: s for s in selection.samples}
        with open(d / f"{base}.samples.jsonl", "w", encoding="utf-8") as f:
            for r in output.samples:
                s = by_doc[r["doc_id"]]
                f.write(json.dumps({"sample_id": s.sample_id, **r}, ensure_ascii=False, default=str) + "\n")
        meta = output.model_dump(mode="json", exclude={"samples"})
        meta.update(
            eval=eval_name,
            points=unit.points,
            batch=unit.batch,
            side=side,
            role=role,
            repeat=repeat,
            data_file=str(data_file),
            selection_file=selection.file,
            selection_sha256=selection.file_sha256,
        )
        (d / f"{base}.run.json").write_text(json.dumps(meta, indent=2, default=str))
        return str((d / f"{base}.samples.jsonl").relative_to(ctx.run_dir))

    # ------------------------------------------------------------------ judging

    def judge(self, ctx: RunContext) -> CheckResult:
        self._prepare(ctx)
        return judge(ctx, self.state, name=self.name, gate=self.gate(ctx))


def _eval_blockers(tier: TierView, ev: EvalSpec) -> list[Blocker]:
    """What one eval of the tier can never run: a points filter that selects no point, data that is not there."""
    out = []
    matched = [
        p
        for p in tier.plan.points
        if all(
            str("full" if (d == "context" and p.full_context) else getattr(p, d, None)) in {str(v) for v in vals}
            for d, vals in ev.points.items()
        )
    ]
    if not matched:
        want = ", ".join(f"{d} in {vals}" for d, vals in ev.points.items())
        out.append(
            tier.blocker(
                f"eval {ev.name}",
                f"its points ({want}) select no config point of the {tier.tier} tier",
                f"add those values to {tier.hint}, or leave {ev.name} out of {tier.hint}.evals",
            )
        )
    if ev.data is None and ev.hub_dataset is None:
        out.append(
            tier.blocker(f"eval {ev.name}", "it names no data (neither data nor hub_dataset)", "set evals[].data")
        )
    elif ev.data is not None and not tier.exists(ev.data):
        out.append(
            tier.blocker(f"eval {ev.name}", f"its data file {ev.data} does not exist", "ship the file or fix the path")
        )
    return out
