"""Published claims (scope ``claims``) matched to what the perf check measured.

Each claim is reported as **supported**, **refuted**, **inconclusive** or **not measured**, judged by the
measured interval against the claimed figure less the claim's own tolerance (``claims[].tolerance``,
default 5%; :func:`fasttrack.results.claim_verdict`), ``bound = claimed x (1 - tolerance)`` for figures
where higher is better:

* **supported** iff the whole interval lies at or above the bound (its lower end reaches it);
* **refuted** iff the whole interval lies below the bound (its upper end falls short);
* **inconclusive** otherwise (the interval straddles the bound: the run cannot tell).

The perf gate's noise margin plays no part: it is how much slower a point may measure and pass, not how far
a published figure may be from what was measured (a claim of 1.0x measured at 0.84x [0.75, 0.93] is refuted
at the default tolerance, however wide the margin). For a figure where lower is better the rule is mirrored.
Speedups are direction-aware (above 1 always means the candidate is better), so they are always judged as
"higher is better".

* A claim is matched to the measured (workload, point) cells whose point agrees
  with every dimension the claim names (tp, dcp, spec, draft_length,
  acceptance_length, batch, context; ``context: full`` matches the full-context
  point) and, when the claim names a workload, of that workload (otherwise pure
  decode is preferred). Of several matches the shortest context is used (claims
  such as "ISL 1" are about short prompts); the others are listed. A trace-replay
  workload sets its own concurrency, so batch and context are not matched there.
* Speedup claims (``speedup_tpot``, ``speedup_engine_tpot``, ``speedup_output_throughput``,
  or any claim with ``speedup``) compare the claimed speedup with the measured speedup's
  interval: the nominal-level hierarchical bootstrap interval of the point (its minimum
  detectable effect is reported next to it).
* Absolute claims (``candidate``/``baseline`` tokens/s or tokens/s/user) are only
  comparable on the claim's hardware: on a rehearsal host the claimed ratio is compared
  instead, or the claim is not measured. Otherwise the interval is the range of the
  candidate's per-run values (every run must reach the bound to confirm, none may to
  contradict); without per-run values the claim is inconclusive.
* ``kernels_per_layer`` and ``latency_per_layer_us`` come from profiler traces,
  not from serving metrics: not measured here.
* **Like-for-like.** A claim compares figures at equal GPU counts, or per GPU. A claim that
  states unequal GPU counts (``baseline_gpus`` != ``candidate_gpus``) must say
  ``like_for_like: false`` (the scope is refused otherwise), and is then judged **per GPU**:
  the claimed ratio becomes ``candidate / candidate_gpus`` over ``baseline / baseline_gpus``
  (e.g. the AgentX figure 403.2 on 16 GPUs against 223.7 on 8 is 25.2 against 27.96
  tokens/s/user per GPU, 0.90x), compared with the measured per-GPU speedup; the result
  shows both per-GPU figures and says "not like-for-like". Measured speedups are per GPU
  whenever the two sides' engines used different GPU counts (``fasttrack.perf.analysis``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from fasttrack import attrs
from fasttrack.modelbase import StrictModel
from fasttrack.results import claim_verdict
from fasttrack.stats import normalize_speedup_per_gpu

ClaimStatus = Literal["supported", "refuted", "inconclusive", "not_measured"]

#: claim metric -> (measured metric, what is compared)
CLAIM_METRICS: dict[str, tuple[str | None, str]] = {
    "speedup_tpot": ("median_tpot_ms", "speedup"),
    "speedup_engine_tpot": ("median_engine_tpot_ms", "speedup"),
    "speedup_output_throughput": ("output_throughput", "speedup"),
    "output_throughput": ("output_throughput", "absolute"),
    "interactivity_p90": ("p90_interactivity", "absolute"),
    "kernels_per_layer": (None, "profiler"),
    "latency_per_layer_us": (None, "profiler"),
}


class MeasuredMetric(StrictModel):
    """One measured (workload, point, metric) cell, as claims matching sees it."""

    workload: str
    kind: str
    point: str
    point_dims: dict[str, Any]
    metric: str
    speedup: float
    ci_low: float
    ci_high: float
    confidence: float
    baseline_value: float | None
    candidate_value: float | None
    detectable_slowdown: float | None = None
    normalized: bool = False
    """True when speedup and interval are per GPU (unequal resources)."""
    baseline_gpus: int | None = None
    """GPUs of one baseline engine at this point (None or 0 on CPU hosts)."""
    candidate_gpus: int | None = None
    """GPUs of one candidate engine at this point."""
    candidate_low: float | None = None
    """The smallest of the candidate's per-run values (in the metric's display unit), when known."""
    candidate_high: float | None = None
    """The largest of the candidate's per-run values, when known."""
    lifetime_variance_unmeasured: bool = False
    """The interval covers one lifetime's runs only (no calibration, one lifetime on a side): a claim judged by it
    is inconclusive."""


