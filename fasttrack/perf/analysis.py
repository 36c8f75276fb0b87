"""From runs to verdicts: per (workload, point) estimates, gates, MDE, drift and resources.

Layout of the evidence for one cell: side -> engine lifetime -> run -> samples
(``RunMetrics.samples(metric)``). The statistics come from :mod:`fasttrack.stats`:

* the speedup of each metric with an interval whose unit is the engine lifetime
  (``gates.perf.interval: lifetime``, :mod:`fasttrack.stats.lifetime`): its lifetime variance
  comes from the scope's calibration record (:mod:`fasttrack.perf.calibration`, per point and
  metric, ``ItemState.variance``) and/or the run's own lifetimes; where neither measures it the
  row shows the runs' hierarchical-bootstrap interval, marked as ignoring lifetime variance, and
  the point is inconclusive;
* the gated metric's verdict is the last sequential look's decision (see
  :mod:`fasttrack.perf.schedule`): pass iff the lower end of the Bonferroni-corrected
  interval is at least ``1 - noise_margin``; inconclusive when that interval covers no lifetime
  variance; strictly better iff the lower end at the family-wise level (Bonferroni over the looks
  and the run's points) exceeds 1;
* the minimum detectable effect at 80% power next to every verdict;
* per-GPU normalisation when the sides used different GPU counts (the gate then
  judges the per-GPU speedup);
* the drift check when the baseline has lifetimes before and after a candidate one;
* interleaved cells (``gates.perf.interleave``) resample run pairs together (paired
  bootstrap), so a host slowdown that hit both runs of a pair cancels.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fasttrack.perf.metrics import CLIENT_TIMED_FIELDS, METRICS, MetricDef, RunMetrics
from fasttrack.perf.workloads import WorkItem
from fasttrack.stats import (
    MinimumDetectableEffect,
    PointGate,
    RatioEstimate,
    SequentialDecision,
    mde_for_estimate,
    no_regression_gate,
    ratio_interval,
    sequential_decision,
)
from fasttrack.stats.hierarchical import MetricSpec
from fasttrack.stats.lifetime import LifetimeVariance

SIDES = ("baseline", "candidate")
N_BOOT = 4000
POWER = 0.8


@dataclass
class ItemState:
    """Everything measured for one (workload, point) cell."""

    item: WorkItem
    runs: dict[str, dict[int, list[RunMetrics]]] = field(default_factory=lambda: {"baseline": {}, "candidate": {}})
    looks: list[dict[str, Any]] = field(default_factory=list)
    """One summary per sequential look."""
    decision: str | None = None
    """Last look's decision: decided_pass, decided_fail or undecided."""
    final: bool = False
    gpus: dict[str, int] = field(default_factory=dict)
    """GPUs one engine of each side used."""
    errors: list[str] = field(default_factory=list)
    """Harness-side problems (a run that could not be sent)."""
    drift_runs: list[RunMetrics] = field(default_factory=list)
    """Baseline runs of a trailing drift-only lifetime (never used by the gate)."""
    interleaved: bool = False
    """Measured interleaved (``gates.perf.interleave``): run k of each side next to the other's run k,
    lifetime i of both sides up together, so the bootstrap resamples those pairs together."""
    variance: dict[str, LifetimeVariance] = field(default_factory=dict)
    """Calibrated lifetime variance of this cell, by metric (from the scope's calibration record)."""

    def add(self, run: RunMetrics) -> None:
        self.runs[run.side].setdefault(run.lifetime, []).append(run)

    def n_runs(self, side: str) -> int:
        return sum(len(v) for v in self.runs[side].values())

    def lifetimes(self, side: str) -> list[int]:
        return sorted(k for k, v in self.runs[side].items() if v)

    def failed_requests(self, side: str) -> int:
        return sum(r.failed for lt in self.runs[side].values() for r in lt)

    def nested(self, side: str, metric: str, *, lifetimes: Iterable[int] | None = None) -> list[list[Any]]:
        """lifetime -> run -> samples of ``metric`` (runs without samples dropped, empty lifetimes dropped)."""
        md = METRICS[metric]
        out = []
        for lt in sorted(self.runs[side]) if lifetimes is None else lifetimes:
            runs = [s for r in self.runs[side].get(lt, []) if (s := md.samples(r)) is not None]
            if runs:
                out.append(runs)
        return out

    def has_samples(self, side: str, metric: str) -> bool:
        """Whether any run of ``side`` has samples of ``metric`` (what a look needs on both sides)."""
        md = METRICS[metric]
        return any(md.samples(r) is not None for runs in self.runs[side].values() for r in runs)

    def factor(self) -> float:
        """baseline GPUs / candidate GPUs (1 when equal or on CPU hosts)."""
        b, c = self.gpus.get("baseline", 0), self.gpus.get("candidate", 0)
        if b and c and b != c:
            return b / c
        return 1.0


