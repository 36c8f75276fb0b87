"""The perf check's evidence: its nine tables and the no-regression gate re-judged from every point's interval.

A (workload, point) item passes when the lower confidence bound of its gated metric's speedup reaches the
threshold of the judging scope's gate (``1 - noise_margin``; ``1`` when ``require: strictly_better``), and is
inconclusive when that interval covers no lifetime variance (the lifetime rule: one engine lifetime on each side
and no calibration record in the judging scope, or a row that says its interval ignores it). Its
point verdict is then made worse by failed requests (the candidate's fail it, the baseline's leave it not
compared), by goodput at the SLO (``slo.gate``) and by curve dominance (``curve_dominance``). Re-judging:

* each row of the gated metric: ``gated`` true, its interval at no less than the scope's confidence, its
  verdict the one its lower bound gives, and the point verdict (``point_verdict``, else ``verdict``) the one
  the further conditions give (failed requests from ``runs``, goodput from its row, dominance from
  ``curve_dominance``);
* every item the judging scope's plan measures has its gated row;
* the check's bound: the items' verdicts folded (a missing item leaves it not run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from fasttrack import registry
from fasttrack.evidence.base import (
    Checker,
    CheckEvidence,
    Rejudged,
    Row,
    TableSpec,
    at_least,
    fold,
    headroom,
    worst,
)
from fasttrack.evidence.expect import RejudgeContext
from fasttrack.evidence.perf_tables import (
    Decision,
    PerfClaimRow,
    PerfCurveRow,
    PerfDominanceRow,
    PerfDriftRow,
    PerfLifetimeRow,
    PerfLookRow,
    PerfRunRow,
    PerfTailRow,
)

CHECK = "perf"
CURVE_KIND = "concurrency_sweep"

PerfVerdict = Literal["pass", "fail", "not_run", "inconclusive"]
"""A gated row's verdict: ``inconclusive`` when its interval covers no lifetime variance (one engine lifetime on a
side and no calibration): neither a pass nor a fail, and the check is then not run."""


class PerfPointRow(Row):
    """One metric of one (workload, point) item: the speedup with its interval, and the verdict when it is the
    gated metric."""

    KEY: ClassVar[tuple[str, ...]] = ("workload", "point", "metric_name")

    workload: str
    kind: str | None = None
    point: str
    group: str | None = None
    batch: int | None = None
    context: int | None = None
    full_context: bool | None = None
    prompt_len: int | None = None
    output_len: int | None = None
    requests_per_run: int | None = None
    runs_baseline: int | None = None
    runs_candidate: int | None = None
    runs: int | None = None
    burst_delivered: int | None = None
    lifetimes_baseline: int | None = None
    lifetimes_candidate: int | None = None
    looks: int | None = None
    gpus_baseline: int | None = None
    gpus_candidate: int | None = None
    notes: list[str] | None = None
    metric: str | None = None
    metric_name: str
    """The metric (``median_tpot_ms``, ``output_throughput``...); the judging scope's ``gated_metric`` is gated."""
    direction: str | None = None
    client_timed: bool | None = None
    unit: str | None = None
    statistic: str | None = None
    baseline: float | None = None
    candidate: float | None = None
    speedup: float | None = None
    ci_low: float | None = None
    """Lower confidence bound of the speedup (at ``confidence``, per GPU where the sides' GPUs differ)."""
    ci_high: float | None = None
    confidence: float | None = None
    """The interval's confidence level (per look: Bonferroni-corrected)."""
    nominal_confidence: float | None = None
    nominal_ci_low: float | None = None
    nominal_ci_high: float | None = None
    threshold: float | None = None
    noise_margin: float | None = None
    verdict: PerfVerdict | None
    """The gated metric's verdict (None on other metrics)."""
    gated: bool | None = None
    inconclusive: bool | None = None
    """The interval covers no lifetime variance (the lifetime rule): the point is inconclusive."""
    point_verdict: PerfVerdict | None = None
    """The item's verdict when a further condition (failed requests, goodput, dominance) changed it."""
    strictly_better: bool | None = None
    strict_low: float | None = None
    """Lower bound at the family-wise level (Bonferroni over the looks and the run's points) that "strictly better"
    is judged by."""
    lifetime_variance: str | None = None
    """Where the interval's lifetime-to-lifetime variance came from (calibration, the run's own lifetimes)."""
    mde: float | None = None
    detectable_slowdown: float | None = None
    detectable_speedup: float | None = None
    gate_detectable_slowdown: float | None = None
    gate_fail_probability_at_parity: float | None = None
    se_log: float | None = None
    ignores_lifetime_variance: bool | None = None
    interleaved: bool | None = None
    paired: bool | None = None
    per_gpu: bool | None = None
    raw_speedup: float | None = None
    raw_ci_low: float | None = None
    raw_ci_high: float | None = None
    baseline_lifetime_values: list[float | None] | None = None
    candidate_lifetime_values: list[float | None] | None = None
    baseline_run_values: list[list[float | None]] | None = None
    candidate_run_values: list[list[float | None]] | None = None
    n_boot: int | None = None
    seed: int | None = None
    method: str | None = None
    warnings: list[str] | None = None
    decision: Decision | None = None
    statement: str | None = None
    slower_within_margin: bool | None = None
    outcome: str | None = None
    host_bound: bool | None = None
    """Whether the baseline's decode step is mostly the host's work (streaming the weights takes under half of it)."""
    host_bound_note: str | None = None
    step_ms: float | None = None
    weights_stream_ms: float | None = None
    stream_share: float | None = None