class ClaimResult(StrictModel):
    """The outcome for one claim (a row of the ``claims`` table)."""

    id: str
    text: str
    metric: str
    status: ClaimStatus
    reason: str
    """One sentence: why this status."""
    claimed: float | None
    """The claimed number compared (speedup, or candidate absolute value)."""
    measured: float | None
    ci_low: float | None = None
    """Lower end of the interval the claim was judged by (speedup interval, or the candidate's run range)."""
    ci_high: float | None = None
    """Upper end of that interval."""
    bound: float | None = None
    """What the interval was compared with: claimed x (1 - tolerance)."""
    tolerance: float | None = None
    """The claim's tolerance (``claims[].tolerance``)."""
    confidence: float | None = None
    measured_baseline: float | None = None
    claimed_baseline: float | None = None
    point: str | None = None
    """The measured point the claim was matched to."""
    workload: str | None = None
    other_matches: list[str] = []
    like_for_like: bool = True
    """False when the published figures came from unequal GPU counts (then judged per GPU)."""
    baseline_gpus: int | None = None
    """GPUs behind the published baseline figure (when the claim states them)."""
    candidate_gpus: int | None = None
    """GPUs behind the published candidate figure."""
    claimed_per_gpu_speedup: float | None = None
    """The claim's speedup per GPU, when it is not like-for-like."""
    claimed_baseline_per_gpu: float | None = None
    """The published baseline figure per GPU (not like-for-like claims with a baseline figure)."""
    claimed_candidate_per_gpu: float | None = None
    """The published candidate figure per GPU (not like-for-like claims with a candidate figure)."""
    measured_baseline_gpus: int | None = None
    measured_candidate_gpus: int | None = None
    """GPUs of one engine of each side at the matched point (None or 0 on CPU hosts)."""
    detectable_slowdown: float | None = None


class _Match(TypedDict):
    """The ClaimResult fields that say which measured point a claim was matched to."""

    point: str
    workload: str
    other_matches: list[str]
    detectable_slowdown: float | None
    measured_baseline_gpus: int | None
    measured_candidate_gpus: int | None


def point_matches(claim_point: dict[str, Any], dims: dict[str, Any], *, trace: bool) -> bool:
    """Whether a measured point agrees with every dimension the claim names."""
    for k, v in claim_point.items():
        if trace and k in ("batch", "context"):
            continue
        if k == "context":
            if v == "full":
                if not dims.get("full_context"):
                    return False
                continue
            if dims.get("full_context") or dims.get("context") != v:
                return False
            continue
        if k == "spec":
            if dims.get("spec", "none") != v:
                return False
            continue
        if dims.get(k) != v:
            return False
    return True


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def interval_status(
    claimed: float, low: float, high: float, *, tolerance: float, higher_is_better: bool = True
) -> tuple[ClaimStatus, float]:
    """Judge a claimed figure by a measured interval ``[low, high]``; returns (status, bound). The rule is
    :func:`fasttrack.results.claim_verdict` (the report re-judges recorded claims by the same function)."""
    return claim_verdict(claimed, low, high, tolerance=tolerance, higher_is_better=higher_is_better)


def _why(status: ClaimStatus, low: float, high: float, bound: float, claimed: float, tolerance: float) -> str:
    rule = f"{claimed:.3g} x (1 - {tolerance:g}) = {bound:.3g}"
    if status == "supported":
        return f"the interval [{low:.3g}, {high:.3g}] lies at or above {rule}: supported"
    if status == "refuted":
        return f"the interval [{low:.3g}, {high:.3g}] lies below {rule}: refuted"
    return f"the interval [{low:.3g}, {high:.3g}] straddles {rule}: inconclusive (the run cannot tell)"


def match_claims(
    claims: Iterable[Any],
    measured: Sequence[MeasuredMetric],
    *,
    workload_kinds: dict[str, str],
    workloads_run: set[str],
    rehearsal: bool,
) -> list[ClaimResult]:
    """Match every claim (``fasttrack.scope.Claim``) to the measurements; see the module docstring. Each claim
    is judged by its own tolerance."""
    out = []
    for c in claims:
        out.append(_one(c, measured, workload_kinds=workload_kinds, workloads_run=workloads_run, rehearsal=rehearsal))
    return out