def seed_for(key: str, metric: str) -> int:
    return zlib.crc32(f"{key}|{metric}".encode("utf-8")) % (2**31 - 1)


class _IntervalArgs(MetricSpec):
    """How an item's speedup interval is computed, the same at every look and in the final estimate."""

    interval: str
    n_boot: int
    seed: int
    paired: bool
    variance: LifetimeVariance | None


def _interval_args(state: ItemState, metric: str, *, confidence: float, interval: str) -> _IntervalArgs:
    """The metric's direction and statistic, the bootstrap's size and the item's seed, whether the runs pair, and
    the cell's calibrated lifetime variance of the metric."""
    md = METRICS[metric]
    spec = MetricSpec(metric=metric, direction=md.direction, statistic=md.statistic, confidence=confidence)
    seed = seed_for(state.item.key, metric)
    return _IntervalArgs(
        **spec,
        interval=interval,
        n_boot=N_BOOT,
        seed=seed,
        paired=state.interleaved,
        variance=state.variance.get(metric),
    )


def look(
    state: ItemState,
    *,
    metric: str,
    noise_margin: float,
    confidence: float,
    look_no: int,
    planned_looks: int,
    interval: str = "bootstrap",
) -> SequentialDecision:
    """One sequential look at the gated metric (per-GPU when resources differ)."""
    dec = sequential_decision(
        state.nested("baseline", metric),
        state.nested("candidate", metric),
        noise_margin=noise_margin,
        look=look_no,
        planned_looks=planned_looks,
        point=state.item.point,
        **_interval_args(state, metric, confidence=confidence, interval=interval),
    )
    f = state.factor()
    if f != 1.0:
        dec = _rescale_decision(dec, f, look_no=look_no, planned_looks=planned_looks)
    return dec


def _rescale_decision(dec: SequentialDecision, f: float, *, look_no: int, planned_looks: int) -> SequentialDecision:
    g = dec.gate
    lo, hi, thr = g.ci_low * f, g.ci_high * f, g.threshold
    if g.inconclusive:
        d, why = dec.decision, dec.reason
    elif lo >= thr:
        d, why = "decided_pass", f"per-GPU lower bound {lo:.4g} >= {thr:.4g}"
    elif hi < thr:
        d, why = "decided_fail", f"per-GPU upper bound {hi:.4g} < {thr:.4g}"
    elif look_no == planned_looks:
        d, why = "decided_fail", f"last planned look and the per-GPU lower bound {lo:.4g} is below {thr:.4g}"
    else:
        d, why = "undecided", f"per-GPU interval [{lo:.4g}, {hi:.4g}] straddles {thr:.4g}"
    gate = g.model_copy(
        update={
            "speedup": g.speedup * f,
            "ci_low": lo,
            "ci_high": hi,
            "passed": not g.inconclusive and lo >= thr,
            "strictly_better": not g.inconclusive and lo > 1.0,
            "method": g.method + f"; speedup and interval multiplied by baseline/candidate GPUs = {f:g}",
        }
    )
    return dec.model_copy(update={"decision": d, "final": d != "undecided", "reason": why, "gate": gate})


def look_summary(dec: SequentialDecision, state: ItemState) -> dict[str, Any]:
    return {
        "key": state.item.key,
        "workload": state.item.workload,
        "point": state.item.point,
        "look": dec.look,
        "planned_looks": dec.planned_looks,
        "decision": dec.decision,
        "per_look_confidence": dec.per_look_confidence,
        "speedup": dec.gate.speedup,
        "ci_low": dec.gate.ci_low,
        "ci_high": dec.gate.ci_high,
        "threshold": dec.gate.threshold,
        "runs_baseline": state.n_runs("baseline"),
        "runs_candidate": state.n_runs("candidate"),
        "reason": dec.reason,
    }


# ---------------------------------------------------------------------------------- judging


