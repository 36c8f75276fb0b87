"""Model evaluations (AIME25, MRCR) through lm-eval, paired between baseline and candidate.

For every eval of the scope, at every config point its ``points`` filter selects in
this plan (one run per engine group and batch size), the check runs lm-eval against
each side's server with ``num_concurrent`` = the point's batch size, so the engine
decodes batches of that size. In the first engine lifetime of each side:

* baseline: the primary run and a repeated *reference* run (same samples, seeds and
  settings), for every repeat of the eval;
* candidate: the primary run, for every repeat;
* both: an *evidence* run that repeats the first 2 x batch samples (at most
  :data:`EVIDENCE_MAX_TOKENS` generated tokens each, same concurrency) inside a
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

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from fasttrack.checks.base import Check, CheckResult, EngineSession, Gate, PathEvidence, RunContext, Verdict, register
from fasttrack.engine.client import KEEPALIVE_EXPIRY_S
from fasttrack.errors import FasttrackError
from fasttrack.evals.compare import Comparison, PairingError, SampleOutcome, breakdown, compare
from fasttrack.evals.datasets import ResolvedDataset, resolve_dataset
from fasttrack.evals.mrcr import similarity
from fasttrack.evals.runner import LmEvalOutput, run_lm_eval
from fasttrack.evals.samples import Selection, select_samples

PROFILE_WINDOW_S = 30.0
"""Longest profiler window around an evidence run (traces of long runs grow without bound)."""
EVIDENCE_SAMPLES_PER_BATCH = 2
"""The evidence run repeats the first 2 x batch samples (enough to fill the batch and drain it)."""
EVIDENCE_MAX_TOKENS = 64
"""Generated tokens per request in the evidence run (enough decode steps to show the path taken)."""
POINT_DIMENSIONS = ("tp", "dcp", "spec", "draft_length", "batch", "context")
"""Dimensions an eval's ``points`` filter may name (as in claims)."""

GATE = Gate(
    statistic=(
        "per eval and config point: (1) mean paired difference of task scores, candidate - baseline, and "
        "(2) mean paired difference of output agreement with the baseline (difflib ratio), candidate minus a "
        "repeated baseline run; each with its 95% percentile-bootstrap lower bound (samples resampled; "
        "repeats of a sample resampled together); graded runs are unprofiled, at the point's batch size"
    ),
    threshold="-margin (the eval's margin in the scope); floor on the candidate's mean score",
    rule=(
        "pass iff at every eval point: lower bound of (1) >= -margin and candidate mean score >= floor, "
        "and lower bound of (2) >= -margin"
    ),
)


@dataclass
class EvalUnit:
    """One eval at one (engine group, batch size): one lm-eval run per side and role."""

    eval: str
    group: str
    batch: int
    points: list[str]
    """Plan points the run covers (same group and batch)."""

    @property
    def point(self) -> str:
        return self.points[0]


@dataclass
class RunRecord:
    """One lm-eval run that completed."""

    eval: str
    kind: str
    point: str
    points: list[str]
    group: str
    batch: int
    side: str
    role: str
    """'primary', 'reference' (the repeated baseline run, graded) or 'evidence' (profiled, not graded)."""
    repeat: int
    lifetime: int
    output: LmEvalOutput
    outcomes: list[SampleOutcome]
    artifact: str
    engine: dict[str, Any]
    evidence: dict[str, Any] | None = None


