"""Judging the perf check: the no-regression gate per (workload, point), claims, drift, the summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fasttrack.checks.context import RunContext
from fasttrack.checks.perf.state import CHECK, PerfState
from fasttrack.evidence import typed_tables
from fasttrack.perf.analysis import ItemState, judge_item
from fasttrack.perf.claims import ClaimResult, MeasuredMetric, match_claims
from fasttrack.perf.curves import CURVE_KIND, curve_rows, dominance, mark_pareto
from fasttrack.perf.drift import drift_row
from fasttrack.perf.hostbound import host_bound_fields, memory_bandwidth_gbs, weights_bytes
from fasttrack.perf.metrics import METRICS
from fasttrack.perf.outcomes import SLOWER, gate_margin, goodput_condition, item_metrics, label_outcome, rule_words
from fasttrack.perf.pairing import trend_row
from fasttrack.perf.schedule import LookSchedule
from fasttrack.perf.tails import tail_rows
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
    m = gate_margin(gate)
    extra = ""
    if gate.slo is not None and gate.slo.gate:
        extra += f"; and goodput at the SLO ({gate.slo.describe()}) with its lower bound >= {1.0 - m:g}"
    if gate.curve_dominance:
        extra += (
            f"; and at every concurrency_sweep level the lower bounds of the output-throughput-per-GPU and P90 "
            f"interactivity speedups >= {1.0 - m:g} (the candidate's curve dominates within the margin)"
        )
    strict = gate.require == "strictly_better"
    return Gate(
        statistic=(
            f"per (workload, point): hierarchical-bootstrap lower confidence bound of the speedup of "
            f"{gate.gated_metric} (engine lifetimes, then runs; {confidence_note(gate, schedules)})"
        ),
        threshold=1.0 - m,
        rule=(
            (
                "pass iff the lower bound > 1 at every point (strictly better, as the scope requires)"
                if strict
                else f"pass iff the lower bound >= 1 - noise_margin = {1.0 - m:g} at every point"
            )
            + " (intersection-union)"
            + extra
            + (
                ""
                if strict
                else "; strictly better iff the lower bound > 1 at every point (reported, not required); a point "
                "whose whole interval lies below 1 is 'measured slower, within margin'"
            )
        ),
    )


@dataclass
class _Judged:
    """Everything judged over the items, before the summary."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    looks: list[dict[str, Any]] = field(default_factory=list)
    tails: list[dict[str, Any]] = field(default_factory=list)
    curves: list[dict[str, Any]] = field(default_factory=list)
    drift: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    verdicts: dict[str, str] = field(default_factory=dict)
    strictly: dict[str, bool] = field(default_factory=dict)
    slower: list[str] = field(default_factory=list)
    """Points measured slower, within margin (passed with the whole interval below 1)."""
    undecided: list[str] = field(default_factory=list)
    """Partial judging: points with runs but no decision when the run stopped."""
    dominance: dict[str, Any] = field(default_factory=dict)
    measured: list[MeasuredMetric] = field(default_factory=list)
    one_lifetime: bool = False


def _judge_items(ctx: RunContext, st: PerfState, *, stopped: str | None) -> _Judged:
    gate = ctx.scope.gates.perf
    mg = gate_margin(gate)
    base_metrics: list[str] = list(dict.fromkeys([gate.gated_metric, *gate.metrics]))
    out = _Judged()
    for key, s in st.items.items():
        sched = st.schedules[s.item.group]
        undecided = stopped is not None and not s.final
        n_looks = len(s.looks)
        j = judge_item(
            s,
            metrics=item_metrics(s.item.kind, base_metrics, gate),
            gated=gate.gated_metric,
            noise_margin=mg,
            confidence=gate.confidence,
            planned_looks=sched.planned_looks,
            interval=gate.interval,
            points=len(st.items),
        )
        verdict, failure = j.verdict, j.failure
        if undecided:
            del s.looks[n_looks:]  # no decision is taken for a point the stopped run never decided
            verdict, failure = "not_run", None
            _mark_undecided(s, j.rows, gate.gated_metric, stopped or "", out)
        verdict, failure = _further_conditions(key, s, j.rows, gate, mg, verdict, failure, out)
        _label_rows(s, j.rows, gate.gated_metric, verdict, out)
        out.verdicts[key] = verdict
        out.strictly[key] = j.strictly_better and verdict == "pass"
        if failure:
            out.failures.append(failure)
        _collect_tables(s, j.rows, gate, out)
        if undecided:
            continue  # claims are held against decided points only
        _collect_measured(s, j.rows, out)
        dr = drift_row(s, metric=gate.gated_metric, confidence=gate.confidence, tolerance=gate.noise_margin)
        tr = trend_row(s, metric=gate.gated_metric, alpha=1.0 - gate.confidence)
        if dr is not None or tr is not None:
            out.drift.append({**(tr or {}), **(dr or {}), **({"trend": tr} if tr and dr else {})})
    mark_pareto(out.curves)
    return out


