"""Judging the perf check: the no-regression gate per (workload, point), claims, drift, the summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fasttrack.checks.context import RunContext
from fasttrack.checks.perf.state import CHECK, PerfState
from fasttrack.perf.analysis import drift_row, judge_item
from fasttrack.perf.claims import MeasuredMetric, match_claims
from fasttrack.perf.metrics import METRICS
from fasttrack.perf.schedule import LookSchedule
from fasttrack.results import CheckResult, Gate, Verdict
from fasttrack.scope import PerfGate


def confidence_note(gate: PerfGate, schedules: Mapping[str, LookSchedule]) -> str:
    """The nominal confidence and the per-look confidence after the Bonferroni correction, in words."""
    per_look = min((sc.per_look_confidence(gate.confidence) for sc in schedules.values()), default=gate.confidence)
    return f"{gate.confidence:.0%} nominal, Bonferroni-corrected to {per_look:.4g} per look"


def _run_range(values: Any) -> dict[str, float]:
    """``candidate_low``/``candidate_high``: the range of a row's candidate per-run values (none when absent)."""
    flat = [float(v) for lt in values or [] for v in lt or [] if isinstance(v, (int, float))]
    return {"candidate_low": min(flat), "candidate_high": max(flat)} if flat else {}


def perf_gate(gate: PerfGate, schedules: Mapping[str, LookSchedule]) -> Gate:
    """The perf check's pass rule for this run."""
    m = gate.noise_margin
    return Gate(
        statistic=(
            f"per (workload, point): hierarchical-bootstrap lower confidence bound of the speedup of "
            f"{gate.gated_metric} (engine lifetimes, then runs; {confidence_note(gate, schedules)})"
        ),
        threshold=1.0 - m,
        rule=(
            f"pass iff the lower bound >= 1 - noise_margin = {1.0 - m:g} at every point (intersection-union); "
            "strictly better iff the lower bound > 1 at every point (reported, not required)"
        ),
    )


