"""Interactivity-throughput curves of a ``concurrency_sweep`` workload (the ``curves`` table).

A concurrency sweep measures each side at several concurrency levels (users sending requests
back to back). Serving engineers read it as a curve: output throughput per GPU (x) against
interactivity, the tokens per second one user sees (y), one point per level. Each level gives
per side, with hierarchical-bootstrap intervals (:func:`fasttrack.stats.multi_stat_comparison`,
paired when the runs were interleaved):

* output throughput: mean over runs of each run's output tokens / wall time, per GPU of one
  engine (per engine on CPU hosts, where the plan counts no GPUs);
* interactivity p50 and p90: ``1000 / ITL p50`` and ``1000 / ITL p90`` (p90 is the slow tail:
  90% of inter-token gaps were at least this fast), the interval inverted from ITL's;
* TTFT and ITL p50, p90, p99.

``pareto`` marks the levels no other level of the same side beats on both axes (the side's
Pareto frontier). **Dominance** (``gates.perf.curve_dominance``): the candidate's curve
dominates the baseline's within the margin when, at every measured level, the lower bounds of
both speedups, output throughput per GPU and P90 interactivity (the ``points`` rows), reach
``1 - noise_margin``; :func:`dominance` judges one level.
"""

from __future__ import annotations

from typing import Any

from fasttrack.perf.analysis import ItemState, seed_for
from fasttrack.stats import StatsInputError, multi_stat_comparison

CURVE_KIND = "concurrency_sweep"
CURVE_METRICS = ("output_throughput", "p50_interactivity", "p90_interactivity")
"""Metrics every curve level is compared on (``points`` rows), whatever ``gates.perf.metrics`` lists."""
DOMINANCE_METRICS = ("output_throughput", "p90_interactivity")
CURVE_BOOT = 2000
SIDES = ("baseline", "candidate")


def _nested(state: ItemState, side: str, field: str, per: float = 1.0) -> list[list[Any]]:
    out = []
    for lt in sorted(state.runs[side]):
        runs: list[Any] = []
        for r in state.runs[side][lt]:
            v = getattr(r, field)
            if isinstance(v, list):
                xs = [float(x) for x in v if x is not None and x > 0]
                if xs:
                    runs.append(xs)
            elif v is not None and v > 0:
                runs.append(float(v) / per)
        if runs:
            out.append(runs)
    return out


def _inverse(v: float) -> float:
    return 1000.0 / v if v > 0 else float("nan")