def _label_host_bound(ctx: RunContext, rows: list[dict[str, Any]], gated: str) -> list[str]:
    """Each gated row's host-bound label (:mod:`fasttrack.perf.hostbound`): the baseline's step time (its median
    TPOT) against the weights' streaming time at the card's bandwidth. Returns the host-bound points."""
    device = ctx.host.gpus[0].name if ctx.host is not None and ctx.host.gpus else None
    bw = memory_bandwidth_gbs(device)
    weights = weights_bytes(ctx.model.model if ctx.model is not None else None)
    steps: dict[tuple[Any, Any], float] = {}
    for r in rows:  # the engine-timed TPOT where there is one, else the client-timed one
        if r.get("metric_name") in ("median_tpot_ms", "median_engine_tpot_ms") and r.get("baseline"):
            key = (r.get("workload"), r.get("point"))
            if r["metric_name"] == "median_engine_tpot_ms" or key not in steps:
                steps[key] = float(r["baseline"])
    bound: list[str] = []
    for r in rows:
        if r.get("metric_name") != gated or r.get("speedup") is None:
            continue
        tp = int((r.get("point_dims") or {}).get("tp") or r.get("tp") or 1)
        fields = host_bound_fields(
            step_ms=steps.get((r.get("workload"), r.get("point"))), weights=weights, bandwidth_gbs=bw, tp=tp
        )
        r.update(fields)
        if fields["host_bound"]:
            bound.append(str(r.get("point")))
            r["statement"] = f"{r.get('statement', '')}; {fields['host_bound_note']}"
    return bound


def _mark_undecided(s: ItemState, rows: list[dict[str, Any]], gated: str, stopped: str, out: _Judged) -> None:
    """A point the stopped run never decided: its gated rows keep the interval so far, without a verdict."""
    for r in rows:
        if r.get("metric_name") != gated:
            continue
        if r.get("speedup") is not None:
            out.undecided.append(s.item.point)
        r["verdict"], r["decision"] = "not_run", "undecided"
        r["statement"] = (
            f"not decided when the run stopped ({stopped}): {s.n_runs('baseline')}+{s.n_runs('candidate')} runs; "
            + ("the interval so far is shown, " if r.get("speedup") else "")
            + "no verdict"
        )


def _further_conditions(
    key: str,
    s: ItemState,
    rows: list[dict[str, Any]],
    gate: PerfGate,
    mg: float,
    verdict: str,
    failure: str | None,
    out: _Judged,
) -> tuple[str, str | None]:
    """Goodput at the SLO (``slo.gate``) and curve dominance (``curve_dominance``): further conditions of a pass.
    A sweep level's dominance is recorded whether or not it is required."""
    if verdict == "pass" and gate.slo is not None and gate.slo.gate:
        ok, why = goodput_condition(rows, threshold=1.0 - mg)
        if ok is not True:
            verdict = "fail" if ok is False else "not_run"
            failure = f"{s.item.point} ({s.item.workload}): {why}"
    if s.item.kind == CURVE_KIND and verdict != "not_run":
        d = dominance(rows, noise_margin=mg)
        out.dominance[key] = {"point": s.item.point, "workload": s.item.workload, **(d or {"dominates": None})}
        if gate.curve_dominance and verdict == "pass" and (d is None or not d["dominates"]):
            verdict = "fail" if d is not None else "not_run"
            failure = f"{s.item.point} ({s.item.workload}): " + (
                d["statement"] if d is not None else "curve dominance has no interval (no samples on a side)"
            )
    return verdict, failure


def _label_rows(s: ItemState, rows: list[dict[str, Any]], gated: str, verdict: str, out: _Judged) -> None:
    """The point's verdict on its gated row when a further condition changed it, and each gated row's outcome
    label (``measured slower, within margin`` among them)."""
    for r in rows:
        if r.get("metric_name") == gated and verdict != r.get("verdict"):
            r["point_verdict"] = verdict  # the point fails on goodput or dominance although this metric passed
        if r.get("gated"):
            label_outcome(r)
        if r.get("metric_name") == gated and r.get("slower_within_margin"):
            out.slower.append(f"{s.item.point} {r['speedup']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]")