def estimate(state: ItemState, metric: str, *, confidence: float, interval: str = "bootstrap") -> RatioEstimate | None:
    b, c = state.nested("baseline", metric), state.nested("candidate", metric)
    if not b or not c:
        return None
    return ratio_interval(b, c, **_interval_args(state, metric, confidence=confidence, interval=interval))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def statement(
    passed: bool | None,
    *,
    lower: float,
    threshold: float,
    slowdown: float | None,
    gate_slowdown: float | None,
    ignores_lifetime_variance: bool,
    inconclusive: bool = False,
) -> str:
    """The verdict in words with its minimum detectable effect."""
    if inconclusive:
        return (
            "inconclusive: lifetime variance unmeasured (one engine lifetime on a side and no calibration record "
            "of this point for this host class); the interval shown covers run-to-run noise only, and two lifetimes "
            "of one engine differ by more, so it can neither pass nor fail the point nor call it strictly better"
        )
    if passed is None:
        head = "reported, not gated"
    elif passed:
        head = f"no regression detected (lower bound {lower:.3f} >= {threshold:.3f})"
    else:
        head = f"no-regression not shown (lower bound {lower:.3f} < {threshold:.3f})"
    s = (
        f"{head}, and a slowdown of {_pct(slowdown)} or more would have been detected (80% power); "
        f"the gate fails a slowdown of {_pct(gate_slowdown)} or more with 80% probability"
    )
    if ignores_lifetime_variance:
        s += "; one engine lifetime per side: the interval ignores lifetime-to-lifetime variance"
    return s


def family_confidence(confidence: float, *, planned_looks: int, points: int) -> float:
    """The level "strictly better" is judged at: Bonferroni over the planned looks and the run's points, so a
    no-op candidate is strictly better at some point of a run with probability at most (1 - confidence) / 2."""
    return 1.0 - (1.0 - confidence) / max(1, planned_looks) / max(1, points)


@dataclass
class ItemJudgement:
    rows: list[dict[str, Any]]
    verdict: str
    """pass, fail or not_run (for the gated metric)."""
    failure: str | None
    strictly_better: bool
    gate: PointGate | None
    nominal: dict[str, RatioEstimate]
    mde: dict[str, Any]


def _base_row(state: ItemState) -> dict[str, Any]:
    """The columns every row of the cell starts with: which measurement, its shape, its runs and lifetimes."""
    it = state.item
    runs_b, runs_c = state.n_runs("baseline"), state.n_runs("candidate")
    return {
        **it.identity(),
        "full_context": it.full_context,
        "prompt_len": it.prompt_len,
        "output_len": it.output_len,
        "requests_per_run": it.requests_per_run,
        "runs_baseline": runs_b,
        "runs_candidate": runs_c,
        "runs": runs_b + runs_c,
        "burst_delivered": sum(r.burst_delivered for sd in state.runs.values() for lt in sd.values() for r in lt),
        "lifetimes_baseline": len(state.lifetimes("baseline")),
        "lifetimes_candidate": len(state.lifetimes("candidate")),
        "looks": len(state.looks),
        "gpus_baseline": state.gpus.get("baseline"),
        "gpus_candidate": state.gpus.get("candidate"),
        "notes": list(it.notes) + list(state.errors),
    }


def _unmeasured_row(base_row: dict[str, Any], workload: str, m: str, *, gated: str, why: str) -> dict[str, Any]:
    """The row of a metric without an interval (``not_run`` when it is the gated one)."""
    return {
        **base_row,
        "metric": f"{workload}/{m}",
        "metric_name": m,
        "verdict": "not_run" if m == gated else None,
        "statement": why,
    }


def _gate_decision(
    state: ItemState,
    *,
    gated: str,
    noise_margin: float,
    confidence: float,
    planned_looks: int,
    interval: str,
) -> tuple[str | None, float]:
    """The gated metric's decision and its per-look confidence: the last look's when the looks decided, else
    one final look now (recorded among the looks, ``at_judge``)."""
    if state.looks and state.final:
        return state.decision, state.looks[-1]["per_look_confidence"]
    d = look(
        state,
        metric=gated,
        noise_margin=noise_margin,
        confidence=confidence,
        look_no=planned_looks,
        planned_looks=planned_looks,
        interval=interval,
    )
    state.looks.append({**look_summary(d, state), "at_judge": True})
    return d.decision, d.per_look_confidence


