"""Judging the evals: pair the runs of each eval point, apply the gate, and build the tables and summary."""

from __future__ import annotations

from typing import Any

from fasttrack import attrs
from fasttrack.checks.context import RunContext
from fasttrack.checks.evals.units import PROFILE_WINDOW_S, EvalState, EvalUnit, RunRecord
from fasttrack.evals.compare import Comparison, PairingError, SampleOutcome, breakdown, compare
from fasttrack.evals.mrcr import similarity
from fasttrack.evals.power import DetectableDrop, minimum_detectable_drop
from fasttrack.evidence import typed_tables
from fasttrack.results import CheckResult, Gate, Verdict
from fasttrack.scope import EvalSpec


def judge(ctx: RunContext, st: EvalState, *, name: str, gate: Gate) -> CheckResult:
    """Compare the sides of every eval point that ran on both; the check's result."""
    failures: list[str] = []
    not_run: list[str] = [f"dataset: {m}" for m in st.missing.values()] + list(st.unusable.values()) + list(st.errors)
    comparisons: list[tuple[EvalSpec, EvalUnit, Comparison]] = []
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

            def outcomes(side: str, role: str, runs: list[RunRecord] = runs) -> list[SampleOutcome]:
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

    power = {(s.name, u.point): _detectable(c) for s, u, c in comparisons}
    tables = _tables(st, comparisons, power)
    summary = _summary(ctx, st, comparisons, power)
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
            f"(baseline self {c.reference_agreement_mean:.3f}); {_detectable_words(power[(s.name, u.point)])}"
            for s, u, c in comparisons
        )
    summary["not_run"] = not_run
    return CheckResult(
        check=name,
        verdict=verdict,
        reason=reason,
        gate=gate,
        summary=summary,
        failures=failures,
        tables=typed_tables(name, tables),
        artifacts=artifacts,
    )


def _detectable(c: Comparison) -> DetectableDrop:
    """The task-score gate's minimum detectable drop on this comparison's baseline scores (one per sample)."""
    by_sample: dict[str, list[float]] = {}
    for p in c.pairs:
        by_sample.setdefault(p.sample_id, []).append(p.baseline_score)
    return minimum_detectable_drop([sum(v) / len(v) for v in by_sample.values()], margin=c.margin)


def _detectable_words(d: DetectableDrop) -> str:
    if d.drop is None:
        return f"no score drop is detectable on {d.samples} samples (the baseline scores about nothing)"
    return f"detects a score drop of {d.drop:.3f} or more at {d.power:.0%} power on {d.samples} samples"


def _tables(
    st: EvalState,
    comparisons: list[tuple[EvalSpec, EvalUnit, Comparison]],
    power: dict[tuple[str, str], DetectableDrop],
) -> dict[str, list[dict[str, Any]]]:
    """The check's tables: every lm-eval run and sample, every comparison with its breakdown and review rows."""
    runs_rows, sample_rows = _run_rows(st)
    cmp_rows, breakdown_rows, review_rows = [], [], []
    for spec, unit, c in comparisons:
        cmp_rows.append(_comparison_row(spec, unit, c, power[(spec.name, unit.point)]))
        breakdown_rows.extend(_breakdown_rows(st, spec, unit, c))
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


def _run_rows(st: EvalState) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One row per lm-eval run (table ``eval_runs``) and per sample it scored (``eval_samples``, with its agreement
    with the baseline's output of that sample)."""
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
                "ignore_eos": r.output.settings.ignore_eos,
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
    return runs_rows, sample_rows


def _comparison_row(spec: EvalSpec, unit: EvalUnit, c: Comparison, power: DetectableDrop) -> dict[str, Any]:
    """One eval at one point: both gates, their intervals, and the drop the comparison could detect."""
    t, a = c.task_gate.difference, c.agreement_gate.difference if c.agreement_gate else None
    return {
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
        **attrs(t, "difference", "ci_low", "ci_high", "method", prefix="score_"),
        **attrs(c.task_newcombe, "ci_low", "ci_high", prefix="newcombe_"),
        "task_pass": c.task_gate.passed,
        "min_detectable_drop": power.drop,
        "min_detectable_drop_power": power.power,
        "agreement": c.agreement_mean,
        "reference_agreement": c.reference_agreement_mean,
        **attrs(a, "difference", "ci_low", "ci_high", prefix="agreement_"),
        "exact_match_rate": c.exact_match_rate,
        "reference_exact_match_rate": c.reference_exact_match_rate,
        "agreement_pass": c.agreement_gate.passed if c.agreement_gate else None,
        "passed": c.passed,
    }


def _breakdown_rows(st: EvalState, spec: EvalSpec, unit: EvalUnit, c: Comparison) -> list[dict[str, Any]]:
    """The paired scores grouped by the eval's dimensions (MRCR: context bin and needles; others: problem)."""
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
    return [
        {"eval": spec.name, "point": unit.point, **row}
        for dim, groups in dims
        for row in breakdown(c.pairs, groups, dimension=dim)
    ]


def _summary(
    ctx: RunContext,
    st: EvalState,
    comparisons: list[tuple[EvalSpec, EvalUnit, Comparison]],
    power: dict[tuple[str, str], DetectableDrop],
) -> dict[str, Any]:
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
                    "min_detectable_drop": power[(s.name, u.point)].model_dump(mode="json"),
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