@dataclass
class _Claimed:
    """A claim's figures as they are judged: the claimed speedup (per GPU when the published comparison is not
    like-for-like), the words that say so, and the ClaimResult fields every outcome of the claim carries."""

    claimed_speedup: float | None
    tolerance: float
    """``claims[].tolerance``."""
    unequal: bool
    flag: str
    """Appended to every reason: why the claim is judged per GPU (empty when like-for-like)."""
    base: dict[str, Any]

    def not_measured(self, why: str, claimed: float | None) -> ClaimResult:
        return ClaimResult(status="not_measured", reason=why + self.flag, claimed=claimed, measured=None, **self.base)


def _claimed(c: Any) -> _Claimed:
    """The claim's speedup, normalised per GPU when it states unequal GPU counts (``like_for_like: false``)."""
    per_gpu = None
    bg, cg = c.baseline_gpus, c.candidate_gpus
    unequal = not c.like_for_like and isinstance(bg, int) and isinstance(cg, int)
    if c.speedup is None and c.candidate and c.baseline:
        raw_speedup: float | None = c.candidate / c.baseline
    else:
        raw_speedup = c.speedup
    claimed_speedup = raw_speedup
    flag = ""
    if unequal:
        assert bg is not None and cg is not None
        if raw_speedup:
            per_gpu = normalize_speedup_per_gpu(
                raw_speedup, baseline_gpus=bg, candidate_gpus=cg, metric=c.metric
            ).normalized_speedup
            claimed_speedup = per_gpu  # a comparison across unequal resources is judged per GPU only
        flag = (
            f" The published comparison is not like-for-like: {cg} candidate GPUs against {bg} baseline GPUs"
            + (
                f" ({_fmt(c.candidate)} / {cg} = {_fmt(c.candidate / cg)} against {_fmt(c.baseline)} / {bg} = "
                f"{_fmt(c.baseline / bg)} per GPU)"
                if c.candidate and c.baseline
                else ""
            )
            + (f"; the claimed {raw_speedup:.3g}x is {per_gpu:.3g}x per GPU" if raw_speedup and per_gpu else "")
            + "."
        )
    base = dict(
        tolerance=float(c.tolerance),
        **attrs(c, "id", "text", "metric", "like_for_like"),
        baseline_gpus=bg,
        candidate_gpus=cg,
        claimed_per_gpu_speedup=per_gpu,
        claimed_baseline_per_gpu=c.baseline / bg if unequal and c.baseline and bg else None,
        claimed_candidate_per_gpu=c.candidate / cg if unequal and c.candidate and cg else None,
        claimed_baseline=c.baseline,
    )
    return _Claimed(claimed_speedup, float(c.tolerance), unequal, flag, base)


def _matching(c: Any, measured: Sequence[MeasuredMetric], mmetric: str) -> list[MeasuredMetric]:
    """The measured cells of ``mmetric`` the claim matches, first the one it is judged by (the shortest context)."""
    cands = [m for m in measured if m.metric == mmetric and (c.workload is None or m.workload == c.workload)]
    cands = [m for m in cands if point_matches(c.point, m.point_dims, trace=m.kind == "trace_replay")]
    if c.workload is None:
        pure = [m for m in cands if m.kind == "pure_decode"]
        cands = pure or cands
    cands.sort(key=lambda m: (bool(m.point_dims.get("full_context")), m.point_dims.get("context") or 0, m.point))
    return cands