# --------------------------------------------------------------------------- re-judging


def threshold(gate: Any) -> float:
    """The judging scope's threshold on a gated lower bound: ``1 - noise_margin``, or 1 for strictly better."""
    margin = 0.0 if getattr(gate, "require", "no_regression") == "strictly_better" else float(gate.noise_margin)
    return 1.0 - margin


def _failed(runs: Sequence[Row]) -> dict[tuple[str, str], dict[str, int]]:
    """Failed requests per (workload, point) and side, from the runs table."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for r in runs:
        assert isinstance(r, PerfRunRow)
        side = out.setdefault((r.workload, r.point), {"baseline": 0, "candidate": 0})
        side[r.side] += max(0, r.failed)
    return out


def _unmeasured_variance(r: PerfPointRow, gate: Any) -> bool:
    """Whether nothing measured the row's lifetime variance: the row says its interval ignores it, or the judging
    scope has no calibration record and no side ran two lifetimes (the lifetime rule then makes it inconclusive)."""
    if r.ignores_lifetime_variance or r.inconclusive:
        return True
    calibrated = getattr(gate, "calibration", None) is not None
    lifetimes = max(r.lifetimes_baseline or 0, r.lifetimes_candidate or 0)
    return not calibrated and r.lifetimes_baseline is not None and lifetimes < 2


def _metric_verdict(r: PerfPointRow, thr: float, gate: Any) -> tuple[str, str]:
    """The gated metric's verdict from its interval, and why."""
    if r.decision == "undecided":
        return "not_run", "not decided when the run stopped"
    if r.speedup is None and r.ci_low is None:
        return "not_run", "no interval (not measured)"
    if _unmeasured_variance(r, gate):
        return "inconclusive", "its interval covers no lifetime variance (one lifetime per side, no calibration)"
    if at_least(r.ci_low, thr):
        return "pass", f"lower bound {r.ci_low:.4g} >= {thr:.4g}"
    return "fail", f"lower bound {r.ci_low} < {thr:.4g}"


def _point_verdict(
    r: PerfPointRow,
    metric: str,
    *,
    failed: Mapping[str, int],
    goodput: PerfPointRow | None,
    dominance: PerfDominanceRow | None,
    gate: Any,
    thr: float,
) -> tuple[str, str]:
    """The item's verdict: the metric's, made worse by failed requests, goodput at the SLO and dominance."""
    if metric == "not_run":
        return metric, "the metric's verdict"
    if failed.get("candidate"):
        return "fail", f"the candidate failed {failed['candidate']} request(s)"
    if failed.get("baseline"):
        return "not_run", f"the baseline failed {failed['baseline']} request(s)"
    if metric in ("fail", "inconclusive"):
        return metric, "the metric's verdict"
    slo = getattr(gate, "slo", None)
    if slo is not None and getattr(slo, "gate", False):
        if goodput is None or goodput.nominal_ci_low is None:
            return "not_run", "goodput at the SLO has no interval"
        if not at_least(goodput.nominal_ci_low, thr):
            return "fail", f"goodput's lower bound {goodput.nominal_ci_low} < {thr:.4g}"
    if r.kind == CURVE_KIND and getattr(gate, "curve_dominance", False):
        if dominance is None or dominance.dominates is None:
            return "not_run", "curve dominance has no interval"
        if not dominance.dominates:
            return "fail", "the candidate's curve does not dominate within the margin"
    return "pass", "the metric passed and every further condition holds"