@dataclass
class _State:
    datasets: dict[str, ResolvedDataset] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    """eval -> why its data is not available."""
    unusable: dict[str, str] = field(default_factory=dict)
    """eval -> why it cannot run in this plan (no matching point, no sample fits)."""
    units: dict[str, list[EvalUnit]] = field(default_factory=dict)
    selections: dict[str, Selection] = field(default_factory=dict)
    runs: list[RunRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Runs that failed: 'eval at point on side: message'."""
    notes: list[str] = field(default_factory=list)


def _point_value(point: Any, dim: str) -> Any:
    if dim == "context":
        return "full" if point.full_context else point.context
    return getattr(point, dim)


def matching_units(ctx: RunContext, spec: Any) -> list[EvalUnit]:
    """The (group, batch) runs an eval's ``points`` filter selects in this plan."""
    bad = sorted(set(spec.points) - set(POINT_DIMENSIONS))
    if bad:
        raise FasttrackError(
            f"eval {spec.name!r} filters on unknown point dimension(s) {bad}.",
            hint=f"Use {', '.join(POINT_DIMENSIONS)} in the eval's 'points'.",
        )
    units: dict[tuple[str, int], EvalUnit] = {}
    for group in ctx.plan.groups:
        for p in ctx.plan.group_points(group):
            if all(str(_point_value(p, d)) in {str(v) for v in vals} for d, vals in spec.points.items()):
                u = units.setdefault(
                    (group.id, p.batch), EvalUnit(eval=spec.name, group=group.id, batch=p.batch, points=[])
                )
                u.points.append(p.id)
    return list(units.values())


@register
class EvalsCheck(Check):
    name = "evals"
    title = "Model evaluations (AIME25, MRCR) paired against the baseline"

    def __init__(self) -> None:
        self.state = _State()
        self._prepared = False

    # ------------------------------------------------------------------ preparation

    def _prepare(self, ctx: RunContext) -> None:
        if self._prepared:
            return
        self._prepared = True
        loaded = ctx.shared.get("loaded_scope")
        overrides: dict[str, str] = dict(ctx.shared.get("eval_data") or {})
        unknown = sorted(set(overrides) - {e.name for e in ctx.scope.evals})
        if unknown:
            raise FasttrackError(
                f"--eval-data names eval(s) {unknown} that the scope does not declare.",
                hint=f"The scope's evals: {', '.join(e.name for e in ctx.scope.evals) or '(none)'}.",
            )

        def resolve_path(rel: str) -> Path:
            return loaded.resolve(rel) if loaded is not None else Path(rel)

        for spec in ctx.scope.evals:
            try:
                ds = resolve_dataset(
                    name=spec.name,
                    kind=spec.kind,
                    data=spec.data,
                    hub_dataset=spec.hub_dataset,
                    resolve_path=resolve_path,
                    override=overrides.get(spec.name),
                )
            except FasttrackError as exc:
                self.state.missing[spec.name] = exc.message
                continue
            self.state.datasets[spec.name] = ds
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

    def wants(self, ctx: RunContext, session: EngineSession) -> bool:
        self._prepare(ctx)
        if session.lifetime != 0:
            return False
        return any(u.group == session.group.id for units in self.state.units.values() for u in units)

    # ------------------------------------------------------------------ collection

    def collect(self, ctx: RunContext, session: EngineSession) -> None:
        self._prepare(ctx)
        engine = session.engine
        for spec in ctx.scope.evals:
            for unit in self.state.units.get(spec.name, []):
                if unit.group != session.group.id:
                    continue
                try:
                    selection = self._selection(ctx, spec, engine)
                except FasttrackError as exc:
                    self.state.unusable.setdefault(spec.name, exc.message)
                    continue
                roles = ("primary", "reference") if session.side == "baseline" else ("primary",)
                runs = [(repeat, role) for repeat in range(spec.repeats) for role in roles] + [(0, "evidence")]
                for repeat, role in runs:
                    try:
                        self._run(ctx, session, spec, unit, selection, repeat=repeat, role=role)
                    except FasttrackError as exc:
                        msg = f"{spec.name} at {unit.point} on the {session.side} ({role}, repeat {repeat}): {exc.message}"
                        self.state.errors.append(msg)
                        ctx.log(f"evals: {msg}")
                        engine.check_alive()

    def _selection(self, ctx: RunContext, spec: Any, engine: Any) -> Selection:
        if spec.name in self.state.selections:
            return self.state.selections[spec.name]
        ds = self.state.datasets[spec.name]
        tier_limit = ctx.scope.tiers[ctx.tier].eval_limit if ctx.tier in ctx.scope.tiers else None  # type: ignore[index]
        limits = [x for x in (spec.limit, tier_limit) if x]
        limit = min(limits) if limits else None
        if spec.kind == "mrcr":
            counter = _TokenCounter(engine.base_url, engine.model)
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

    def _run(
        self,
        ctx: RunContext,
        session: EngineSession,
        spec: Any,
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
        kwargs = dict(
            kind=spec.kind,
            base_url=engine.base_url,
            model=engine.model,
            data_file=data_file,
            num_concurrent=unit.batch,
            seed=repeat,
            max_tokens=max_tokens,
            temperature=spec.temperature,
        )
        label = f"{spec.name} at {unit.point} (batch {unit.batch}) on the {session.side}, {role}, repeat {repeat}"
        ctx.log(f"evals: running {label}")
        evidence: dict[str, Any] | None = None
        if role == "evidence":
            window = f"evals-{spec.name}-b{unit.batch}"
            unavailable = None
            if getattr(engine, "profiler_dir", None) is None:
                unavailable = f"the {session.side} engine has no profiler (no --profiler-config), so no trace was taken"
            elif ctx.scope.path_markers is None:
                unavailable = "the scope declares no path_markers"
            if unavailable is None:
                output, evidence = self._profiled(ctx, engine, window, unit, kwargs)
            else:
                output = run_lm_eval(**kwargs)
                # the coverage check reads 'unavailable' as "no path evidence could be taken", never as a pass
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
                evidence = {"window": window, "unavailable": unavailable}
                self.state.notes.append(f"{spec.name} at {unit.point} on the {session.side}: {unavailable}")
        else:
            output = run_lm_eval(**kwargs)
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
                engine={"base_url": engine.base_url, "model": engine.model, "owned": getattr(engine, "owned", None)},
            )
        )
        mean = sum(o.score for o in outcomes) / len(outcomes)
        ctx.log(f"evals: {label}: mean score {mean:.3f} over {len(outcomes)} samples in {output.wall_s:.1f} s")

    def _profiled(
        self, ctx: RunContext, engine: Any, window: str, unit: EvalUnit, kwargs: dict[str, Any]
    ) -> tuple[LmEvalOutput, dict[str, Any]]:
        """Run lm-eval in a worker thread inside a profiler window of at most PROFILE_WINDOW_S."""
        from fasttrack.engine import MarkerSet, profile_window

        markers = ctx.scope.path_markers
        fallback = ctx.scope.fallback.log_regex if ctx.scope.fallback else None
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["output"] = run_lm_eval(**kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = exc

        worker = threading.Thread(target=work, name=f"lm-eval-{window}", daemon=True)
        with profile_window(
            engine,
            window,
            markers=MarkerSet(optimized=list(markers.optimized), stock=list(markers.stock)) if markers else None,
            fallback_pattern=fallback,
        ) as win:
            t0 = time.monotonic()
            worker.start()
            worker.join(PROFILE_WINDOW_S)
            bounded = worker.is_alive()
        worker.join()
        if "error" in box:
            raise box["error"]
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
        return box["output"], detail

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
        st = self.state
        failures: list[str] = []
        not_run: list[str] = (
            [f"dataset: {m}" for m in st.missing.values()] + list(st.unusable.values()) + list(st.errors)
        )
        comparisons: list[tuple[Any, EvalUnit, Comparison]] = []
        for spec in ctx.scope.evals:
            for unit in st.units.get(spec.name, []):
                if spec.name in st.unusable:
                    continue
                runs = [r for r in st.runs if r.eval == spec.name and r.group == unit.group and r.batch == unit.batch]
                got = {(r.side, r.role, r.repeat) for r in runs}
                need = {
                    (s, role, k)
                    for k in range(spec.repeats)
                    for s, role in (("baseline", "primary"), ("baseline", "reference"), ("candidate", "primary"))
                }
                missing = sorted(need - got)
                if missing:
                    if not any(spec.name in e and unit.point in e for e in st.errors):
                        not_run.append(
                            f"{spec.name} at {unit.point}: no completed run for "
                            + ", ".join(f"{s} {role} repeat {k}" for s, role, k in missing)
                        )
                    continue

                def outcomes(side: str, role: str) -> list[SampleOutcome]:
                    return [o for r in runs if r.side == side and r.role == role for o in r.outcomes]

                try:
                    cmp = compare(
                        eval_name=spec.name,
                        point=unit.point,
                        baseline=outcomes("baseline", "primary"),
                        candidate=outcomes("candidate", "primary"),
                        reference=outcomes("baseline", "reference"),
                        margin=spec.margin,
                        floor=spec.floor,
                        binary=spec.kind == "aime25",
                    )
                except PairingError as exc:
                    not_run.append(str(exc))
                    continue
                comparisons.append((spec, unit, cmp))
                failures.extend(cmp.failures)

        tables = self._tables(comparisons)
        summary = self._summary(ctx, comparisons)
        artifacts = sorted({r.artifact for r in st.runs})
        if failures:
            verdict = Verdict.FAIL
            reason = f"{len(failures)} eval gate(s) failed: " + failures[0]
        elif not_run:
            verdict = Verdict.NOT_RUN
            reason = "; ".join(not_run[:3]) + (f" (and {len(not_run) - 3} more)" if len(not_run) > 3 else "")
        elif not comparisons:
            verdict = Verdict.NOT_RUN
            reason = "no eval was compared"
        else:
            verdict = Verdict.PASS
            reason = f"{len(comparisons)} eval point(s) passed: " + "; ".join(
                f"{s.name} at {u.point}: score {c.task_gate.difference.candidate_mean:.3f} vs "
                f"{c.task_gate.difference.baseline_mean:.3f}, agreement {c.agreement_mean:.3f} "
                f"(baseline self {c.reference_agreement_mean:.3f})"
                for s, u, c in comparisons
            )
        summary["not_run"] = not_run
        return CheckResult(
            check=self.name,
            verdict=verdict,
            reason=reason,
            required=self.required,
            gate=GATE,
            summary=summary,
            failures=failures,
            tables=tables,
            artifacts=artifacts,
        )

    def _tables(self, comparisons: list[tuple[Any, EvalUnit, Comparison]]) -> dict[str, list[dict[str, Any]]]:
        st = self.state
        sample_meta = {(name, s.sample_id): s for name, sel in st.selections.items() for s in sel.samples}
        base_out = {
            (r.eval, r.point, o.sample_id, o.repeat): o.output
            for r in st.runs
            if r.side == "baseline" and r.role == "primary"
            for o in r.outcomes
        }
        runs_rows, sample_rows = [], []
        for r in st.runs:
            mean = sum(o.score for o in r.outcomes) / len(r.outcomes)
            ev = r.evidence or {}
            runs_rows.append(
                {
                    "eval": r.eval,
                    "kind": r.kind,
                    "point": r.point,
                    "points": ",".join(r.points),
                    "batch": r.batch,
                    "side": r.side,
                    "role": r.role,
                    "repeat": r.repeat,
                    "seed": r.output.settings.seed,
                    "lifetime": r.lifetime,
                    "samples": len(r.outcomes),
                    "mean_score": mean,
                    "max_tokens": r.output.settings.max_tokens,
                    "temperature": r.output.settings.temperature,
                    "num_concurrent": r.output.settings.num_concurrent,
                    "lm_model": r.output.lm_model,
                    "task_source": r.output.task_source,
                    "lm_eval_version": r.output.lm_eval_version,
                    "wall_s": r.output.wall_s,
                    "profile_window": ev.get("window"),
                    "decode_steps": ev.get("decode_steps"),
                    "optimized_decode_steps": ev.get("optimized_decode_steps"),
                    "artifact": r.artifact,
                }
            )
            for o in r.outcomes:
                meta = sample_meta.get((r.eval, o.sample_id))
                b = base_out.get((r.eval, r.point, o.sample_id, o.repeat)) if r.role != "evidence" else None
                sample_rows.append(
                    {
                        "eval": r.eval,
                        "point": r.point,
                        "side": r.side,
                        "role": r.role,
                        "repeat": o.repeat,
                        "seed": r.output.settings.seed,
                        "sample_id": o.sample_id,
                        "score": o.score,
                        "output": o.output,
                        "agreement_with_baseline": similarity(o.output, b) if b is not None else None,
                        "prompt_sha256": meta.prompt_sha256 if meta else None,
                        "prompt_tokens": meta.n_tokens if meta else None,
                        "context_bin": meta.bin if meta else None,
                        "n_needles": meta.n_needles if meta else None,
                    }
                )
        cmp_rows, breakdown_rows, review_rows = [], [], []
        for spec, unit, c in comparisons:
            t, a = c.task_gate.difference, c.agreement_gate.difference if c.agreement_gate else None
            cmp_rows.append(
                {
                    "eval": spec.name,
                    "kind": spec.kind,
                    "point": unit.point,
                    "batch": unit.batch,
                    "pairs": c.n_pairs,
                    "samples": c.n_samples,
                    "repeats": c.repeats,
                    "margin": c.margin,
                    "floor": c.floor,
                    "baseline_score": t.baseline_mean,
                    "candidate_score": t.candidate_mean,
                    "score_difference": t.difference,
                    "score_ci_low": t.ci_low,
                    "score_ci_high": t.ci_high,
                    "score_method": t.method,
                    "newcombe_ci_low": c.task_newcombe.ci_low if c.task_newcombe else None,
                    "newcombe_ci_high": c.task_newcombe.ci_high if c.task_newcombe else None,
                    "task_pass": c.task_gate.passed,
                    "agreement": c.agreement_mean,
                    "reference_agreement": c.reference_agreement_mean,
                    "agreement_difference": a.difference if a else None,
                    "agreement_ci_low": a.ci_low if a else None,
                    "agreement_ci_high": a.ci_high if a else None,
                    "exact_match_rate": c.exact_match_rate,
                    "reference_exact_match_rate": c.reference_exact_match_rate,
                    "agreement_pass": c.agreement_gate.passed if c.agreement_gate else None,
                    "passed": c.passed,
                }
            )
            sel = st.selections.get(spec.name)
            metas = {s.sample_id: s for s in sel.samples} if sel else {}
            dims: list[tuple[str, dict[str, str]]]
            if spec.kind == "mrcr":
                dims = [
                    ("bin", {k: m.bin or "?" for k, m in metas.items()}),
                    ("n_needles", {k: str(m.n_needles) for k, m in metas.items()}),
                ]
            else:
                dims = [("problem", {k: k for k in metas})]
            for dim, groups in dims:
                for row in breakdown(c.pairs, groups, dimension=dim):
                    breakdown_rows.append({"eval": spec.name, "point": unit.point, **row})
            for d in c.discordant_scores:
                review_rows.append({"eval": spec.name, "point": unit.point, "kind": "score", **_review_row(d)})
            for d in c.disagreeing_outputs:
                review_rows.append({"eval": spec.name, "point": unit.point, "kind": "output", **_review_row(d)})
        return {
            "eval_runs": runs_rows,
            "eval_samples": sample_rows,
            "eval_comparisons": cmp_rows,
            "eval_breakdown": breakdown_rows,
            "eval_review": review_rows,
        }

    def _summary(self, ctx: RunContext, comparisons: list[tuple[Any, EvalUnit, Comparison]]) -> dict[str, Any]:
        st = self.state
        evals: dict[str, Any] = {}
        for spec in ctx.scope.evals:
            ds = st.datasets.get(spec.name)
            sel = st.selections.get(spec.name)
            settings = next((r.output.settings.model_dump() for r in st.runs if r.eval == spec.name), None)
            evals[spec.name] = {
                "kind": spec.kind,
                "dataset": ds.describe() if ds else None,
                "dataset_missing": st.missing.get(spec.name),
                "selection": sel.model_dump(mode="json", exclude={"samples"}) if sel else None,
                "points": [u.points for u in st.units.get(spec.name, [])],
                "repeats": spec.repeats,
                "seeds": list(range(spec.repeats)),
                "generation": settings,
                "margin": spec.margin,
                "floor": spec.floor,
                "comparisons": {
                    u.point: {
                        "passed": c.passed,
                        "pairs": c.n_pairs,
                        "task": c.task_gate.model_dump(mode="json", exclude={"difference"})
                        | {
                            "baseline_mean": c.task_gate.difference.baseline_mean,
                            "candidate_mean": c.task_gate.difference.candidate_mean,
                            "difference": c.task_gate.difference.difference,
                            "ci": [c.task_gate.difference.ci_low, c.task_gate.difference.ci_high],
                        },
                        "newcombe": c.task_newcombe.model_dump(mode="json") if c.task_newcombe else None,
                        "agreement": (
                            c.agreement_gate.model_dump(mode="json", exclude={"difference"})
                            | {
                                "candidate_mean": c.agreement_gate.difference.candidate_mean,
                                "reference_mean": c.agreement_gate.difference.baseline_mean,
                                "difference": c.agreement_gate.difference.difference,
                                "ci": [c.agreement_gate.difference.ci_low, c.agreement_gate.difference.ci_high],
                            }
                        )
                        if c.agreement_gate
                        else None,
                        "exact_match_rate": c.exact_match_rate,
                        "reference_exact_match_rate": c.reference_exact_match_rate,
                    }
                    for s, u, c in comparisons
                    if s.name == spec.name
                },
            }
        return {
            "evals": evals,
            "notes": list(st.notes),
            "run_errors": list(st.errors),
            "profile_window_limit_s": PROFILE_WINDOW_S,
        }


def _review_row(d: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "sample_id",
        "repeat",
        "baseline",
        "candidate",
        "difference",
        "agreement",
        "reference_agreement",
        "baseline_score",
        "candidate_score",
        "baseline_output",
        "candidate_output",
    )
    return {k: d.get(k) for k in keys}


class _TokenCounter:
    """Counts chat prompt tokens with the served model's tokenizer (vLLM's POST /tokenize)."""

    def __init__(self, base_url: str, model: str) -> None:
        self.base_url = base_url
        self.model = model
        self.max_model_len: int | None = None
        self._http = httpx.Client(timeout=120.0, limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S))
        self(([{"role": "user", "content": "x"}]))

    def __call__(self, messages: list[dict[str, str]]) -> int:
        try:
            r = self._http.post(
                self.base_url + "/tokenize",
                json={"model": self.model, "messages": messages, "add_generation_prompt": True},
            )
        except httpx.HTTPError as exc:
            raise FasttrackError(f"could not count MRCR prompt tokens at {self.base_url}/tokenize: {exc}") from exc
        if r.status_code != 200:
            raise FasttrackError(
                f"{self.base_url}/tokenize answered {r.status_code} while counting MRCR prompt tokens: {r.text[:300]}",
                hint="MRCR needs vLLM's /tokenize endpoint (chat messages) to bin samples by context length.",
            )
        body = r.json()
        if body.get("max_model_len"):
            self.max_model_len = int(body["max_model_len"])
        return int(body["count"])