def _metric_row(
    state: ItemState,
    base_row: dict[str, Any],
    m: str,
    *,
    est: RatioEstimate,
    nom: RatioEstimate,
    mde: MinimumDetectableEffect,
    g: PointGate,
    gated: str,
    decision: str | None,
    conf: float,
    confidence: float,
    noise_margin: float,
    strict_low: float | None,
) -> dict[str, Any]:
    """One metric's row: its speedup and interval at ``conf`` (per GPU when resources differ), the nominal-level
    interval, the minimum detectable effect, and the verdict when it is the gated metric (``strict_low``: the
    family-wise lower bound strictly better is judged by)."""
    md: MetricDef = METRICS[m]
    f = state.factor()
    lo, hi, sp = est.ci_low * f, est.ci_high * f, est.speedup * f
    inconclusive = g.inconclusive
    passed = not inconclusive and lo >= g.threshold
    verdict: str | None = None
    if m == gated:
        verdict = "inconclusive" if decision == "inconclusive" else "pass" if decision == "decided_pass" else "fail"
        if verdict == "pass" and not passed:  # cannot happen: the decision was taken on this same interval
            verdict = "fail"
    strict = None if strict_low is None else strict_low * f
    return {
        **base_row,
        "metric": f"{state.item.workload}/{m}",
        "metric_name": m,
        "direction": md.direction,
        "client_timed": md.field in CLIENT_TIMED_FIELDS,
        "unit": md.unit,
        "statistic": md.statistic,
        "baseline": md.display(est.baseline.value),
        "candidate": md.display(est.candidate.value),
        "speedup": sp,
        "ci_low": lo,
        "ci_high": hi,
        "confidence": conf,
        "nominal_confidence": confidence,
        "nominal_ci_low": nom.ci_low * f,
        "nominal_ci_high": nom.ci_high * f,
        "threshold": g.threshold,
        "noise_margin": noise_margin,
        "verdict": verdict,
        "gated": m == gated,
        "inconclusive": inconclusive,
        "strictly_better": not inconclusive and (strict if strict is not None else lo) > 1.0,
        "strict_low": strict,
        "lifetime_variance": est.lifetime_variance,
        "mde": mde.detectable_slowdown,
        "detectable_slowdown": mde.detectable_slowdown,
        "detectable_speedup": mde.detectable_speedup,
        "gate_detectable_slowdown": mde.gate_detectable_slowdown,
        "gate_fail_probability_at_parity": mde.gate_fail_probability_at_parity,
        "se_log": est.log_speedup_se,
        "ignores_lifetime_variance": est.ignores_lifetime_variance,
        "interleaved": state.interleaved,
        "paired": est.paired,
        "per_gpu": f != 1.0,
        "raw_speedup": est.speedup,
        "raw_ci_low": est.ci_low,
        "raw_ci_high": est.ci_high,
        **_raw_fields(est, md),
        "decision": decision if m == gated else None,
        "statement": statement(
            None if verdict is None else verdict == "pass",
            lower=lo,
            threshold=g.threshold,
            slowdown=mde.detectable_slowdown,
            gate_slowdown=mde.gate_detectable_slowdown,
            ignores_lifetime_variance=est.ignores_lifetime_variance,
            inconclusive=verdict == "inconclusive",
        ),
    }


def _raw_fields(est: RatioEstimate, md: MetricDef) -> dict[str, Any]:
    """A row's raw figures: each lifetime's and each run's value per side, and how the interval was made."""
    return {
        "baseline_lifetime_values": [md.display(v) for v in est.baseline.lifetime_values],
        "candidate_lifetime_values": [md.display(v) for v in est.candidate.lifetime_values],
        "baseline_run_values": [[md.display(v) for v in lt] for lt in est.baseline.run_values],
        "candidate_run_values": [[md.display(v) for v in lt] for lt in est.candidate.run_values],
        "n_boot": est.n_boot,
        "seed": est.seed,
        "method": est.method,
        "warnings": est.warnings,
    }