def rejudge(tables: Mapping[str, Sequence[Row]], gate: Any, ctx: RejudgeContext) -> Rejudged:
    """Re-judge every gated row and item (see the module docstring)."""
    c = Checker(CHECK)
    if gate is None:
        c.gap(None, f"{ctx.source} has no perf gate")
        return c.done("not_run")
    thr, gated = threshold(gate), gate.gated_metric
    rows = [r for r in tables.get("points", ()) if isinstance(r, PerfPointRow)]
    failed = _failed(tables.get("runs", ()))  # a merged bundle's failures count at every shard's row of the item
    dominance = {(r.workload, r.point): r for r in tables.get("curve_dominance", ()) if isinstance(r, PerfDominanceRow)}
    goodput = {(r.workload, r.point): r for r in rows if r.metric_name == "goodput"}
    verdicts: dict[tuple[str, str, str | None], str] = {}
    for i, r in enumerate(rows):
        key = (r.workload, r.point)
        if r.metric_name != gated:
            continue
        if (*key, r.shard) in verdicts:  # a merged bundle holds an item once per shard that measured it
            c.row("points", i, r, f"a second row of the gated metric {gated} for this item")
            continue
        if r.gated is not True and (r.speedup is not None or r.verdict is not None):
            c.row("points", i, r, f"gated is {r.gated!r}, but {gated} is the gated metric of {ctx.source}")
        if r.confidence is not None and r.ci_low is not None and not at_least(r.confidence, gate.confidence - 1e-9):
            c.row("points", i, r, f"its interval is at confidence {r.confidence}, below the scope's {gate.confidence}")
        metric, why = _metric_verdict(r, thr, gate)
        c.verdict("points", i, r, r.verdict, metric, why)
        point, pwhy = _point_verdict(
            r,
            metric,
            failed=failed.get(key, {}),
            goodput=goodput.get(key),
            dominance=dominance.get(key),
            gate=gate,
            thr=thr,
        )
        recorded = r.point_verdict if r.point_verdict is not None else r.verdict
        if r.verdict == metric:  # a wrong metric verdict is the finding already
            c.verdict("points", i, r, recorded, point, f"point verdict: {pwhy}")
        verdicts[(*key, r.shard)] = point
    measured = {(w, p) for w, p, _shard in verdicts}
    missing = [f"{w}@{p}" for w, p in ctx.perf_items() if (w, p) not in measured]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        c.gap("points", f"no row of the gated metric {gated} for {len(missing)} planned item(s): {shown}")
    # an inconclusive point leaves the check not run (neither passed nor failed)
    folded = fold(v if v != "inconclusive" else "not_run" for v in verdicts.values())
    bound = worst(folded, "not_run" if missing else "pass")
    note = f"{len(verdicts)} gated item(s) of {gated} re-judged against lower bound >= {thr:g}"
    return c.done(bound, [note])


BIG_FIELDS = frozenset(
    {"baseline_lifetime_values", "candidate_lifetime_values", "baseline_run_values", "candidate_run_values"}
)
POINT_FIELDS = tuple(f for f in PerfPointRow.model_fields if f not in BIG_FIELDS)
"""What re-judging reads of a points row (beside its key fields)."""


def _rows_points(ctx: RejudgeContext) -> int:
    return headroom(ctx.n_perf_items() * 16)


def _rows_runs(ctx: RejudgeContext) -> int:
    return headroom(ctx.n_perf_items() * 2 * (ctx.lifetimes + 1) * ctx.max_runs * 2)


def _rows_per_item(k: int) -> Any:
    return lambda ctx: headroom(ctx.n_perf_items() * k)


EVIDENCE = registry.register(
    "evidence",
    CHECK,
    CheckEvidence(
        check=CHECK,
        tables=(
            TableSpec("points", PerfPointRow, _rows_points, keep=POINT_FIELDS),
            TableSpec("runs", PerfRunRow, _rows_runs, keep=("failed",)),
            TableSpec("looks", PerfLookRow, lambda ctx: headroom(ctx.n_perf_items() * (ctx.max_runs + 2))),
            TableSpec("claims", PerfClaimRow, lambda ctx: headroom(len(ctx.scope.claims)), required=False),
            TableSpec("drift", PerfDriftRow, _rows_per_item(2), required=False),
            TableSpec("lifetimes", PerfLifetimeRow, lambda ctx: headroom(ctx.n_groups * 2 * (ctx.lifetimes + 1))),
            TableSpec("tails", PerfTailRow, _rows_per_item(32), required=False),
            TableSpec("curves", PerfCurveRow, _rows_per_item(2), required=False),
            TableSpec("curve_dominance", PerfDominanceRow, _rows_per_item(1), required=False, keep=("dominates",)),
        ),
        rejudge=rejudge,
    ),
)