def curve_rows(state: ItemState, *, confidence: float) -> list[dict[str, Any]]:
    """The two rows (baseline, candidate) of one concurrency level, or none without samples on both sides."""
    it = state.item
    gpus = {sd: int(state.gpus.get(sd) or 0) for sd in SIDES}
    base: dict[str, dict[str, Any]] = {
        sd: {
            "workload": it.workload,
            "group": it.group,
            "point": it.point,
            "concurrency": it.batch,
            "side": sd,
            "gpus": gpus[sd],
            "throughput_unit": "tokens/s/GPU" if gpus[sd] else "tokens/s per engine (no GPU count on this host)",
            "runs": state.n_runs(sd),
            "lifetimes": len(state.lifetimes(sd)),
            "confidence": confidence,
            "paired": state.interleaved,
        }
        for sd in SIDES
    }
    specs: list[tuple[str, list[str], str]] = [
        ("output_throughput", ["mean"], "higher_is_better"),
        ("itl_ms", ["p50", "p90", "p99"], "lower_is_better"),
        ("ttft_ms", ["p50", "p90", "p99"], "lower_is_better"),
    ]
    for field, stats, direction in specs:
        per = {sd: float(gpus[sd] or 1) for sd in SIDES} if field == "output_throughput" else {sd: 1.0 for sd in SIDES}
        b, c = _nested(state, "baseline", field, per["baseline"]), _nested(state, "candidate", field, per["candidate"])
        if not b or not c:
            if field != "ttft_ms":
                return []  # no curve point without throughput and ITL on both sides
            continue
        try:
            cmp = multi_stat_comparison(
                b,
                c,
                metric=field,
                statistics=stats,
                direction=direction,  # type: ignore[arg-type]
                confidence=confidence,
                n_boot=CURVE_BOOT,
                seed=seed_for(it.key, f"curve/{field}"),
                paired=state.interleaved,
            )
        except StatsInputError:
            return []
        for f in cmp.figures:
            for sd in SIDES:
                v, lo, hi = (
                    (f.baseline, f.baseline_ci_low, f.baseline_ci_high)
                    if sd == "baseline"
                    else (f.candidate, f.candidate_ci_low, f.candidate_ci_high)
                )
                row = base[sd]
                if field == "output_throughput":
                    row.update(throughput=v, throughput_ci_low=lo, throughput_ci_high=hi)
                elif field == "itl_ms":
                    row.update({f"itl_{f.statistic}_ms": v, f"itl_{f.statistic}_ci": [lo, hi]})
                    if f.statistic in ("p50", "p90"):
                        # interactivity = 1000 / ITL: the interval's ends swap
                        row.update(
                            {
                                f"interactivity_{f.statistic}": _inverse(v),
                                f"interactivity_{f.statistic}_ci_low": _inverse(hi),
                                f"interactivity_{f.statistic}_ci_high": _inverse(lo),
                            }
                        )
                else:
                    row.update({f"ttft_{f.statistic}_ms": v, f"ttft_{f.statistic}_ci": [lo, hi]})
        for sd in SIDES:
            base[sd].setdefault("n_boot", cmp.n_boot)
    return [base[sd] for sd in SIDES]


def mark_pareto(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set ``pareto`` on each row: no other level of the same (workload, group, side) has at least its
    throughput and its P90 interactivity, and more of one."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["workload"], r["group"], r["side"]), []).append(r)
    for rs in groups.values():
        for r in rs:
            x, y = r.get("throughput"), r.get("interactivity_p90")
            r["pareto"] = (
                x is not None
                and y is not None
                and not any(
                    o is not r
                    and o.get("throughput") is not None
                    and o.get("interactivity_p90") is not None
                    and o["throughput"] >= x
                    and o["interactivity_p90"] >= y
                    and (o["throughput"] > x or o["interactivity_p90"] > y)
                    for o in rs
                )
            )
    return rows


def dominance(rows: list[dict[str, Any]], *, noise_margin: float) -> dict[str, Any] | None:
    """Whether the candidate dominates the baseline within the margin at one level, from that level's
    ``points`` rows: the nominal lower bound of each of :data:`DOMINANCE_METRICS` (per GPU when the sides'
    GPU counts differ) against ``1 - noise_margin``. None when a metric has no interval."""
    thr = 1.0 - noise_margin
    by = {r.get("metric_name"): r for r in rows}
    parts = {}
    for m in DOMINANCE_METRICS:
        r = by.get(m)
        if r is None or r.get("nominal_ci_low") is None:
            return None
        parts[m] = (float(r["speedup"]), float(r["nominal_ci_low"]), float(r["nominal_ci_high"]))
    ok = all(lo >= thr for _, lo, _ in parts.values())
    words = ", ".join(f"{m} {s:.3f} [{lo:.3f}, {hi:.3f}]" for m, (s, lo, hi) in parts.items())
    return {
        "dominates": ok,
        "threshold": thr,
        "figures": {m: {"speedup": s, "ci_low": lo, "ci_high": hi} for m, (s, lo, hi) in parts.items()},
        "statement": (
            f"the candidate's curve dominates within the margin here: {words}, every lower bound >= {thr:.3f}"
            if ok
            else f"the candidate's curve does not dominate here: {words}; a lower bound is below {thr:.3f}"
        ),
    }
