"""The ``tails`` table: p50, p90 and p99 of TTFT, ITL and TPOT per point, each side with its interval.

For every measured (workload, point), for each latency metric below, one row per statistic:
both sides' values (the statistic over the pooled samples of all their runs) with
hierarchical-bootstrap intervals, and the speedup (baseline / candidate: > 1 means the
candidate is faster) with its interval; one set of bootstrap draws serves all of a metric's
statistics and both sides (paired when the runs were interleaved;
:func:`fasttrack.stats.multi_stat_comparison`). With a scope SLO (``gates.perf.slo``), the
rows of its percentile carry the bound and whether each side met it
(:func:`fasttrack.perf.slo.attainment`). These rows are reported, not gated: the gate is the
``points`` table's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fasttrack.perf.analysis import ItemState, seed_for
from fasttrack.perf.slo import attainment
from fasttrack.stats import StatsInputError, multi_stat_comparison

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.scope import ServiceLevel

TAIL_FIELDS: dict[str, str] = {
    "ttft_ms": "TTFT",
    "itl_ms": "ITL",
    "tpot_ms": "TPOT",
    "engine_tpot_ms": "engine TPOT",
}
"""RunMetrics sample fields with tails, and their names."""
TAIL_STATS = ("p50", "p90", "p99")
TAIL_BOOT = 2000
"""Bootstrap replicates per metric (raised to keep 25 beyond each end of a 95% interval)."""
SLO_FIELDS = {"ttft_ms": "ttft_ms", "itl_ms": "itl_ms", "tpot_ms": "tpot_ms"}
"""SLO bound (``ServiceLevel`` attribute) per sample field."""


def _nested(state: ItemState, side: str, field: str) -> list[list[list[float]]]:
    out = []
    for lt in sorted(state.runs[side]):
        runs = [
            [float(x) for x in getattr(r, field) if x is not None and x > 0]
            for r in state.runs[side][lt]
            if getattr(r, field)
        ]
        runs = [r for r in runs if r]
        if runs:
            out.append(runs)
    return out


def tail_rows(state: ItemState, *, confidence: float, slo: "ServiceLevel | None" = None) -> list[dict[str, Any]]:
    """The ``tails`` rows of one item (none for a metric without samples on both sides)."""
    it = state.item
    stats = list(TAIL_STATS)
    slo_stat = f"p{slo.percentile:g}" if slo is not None else None
    if slo_stat and slo_stat not in stats:
        stats.append(slo_stat)
    rows: list[dict[str, Any]] = []
    for field, label in TAIL_FIELDS.items():
        b, c = _nested(state, "baseline", field), _nested(state, "candidate", field)
        if not b or not c:
            continue
        try:
            cmp = multi_stat_comparison(
                b,
                c,
                metric=field,
                statistics=stats,
                direction="lower_is_better",
                confidence=confidence,
                n_boot=TAIL_BOOT,
                seed=seed_for(it.key, f"tails/{field}"),
                paired=state.interleaved,
            )
        except StatsInputError as exc:
            rows.append({"workload": it.workload, "point": it.point, "metric": field, "error": exc.message})
            continue
        bound = getattr(slo, SLO_FIELDS[field]) if slo is not None and field in SLO_FIELDS else None
        for f in cmp.figures:
            row: dict[str, Any] = {
                **it.identity(),
                "metric": field,
                "label": f"{label} {f.statistic}",
                "statistic": f.statistic,
                "unit": "ms",
                "baseline": f.baseline,
                "baseline_ci_low": f.baseline_ci_low,
                "baseline_ci_high": f.baseline_ci_high,
                "candidate": f.candidate,
                "candidate_ci_low": f.candidate_ci_low,
                "candidate_ci_high": f.candidate_ci_high,
                "speedup": f.speedup,
                "ci_low": f.ci_low,
                "ci_high": f.ci_high,
                "confidence": cmp.confidence,
                "baseline_samples": cmp.baseline_samples,
                "candidate_samples": cmp.candidate_samples,
                "paired": cmp.paired,
                "ignores_lifetime_variance": cmp.ignores_lifetime_variance,
                "n_boot": cmp.n_boot,
                "seed": cmp.seed,
                "method": cmp.method,
            }
            if bound is not None and f.statistic == slo_stat:
                row["slo_bound"] = bound
                row["slo_baseline"] = attainment(f.baseline_ci_low, f.baseline_ci_high, bound)
                row["slo_candidate"] = attainment(f.candidate_ci_low, f.candidate_ci_high, bound)
            rows.append(row)
    return rows