def judge(ctx: RunContext, st: PerfState) -> CheckResult:
    """Judge every (workload, point) item, match the claims, and summarise the lifetimes and runs."""
    gate = ctx.scope.gates.perf
    m = gate.noise_margin
    metrics: list[str] = list(dict.fromkeys([gate.gated_metric, *gate.metrics]))
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    failures: list[str] = []
    verdicts: dict[str, str] = {}
    strictly: dict[str, bool] = {}
    measured: list[MeasuredMetric] = []
    drift: list[dict[str, Any]] = []
    looks: list[dict[str, Any]] = []
    one_lifetime = False
    for key, s in st.items.items():
        sched = st.schedules[s.item.group]
        j = judge_item(
            s,
            metrics=metrics,
            gated=gate.gated_metric,
            noise_margin=m,
            confidence=gate.confidence,
            planned_looks=sched.planned_looks,
            interval=gate.interval,
        )
        rows.extend(j.rows)
        verdicts[key] = j.verdict
        strictly[key] = j.strictly_better
        if j.failure:
            failures.append(j.failure)
        looks.extend(s.looks)
        for side in ("baseline", "candidate"):
            for lt in sorted(s.runs[side]):
                runs.extend(r.model_dump(mode="json") for r in s.runs[side][lt])
        runs.extend({**r.model_dump(mode="json"), "drift_only": True} for r in s.drift_runs)
        for r in j.rows:
            if r.get("speedup") is not None:
                one_lifetime = one_lifetime or bool(r.get("ignores_lifetime_variance"))
                measured.append(
                    MeasuredMetric(
                        workload=s.item.workload,
                        kind=s.item.kind,
                        point=s.item.point,
                        point_dims=s.item.point_dims,
                        metric=r["metric_name"],
                        speedup=r["speedup"],
                        ci_low=r["nominal_ci_low"],
                        ci_high=r["nominal_ci_high"],
                        confidence=r["nominal_confidence"],
                        baseline_value=r["baseline"],
                        candidate_value=r["candidate"],
                        detectable_slowdown=r.get("detectable_slowdown"),
                        normalized=bool(r.get("per_gpu")),
                        baseline_gpus=r.get("gpus_baseline"),
                        candidate_gpus=r.get("gpus_candidate"),
                        **_run_range(r.get("candidate_run_values")),
                    )
                )
        dr = drift_row(s, metric=gate.gated_metric, confidence=gate.confidence, tolerance=m)
        if dr is not None:
            drift.append(dr)

    kinds: dict[str, str] = {w.name: w.kind for w in ctx.scope.workloads}
    run_workloads = {s.item.workload for s in st.items.values() if s.n_runs("baseline") or s.n_runs("candidate")}
    claims = match_claims(
        ctx.scope.claims,
        measured,
        workload_kinds=kinds,
        workloads_run=run_workloads,
        noise_margin=m,
        rehearsal=ctx.rehearsal,
    )
    claim_rows = [c.model_dump(mode="json") for c in claims]

    engine_timed = {
        side: sum(len(r.get("engine_tpot_ms") or []) for r in runs if r.get("side") == side)
        for side in ("baseline", "candidate")
    }
    errors = list(st.errors)
    if METRICS[gate.gated_metric].field == "engine_tpot_ms":
        for side, k in engine_timed.items():
            if k == 0 and any(r.get("side") == side for r in runs):
                errors.insert(
                    0,
                    f"the {side} engine reported no per-request timing, which "
                    f"{gate.gated_metric} needs: start it with --enable-per-request-metrics "
                    "(engines fasttrack starts get it)",
                )
    n = len(verdicts)
    n_fail = sum(1 for v in verdicts.values() if v == "fail")
    n_not = sum(1 for v in verdicts.values() if v == "not_run")
    n_pass = n - n_fail - n_not
    drifted = [d for d in drift if d["drifted"]]
    unequal = sorted({s.item.group for s in st.items.values() if s.factor() != 1.0})
    runs_per_point = {k: s.n_runs("baseline") + s.n_runs("candidate") for k, s in st.items.items()}
    gated_rows = [r for r in rows if r.get("gated") and r.get("speedup") is not None]
    mde_worst = max(
        (r["gate_detectable_slowdown"] for r in gated_rows if r.get("gate_detectable_slowdown") is not None),
        default=None,
    )
    conf_note = confidence_note(gate, st.schedules)
    lifetime_note = (
        "one engine lifetime per side: the intervals cover run-to-run noise only and ignore lifetime-to-lifetime "
        "variance (which is the larger part on noisy hosts); use a tier with lifetimes_per_side >= 2 for evidence"
        if one_lifetime
        else "intervals resample engine lifetimes (the unit of replication), then runs"
    )
    interleaved = bool(gate.interleave)
    if interleaved:
        lifetime_note += (
            "; baseline and candidate runs were interleaved in time (both engines up, alternating "
            "runs, run pairs resampled together), so a host that slowed down slowed both sides alike"
        )
    summary: dict[str, Any] = {
        "interleaved": interleaved,
        "points": n,
        "passed": n_pass,
        "failed": n_fail,
        "not_measured": n_not,
        "strictly_better": bool(n and all(strictly.values())),
        "strictly_better_points": sum(1 for v in strictly.values() if v),
        "gated_metric": gate.gated_metric,
        "metrics": metrics,
        "noise_margin": m,
        "confidence": conf_note,
        "ignores_lifetime_variance": one_lifetime,
        "lifetime_note": lifetime_note,
        "largest_gate_detectable_slowdown": mde_worst,
        "runs_per_point": runs_per_point,
        "min_runs": gate.min_runs,
        "max_runs": gate.max_runs,
        "schedules": {g: sc.describe() for g, sc in st.schedules.items()},
        "drift_checked": len(drift),
        "drift_detected": [f"{d['point']} ({d['workload']})" for d in drifted],
        "equal_resources": not unequal,
        "unequal_resource_groups": unequal,
        "claims": {c.id: c.status for c in claims},
        "lifetimes": st.lifetimes,
        "notes": st.notes,
        "errors": errors,
        "burst_delivered_requests": sum(int(r.get("burst_delivered") or 0) for r in runs),
        "engine_timed_requests": engine_timed,
        "p90_interactivity": METRICS["p90_interactivity"].description,
        "definitions": "docs/perf.md (metric definitions, trace format, statistics)",
    }
    gate_model = perf_gate(gate, st.schedules)
    tables = {
        "points": rows,
        "runs": runs,
        "looks": looks,
        "claims": claim_rows,
        "drift": drift,
        "lifetimes": st.lifetimes,
    }
    if n == 0 or n_pass + n_fail == 0:
        why = "no point was measured on both sides" + (f" ({errors[0]})" if errors else "")
        return CheckResult(
            check=CHECK,
            verdict=Verdict.NOT_RUN,
            reason=why,
            gate=gate_model,
            summary=summary,
            failures=failures,
            tables=tables,
        )
    if n_fail:
        verdict = Verdict.FAIL
        reason = f"{n_fail} of {n} point(s) failed the no-regression gate ({gate.gated_metric}, margin {m:g})"
    elif n_not:
        verdict = Verdict.NOT_RUN
        reason = f"{n_not} of {n} point(s) could not be compared; the other {n_pass} passed"
        if errors:
            reason += f" ({errors[0]})"
    else:
        verdict = Verdict.PASS
        reason = f"no regression beyond {m:.0%} at any of {n} point(s) ({gate.gated_metric}); " + (
            "strictly better everywhere"
            if summary["strictly_better"]
            else f"strictly better at {summary['strictly_better_points']} of {n}"
        )
    if one_lifetime:
        reason += "; one lifetime per side, so the intervals ignore lifetime variance"
    if interleaved:
        reason += "; runs interleaved in time"
    if drifted:
        reason += f"; drift between baseline lifetimes at {len(drifted)} point(s)"
    if unequal:
        reason += "; unequal GPU counts, compared per GPU"
    return CheckResult(
        check=CHECK,
        verdict=verdict,
        reason=reason,
        gate=gate_model,
        summary=summary,
        failures=failures,
        tables=tables,
    )