def _one(
    c: Any,
    measured: Sequence[MeasuredMetric],
    *,
    workload_kinds: dict[str, str],
    workloads_run: set[str],
    rehearsal: bool,
) -> ClaimResult:
    mmetric, how = CLAIM_METRICS.get(c.metric, (None, "unknown"))
    cl = _claimed(c)
    if mmetric is None:
        return cl.not_measured(
            f"{c.metric} comes from profiler traces (kernel counts and times per layer), "
            "not from the serving metrics the perf check measures",
            c.candidate,
        )
    if c.workload is not None and c.workload not in workload_kinds:
        return cl.not_measured(f"the claim names workload {c.workload!r}, which the scope does not declare", c.speedup)
    if c.workload is not None and c.workload not in workloads_run:
        return cl.not_measured(f"workload {c.workload!r} was not run in this tier/shard", c.speedup)
    cands = _matching(c, measured, mmetric)
    if not cands:
        dims = ", ".join(f"{k}={v}" for k, v in c.point.items())
        return cl.not_measured(
            f"no measured point matches {dims} for {mmetric}"
            + (f" in workload {c.workload!r}" if c.workload else "")
            + " (the point is not in this plan's tier/shard, or was not measured)",
            c.speedup or c.candidate,
        )
    m = cands[0]
    common = _Match(
        point=m.point,
        workload=m.workload,
        other_matches=[x.point for x in cands[1:]],
        detectable_slowdown=m.detectable_slowdown,
        measured_baseline_gpus=m.baseline_gpus,
        measured_candidate_gpus=m.candidate_gpus,
    )
    if m.lifetime_variance_unmeasured:
        return ClaimResult(
            status="inconclusive",
            reason=(
                f"measured at {m.point}, but its interval [{m.ci_low:.3f}, {m.ci_high:.3f}] covers one engine "
                "lifetime's runs only (no calibration of this point on this host class): lifetime variance "
                "unmeasured, so the run cannot tell" + cl.flag
            ),
            claimed=cl.claimed_speedup if cl.claimed_speedup is not None else c.candidate,
            measured=m.speedup,
            **attrs(m, "ci_low", "ci_high", "confidence"),
            measured_baseline=None,
            **cl.base,
            **common,
        )
    # an absolute figure holds on its own GPU count: a candidate measured on other GPUs is compared per GPU
    cand_gpus = m.candidate_gpus or None
    cg = c.candidate_gpus
    per_gpu_abs = bool(cl.unequal and cg and cand_gpus and cand_gpus != cg)
    if how == "absolute" and not rehearsal and c.candidate is not None and not per_gpu_abs:
        return _judge_absolute(c, cl, m, common, mmetric)
    return _judge_speedup(c, cl, m, common, absolute_claim=how == "absolute", rehearsal=rehearsal, per_gpu=per_gpu_abs)


def _judge_speedup(
    c: Any, cl: _Claimed, m: MeasuredMetric, common: _Match, *, absolute_claim: bool, rehearsal: bool, per_gpu: bool
) -> ClaimResult:
    """The claimed speedup against the measured speedup's interval (an absolute claim compares its ratio)."""
    tolerance = cl.tolerance
    if cl.claimed_speedup is None:
        why = (
            "absolute claims hold on the claim's hardware only and this run is a rehearsal on other hardware"
            if rehearsal
            else "the claim states neither a speedup nor a candidate value"
        )
        return cl.not_measured(why, c.candidate)
    status, bound = interval_status(cl.claimed_speedup, m.ci_low, m.ci_high, tolerance=tolerance)
    why = (
        f"measured speedup {m.speedup:.3f} [{m.ci_low:.3f}, {m.ci_high:.3f}] ({m.confidence:.0%}) at {m.point}"
        f"{' per GPU' if m.normalized else ''}; "
        + _why(status, m.ci_low, m.ci_high, bound, cl.claimed_speedup, tolerance)
    )
    if absolute_claim:
        why += (
            " (the candidate ran on other GPU counts than the published figure, so the ratio is compared per GPU)"
            if per_gpu
            else " (absolute numbers are not comparable on this host, so the claimed ratio is compared)"
        )
    return ClaimResult(
        status=status,
        reason=why + cl.flag,
        claimed=cl.claimed_speedup,
        measured=m.speedup,
        **attrs(m, "ci_low", "ci_high", "confidence"),
        bound=bound,
        measured_baseline=None,
        **cl.base,
        **common,
    )


def _judge_absolute(c: Any, cl: _Claimed, m: MeasuredMetric, common: _Match, mmetric: str) -> ClaimResult:
    """The claimed candidate figure against the range of the candidate's per-run values."""
    assert c.candidate is not None
    tolerance = cl.tolerance
    v = m.candidate_value
    if v is None:
        return cl.not_measured(f"{mmetric} has no candidate value at {m.point}", c.candidate)
    lo, hi = m.candidate_low, m.candidate_high
    measured_at = f"measured candidate {mmetric} {_fmt(v)} (baseline {_fmt(m.baseline_value)}) at {m.point}"
    if lo is None or hi is None:
        bound = c.candidate * (1.0 - tolerance)
        return ClaimResult(
            status="inconclusive",
            reason=f"{measured_at}; no per-run values to judge it by, so it cannot be compared with "
            f"{c.candidate:g} x (1 - {tolerance:g}) = {bound:.3g}" + cl.flag,
            claimed=c.candidate,
            measured=v,
            bound=bound,
            measured_baseline=m.baseline_value,
            **cl.base,
            **common,
        )
    status, bound = interval_status(c.candidate, lo, hi, tolerance=tolerance)
    why = f"{measured_at}, runs [{_fmt(lo)}, {_fmt(hi)}]; " + _why(status, lo, hi, bound, c.candidate, tolerance)
    return ClaimResult(
        status=status,
        reason=why + cl.flag,
        claimed=c.candidate,
        measured=v,
        ci_low=lo,
        ci_high=hi,
        bound=bound,
        measured_baseline=m.baseline_value,
        **cl.base,
        **common,
    )