def _collect_tables(s: ItemState, rows: list[dict[str, Any]], gate: PerfGate, out: _Judged) -> None:
    """The point's rows, looks and runs (drift-only runs marked), tails and curve levels."""
    out.rows.extend(rows)
    out.looks.extend(s.looks)
    for side in ("baseline", "candidate"):
        for lt in sorted(s.runs[side]):
            out.runs.extend(r.model_dump(mode="json") for r in s.runs[side][lt])
    out.runs.extend({**r.model_dump(mode="json"), "drift_only": True} for r in s.drift_runs)
    if s.n_runs("baseline") and s.n_runs("candidate"):
        out.tails.extend(tail_rows(s, confidence=gate.confidence, slo=gate.slo))
        if s.item.kind == CURVE_KIND:
            out.curves.extend(curve_rows(s, confidence=gate.confidence))


def _collect_measured(s: ItemState, rows: list[dict[str, Any]], out: _Judged) -> None:
    """Every measured metric of a decided point, as the claims are judged against it."""
    for r in rows:
        if r.get("speedup") is None:
            continue
        # the summary's word on lifetimes is the gated metric's (a reported metric the record lacks says so in its row)
        out.one_lifetime = out.one_lifetime or bool(r.get("gated") and r.get("ignores_lifetime_variance"))
        out.measured.append(
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
                lifetime_variance_unmeasured=bool(r.get("ignores_lifetime_variance")),
                **_run_range(r.get("candidate_run_values")),
            )
        )


def _engine_timing(gate: PerfGate, runs: list[dict[str, Any]], errors: list[str]) -> tuple[dict[str, int], list[str]]:
    """Engine-timed requests per side, and the errors with, first, each side whose engine reported no
    per-request timing when the gated metric needs it."""
    engine_timed = {
        side: sum(len(r.get("engine_tpot_ms") or []) for r in runs if r.get("side") == side)
        for side in ("baseline", "candidate")
    }
    errors = list(errors)
    if METRICS[gate.gated_metric].field == "engine_tpot_ms":
        for side, k in engine_timed.items():
            if k == 0 and any(r.get("side") == side for r in runs):
                errors.insert(
                    0,
                    f"the {side} engine reported no per-request timing, which "
                    f"{gate.gated_metric} needs: start it with --enable-per-request-metrics "
                    "(engines fasttrack starts get it)",
                )
    return engine_timed, errors


def _lifetime_note(one_lifetime: bool, interleaved: bool, calibration: dict[str, Any] | None) -> str:
    """What the intervals rest on, in words."""
    if one_lifetime:
        note = (
            "one engine lifetime per side and no calibrated lifetime variance: the intervals cover run-to-run noise "
            "only, and two lifetimes of one engine differ by more, so those points are inconclusive; calibrate this "
            "host class (fasttrack calibrate) or use a tier with lifetimes_per_side >= 2"
        )
    elif calibration and calibration.get("applied"):
        note = (
            "the engine lifetime is the unit of every interval: its lifetime-to-lifetime variance comes from "
            f"{calibration['describe']} and the run's own lifetimes where a side has several"
        )
    else:
        note = "the engine lifetime is the unit of every interval: the variance between the run's own lifetimes"
    if calibration and not calibration.get("applied") and calibration.get("why_not"):
        note += f"; the calibration record was not used: {calibration['why_not']}"
    if interleaved:
        note += (
            "; baseline and candidate runs were interleaved in time (both engines up, run pairs in A B B A "
            "blocks, resampled together), so a host that slowed down slowed both sides alike"
        )
    return note