def _point_verdict(state: ItemState, grow: dict[str, Any], gated: str) -> tuple[str, str | None]:
    """The cell's verdict from its gated row, and why it failed: failed candidate requests fail it, failed
    baseline requests leave it not compared."""
    it = state.item
    fb, fc = state.failed_requests("baseline"), state.failed_requests("candidate")
    verdict = grow["verdict"]
    if fc:
        return "fail", (
            f"{it.point} ({it.workload}): the candidate failed {fc} request(s): "
            + "; ".join(e for lt in state.runs["candidate"].values() for r in lt for e in r.errors)[:400]
        )
    if fb:
        return "not_run", (
            f"{it.point} ({it.workload}): the baseline failed {fb} request(s), so the point was not compared"
        )
    if verdict == "fail":
        return verdict, (
            f"{it.point} ({it.workload}): {gated} speedup {grow['speedup']:.3f} "
            f"[{grow['ci_low']:.3f}, {grow['ci_high']:.3f}] at {grow['confidence']:.4g}: lower bound below "
            f"{grow['threshold']:.3f} (baseline {grow['baseline']:.4g} vs candidate {grow['candidate']:.4g} "
            f"{METRICS[gated].unit}; "
            f"{state.n_runs('baseline')}+{state.n_runs('candidate')} runs over "
            f"{grow['lifetimes_baseline']}+{grow['lifetimes_candidate']} lifetimes)"
        )
    return verdict, None


def judge_item(
    state: ItemState,
    *,
    metrics: list[str],
    gated: str,
    noise_margin: float,
    confidence: float,
    planned_looks: int,
    interval: str = "bootstrap",
    points: int = 1,
) -> ItemJudgement:
    """Rows (one per metric) and the gated verdict of one cell (``points``: the run's points, for the family-wise
    level of "strictly better")."""
    it = state.item
    rows: list[dict[str, Any]] = []
    nominal: dict[str, RatioEstimate] = {}
    mdes: dict[str, Any] = {}
    base_row = _base_row(state)
    empty = [sd for sd in ("baseline", "candidate") if not state.has_samples(sd, gated)]
    if empty:
        runs_b, runs_c = base_row["runs_baseline"], base_row["runs_candidate"]
        why = f"not measured: {runs_b} baseline and {runs_c} candidate runs"
        if runs_b and runs_c:
            why = (
                f"not measured: no usable {gated} samples on {' and '.join(empty)} ({runs_b} baseline and "
                f"{runs_c} candidate runs; a run whose tokens all arrived in one chunk has none)"
            )
        rows = [_unmeasured_row(base_row, it.workload, m, gated=gated, why=why) for m in metrics]
        return ItemJudgement(rows, "not_run", None, False, None, nominal, mdes)

    # the gated metric: decision from the looks (or one final look now)
    decision, dec_conf = _gate_decision(
        state,
        gated=gated,
        noise_margin=noise_margin,
        confidence=confidence,
        planned_looks=planned_looks,
        interval=interval,
    )
    dec_gate: PointGate | None = None
    for m in metrics:
        conf = dec_conf if m == gated else confidence
        est = estimate(state, m, confidence=conf, interval=interval)
        if est is None:
            rows.append(_unmeasured_row(base_row, it.workload, m, gated=gated, why=f"no samples of {m} on one side"))
            continue
        nom_est = est if conf == confidence else estimate(state, m, confidence=confidence, interval=interval)
        assert nom_est is not None  # the same samples as ``est``, so the nominal-level estimate exists too
        nominal[m] = nom_est
        mdes[m] = mde = mde_for_estimate(est, power=POWER, noise_margin=noise_margin)
        fw = family_confidence(confidence, planned_looks=planned_looks, points=points)
        strict_est = estimate(state, m, confidence=fw, interval=interval) if m == gated else None
        strict_low = strict_est.ci_low if strict_est is not None else None
        g = no_regression_gate(est, noise_margin=noise_margin, point=it.point, strict_low=strict_low)
        if m == gated:
            dec_gate = g
        row = _metric_row(
            state,
            base_row,
            m,
            est=est,
            nom=nom_est,
            mde=mde,
            g=g,
            gated=gated,
            decision=decision,
            conf=conf,
            confidence=confidence,
            noise_margin=noise_margin,
            strict_low=strict_low,
        )
        rows.append(row)
    grow = next((r for r in rows if r.get("metric_name") == gated), None)
    if grow is None or grow.get("verdict") is None or grow.get("verdict") == "not_run":
        return ItemJudgement(rows, "not_run", None, False, None, nominal, mdes)
    verdict, failure = _point_verdict(state, grow, gated)
    return ItemJudgement(rows, verdict, failure, bool(grow["strictly_better"]), dec_gate, nominal, mdes)