def _summary(
    gate: PerfGate,
    st: PerfState,
    jd: _Judged,
    *,
    claims: list[ClaimResult],
    engine_timed: dict[str, int],
    errors: list[str],
) -> dict[str, Any]:
    """The check's summary: the points' counts, the rule, the statistics' settings and caveats, drift, claims."""
    verdicts, drift = jd.verdicts, jd.drift
    n = len(verdicts)
    n_fail = sum(1 for v in verdicts.values() if v == "fail")
    n_not = sum(1 for v in verdicts.values() if v == "not_run")
    n_inc = sum(1 for v in verdicts.values() if v == "inconclusive")
    n_pass = n - n_fail - n_not - n_inc
    unequal = sorted({s.item.group for s in st.items.values() if s.factor() != 1.0})
    gated_rows = [r for r in jd.rows if r.get("gated") and r.get("speedup") is not None]
    dom = list(jd.dominance.values())
    return {
        "interleaved": bool(gate.interleave),
        "points": n,
        "passed": n_pass,
        "failed": n_fail,
        "not_measured": n_not,
        "inconclusive": n_inc,
        "points_measured": n_pass + n_fail + n_inc,
        "calibration": st.calibration_summary,
        "require": gate.require,
        "rule": rule_words(gate),
        "strictly_better": bool(n and all(jd.strictly.values())),
        "strictly_better_points": sum(1 for v in jd.strictly.values() if v),
        "slower_within_margin": jd.slower,
        "gated_metric": gate.gated_metric,
        "metrics": list(dict.fromkeys([gate.gated_metric, *gate.metrics])),
        "noise_margin": gate.noise_margin,
        "confidence": confidence_note(gate, st.schedules),
        "ignores_lifetime_variance": jd.one_lifetime,
        "lifetime_note": _lifetime_note(jd.one_lifetime, bool(gate.interleave), st.calibration_summary),
        "largest_gate_detectable_slowdown": max(
            (r["gate_detectable_slowdown"] for r in gated_rows if r.get("gate_detectable_slowdown") is not None),
            default=None,
        ),
        "runs_per_point": {k: s.n_runs("baseline") + s.n_runs("candidate") for k, s in st.items.items()},
        "min_runs": gate.min_runs,
        "max_runs": gate.max_runs,
        "schedules": {g: sc.describe() for g, sc in st.schedules.items()},
        "drift_checked": len(drift),
        "drift_detected": [f"{d['point']} ({d['workload']})" for d in drift if d["drifted"]],
        "drift_trend_detected": [f"{d['point']} ({d['workload']})" for d in drift if d.get("trend_drifted")],
        "equal_resources": not unequal,
        "unequal_resource_groups": unequal,
        "claims": {c.id: c.status for c in claims},
        "slo": gate.slo.describe() if gate.slo is not None else None,
        "slo_gated": bool(gate.slo is not None and gate.slo.gate),
        "curve_dominance": {
            "required": gate.curve_dominance,
            "levels": len(dom),
            "dominated": sum(1 for d in dom if d.get("dominates")),
            "not_dominated": [d["point"] for d in dom if d.get("dominates") is False],
        },
        "lifetimes": st.lifetimes,
        "notes": st.notes,
        "errors": errors,
        "burst_delivered_requests": sum(int(r.get("burst_delivered") or 0) for r in jd.runs),
        "engine_timed_requests": engine_timed,
        "p90_interactivity": METRICS["p90_interactivity"].description,
        "definitions": "docs/perf.md (metric definitions, trace format, statistics)",
    }


def judge(ctx: RunContext, st: PerfState, *, stopped: str | None = None) -> CheckResult:
    """Judge every (workload, point) item, match the claims, and summarise the lifetimes and runs.

    ``stopped`` (why the run stopped early: an interrupt, a termination signal, an engine crash): a partial
    judgement. Decided points keep their runs, intervals and verdicts; a point with runs but no decision keeps
    its runs and its interval so far, without a verdict; claims are held against decided points only. The
    result says "k of n points measured"; it fails when a decided point failed, else it is not run (the
    measurement is incomplete)."""
    gate = ctx.scope.gates.perf
    jd = _judge_items(ctx, st, stopped=stopped)
    host_bound = _label_host_bound(ctx, jd.rows, gate.gated_metric)
    kinds: dict[str, str] = {w.name: w.kind for w in ctx.scope.workloads}
    run_workloads = {s.item.workload for s in st.items.values() if s.n_runs("baseline") or s.n_runs("candidate")}
    claims = match_claims(
        ctx.scope.claims,
        jd.measured,
        workload_kinds=kinds,
        workloads_run=run_workloads,
        rehearsal=ctx.rehearsal,
    )
    engine_timed, errors = _engine_timing(gate, jd.runs, st.errors)
    summary = _summary(gate, st, jd, claims=claims, engine_timed=engine_timed, errors=errors)
    summary["host_bound_points"] = host_bound
    if stopped is not None:
        summary.update(partial=True, stopped=stopped, undecided=jd.undecided)
    tables = {
        "points": jd.rows,
        "runs": jd.runs,
        "looks": jd.looks,
        "claims": [c.model_dump(mode="json") for c in claims],
        "drift": jd.drift,
        "lifetimes": st.lifetimes,
        "tails": jd.tails,
        "curves": jd.curves,
        "curve_dominance": list(jd.dominance.values()),
    }
    # what every outcome of the check carries, whatever its verdict
    evidence: dict[str, Any] = {
        "gate": perf_gate(gate, st.schedules),
        "summary": summary,
        "failures": jd.failures,
        "tables": typed_tables(CHECK, tables),
        "artifacts": [a for a in [(st.calibration_summary or {}).get("artifact")] if a],
    }
    n, n_pass, n_fail = summary["points"], summary["passed"], summary["failed"]
    measured_words = f"{summary['points_measured']} of {n} point(s) measured"
    if stopped is not None:
        return _partial_result(evidence, stopped, n_fail, n_pass, measured_words)
    if n == 0 or n_pass + n_fail + summary["inconclusive"] == 0:
        why = "no point was measured on both sides" + (f" ({errors[0]})" if errors else "")
        return CheckResult(check=CHECK, verdict=Verdict.NOT_RUN, reason=why, **evidence)
    verdict, reason = _verdict(gate, summary, measured_words, errors)
    if jd.slower:
        reason += f"; {SLOWER} at {len(jd.slower)} point(s): {', '.join(jd.slower[:4])}"
    reason += _reason_tail(summary)
    return CheckResult(check=CHECK, verdict=verdict, reason=reason, **evidence)


def _verdict(gate: PerfGate, summary: dict[str, Any], measured_words: str, errors: list[str]) -> tuple[Verdict, str]:
    """The verdict of a run that measured some point, and its reason's head: a failed point fails it, a point
    not compared leaves it not run, else it passes."""
    n, n_pass, n_fail, n_not = summary["points"], summary["passed"], summary["failed"], summary["not_measured"]
    n_inc = summary["inconclusive"]
    mg = gate_margin(gate)
    strict = gate.require == "strictly_better"
    if n_fail:
        return Verdict.FAIL, (
            f"{n_fail} of {n} point(s) failed the {'strictly-better' if strict else 'no-regression'} gate "
            + (f"({gate.gated_metric}, lower bound > 1)" if strict else f"({gate.gated_metric}, margin {mg:g})")
        )
    if n_inc:
        return Verdict.NOT_RUN, (
            f"inconclusive: lifetime variance unmeasured at {n_inc} of {n} point(s) (one engine lifetime per side and "
            "no calibration record of this host class: an interval of one lifetime's runs cannot tell a slowdown "
            f"from a restart); {n_pass} passed, none failed"
        )
    if n_not:
        reason = f"{measured_words}; {n_not} could not be compared; the {n_pass} measured passed"
        if errors:
            reason += f" ({errors[0]})"
        return Verdict.NOT_RUN, reason
    if strict:
        return Verdict.PASS, f"strictly better (lower bound > 1) at every one of {n} point(s) ({gate.gated_metric})"
    return Verdict.PASS, f"no regression beyond {mg:.0%} at any of {n} point(s) ({gate.gated_metric}); " + (
        "strictly better everywhere"
        if summary["strictly_better"]
        else f"strictly better at {summary['strictly_better_points']} of {n}"
    )


def _reason_tail(summary: dict[str, Any]) -> str:
    """The caveats a reason ends with: lifetimes, interleaving, drift, resources, curve dominance."""
    out = ""
    if summary["ignores_lifetime_variance"]:
        out += "; one lifetime per side, so the intervals ignore lifetime variance"
    if summary["interleaved"]:
        out += "; runs interleaved in time"
    if summary["drift_detected"]:
        out += f"; drift between baseline lifetimes at {len(summary['drift_detected'])} point(s)"
    if summary["drift_trend_detected"]:
        out += f"; the paired differences trend over time at {len(summary['drift_trend_detected'])} point(s)"
    if summary["unequal_resource_groups"]:
        out += "; unequal GPU counts, compared per GPU"
    cd = summary["curve_dominance"]
    if cd["levels"]:
        out += f"; the candidate's curve dominates within the margin at {cd['dominated']} of {cd['levels']} level(s)"
        out += " (required)" if cd["required"] else " (reported, not required)"
    return out


def _partial_result(
    evidence: dict[str, Any], stopped: str, n_fail: int, n_pass: int, measured_words: str
) -> CheckResult:
    """A run stopped early: the decided points' evidence (gate, summary, failures, tables), and no pass."""
    summary = evidence["summary"]
    reason = f"{measured_words} before the run stopped ({stopped})"
    if n_fail:
        reason += f": {n_fail} failed, {n_pass} passed"
    elif n_pass:
        reason += f": all {n_pass} passed; the others were not decided"
    if summary.get("undecided"):
        reason += f"; {len(summary['undecided'])} point(s) had runs but no decision (their runs and intervals are kept)"
    return CheckResult(check=CHECK, verdict=Verdict.FAIL if n_fail else Verdict.NOT_RUN, reason=reason, **evidence)
