"""The speedup summary on the report's first screen: the geometric mean over the config points and the worst
point, each with its interval, and one plot of every point's speedup with its interval.

It reads the perf check's per-point table (``points``, through :func:`fasttrack.report.perf_view.perf_rows`,
so a speedup above 1 means the candidate is better whatever the metric's direction) and summarises the
gated metric (the metric whose interval decides each point; the first metric when no row is gated).

**The geometric mean's interval.** Each end is the geometric mean of the points' interval ends:
``exp(mean(log low_i))`` and ``exp(mean(log high_i))``. Points measured on the same engines are not
independent, and this interval assumes nothing about how they correlate: for intervals symmetric on the log
scale, the mean's standard error is at most the mean of the points' standard errors (however they
correlate), so this interval is at least as wide as the joint one at the points' confidence level. It is
shown only when every point has an interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup

from fasttrack.bundle.manifest import Manifest
from fasttrack.report import fields as F
from fasttrack.report import fmt
from fasttrack.report.charts import drawn, nice_ticks
from fasttrack.report.check_views import PlanPoints, Tables, view_entry
from fasttrack.report.perf_view import perf_rows
from fasttrack.report.svg import El, line, num, svg, text
from fasttrack.report.views import PerfRow, PointSpeedup, SpeedupSummary

#: Points drawn in the plot (the summary uses every point; the performance section lists them all).
MAX_PLOTTED = 400


def geometric_mean(points: Sequence[PointSpeedup]) -> tuple[float, float | None, float | None]:
    """(geometric mean, low, high) of the points' speedups; the interval as the module docstring says (None when
    a point has none)."""
    gm = math.exp(sum(math.log(p.speedup) for p in points) / len(points))
    lows = [p.low for p in points if p.low is not None and p.low > 0]
    highs = [p.high for p in points if p.high is not None and p.high > 0]
    if len(lows) < len(points) or len(highs) < len(points):
        return gm, None, None
    lo = math.exp(sum(math.log(x) for x in lows) / len(points))
    hi = math.exp(sum(math.log(x) for x in highs) / len(points))
    return gm, lo, hi


def speedup_summary(manifest: Manifest, tables: Tables, plan_pts: PlanPoints) -> SpeedupSummary:
    """The summary of the perf check's ``points`` table (see the module docstring)."""
    picked = view_entry(manifest, "perf")
    if picked is None:
        return SpeedupSummary(status="not_run", reason="the bundle has no perf check")
    check, entry = picked
    t = tables.get(check, {}).get("points")
    if t is None or t.error is not None:
        why = fmt.one_line(entry.reason, 400) if entry.verdict.value == "not_run" else "no readable points table"
        return SpeedupSummary(status="not_run" if entry.verdict.value == "not_run" else "no_table", reason=why)
    rows = [r for r in perf_rows(t, plan_pts) if r.speedup is not None and r.speedup > 0]
    gated = [r for r in rows if r.gated]
    metric = gated[0].metric if gated else (rows[0].metric if rows else "")
    use = [r for r in (gated or rows) if r.metric == metric]
    if not use:
        return SpeedupSummary(status="no_table", reason="the perf check's points table holds no speedup")
    use.sort(key=lambda r: (r.group, r.batch or 0, r.context or 0, r.point))
    pts = [PointSpeedup(r.point, r.speedup, r.ci_low, r.ci_high, r.verdict) for r in use]  # type: ignore[arg-type]
    gm, lo, hi = geometric_mean(pts)
    threshold = F.as_float(entry.gate.threshold) if entry.gate is not None and gated else None
    return SpeedupSummary(
        status="shown",
        metric=metric,
        gated=bool(gated),
        points=len(pts),
        geomean=gm,
        geo_low=lo,
        geo_high=hi,
        worst=min(pts, key=lambda p: (p.speedup, p.point)),
        failed=sum(1 for p in pts if p.verdict == "fail"),
        threshold=threshold,
        plot=speedup_plot(use, metric=metric, threshold=threshold, geomean=(gm, lo, hi)),
    )


def speedup_plot(
    rows: Sequence[PerfRow],
    *,
    metric: str,
    threshold: float | None,
    geomean: tuple[float, float | None, float | None] | None = None,
) -> Markup | None:
    """One dot per point (in the table's order) with its interval as a bar, on a log scale; the parity line,
    the gate and the geometric mean's band."""
    rows = drawn(rows)[:MAX_PLOTTED]
    if not rows:
        return None
    vals = [1.0] + [v for r in rows for v in (r.speedup, r.ci_low, r.ci_high) if v is not None and v > 0]
    if threshold is not None and F.drawable(threshold) is not None and threshold > 0:
        vals.append(threshold)
    lo, hi = math.log(min(vals)), math.log(max(vals))
    pad = (hi - lo) * 0.08 or 0.05
    lo, hi = lo - pad, hi + pad
    W, H = 560.0, 210.0
    ml, mr, mt, mb = 50.0, 12.0, 12.0, 34.0
    pw, ph = W - ml - mr, H - mt - mb

    def px(i: int) -> float:
        return ml + (i + 0.5) * pw / len(rows)

    def py(v: float) -> float:
        return mt + ph - (math.log(v) - lo) / (hi - lo) * ph

    root = svg(W, H, label=f"speedup of every config point ({metric}), with intervals", cls="chart speedup-plot")
    grid = El("g", {"class": "grid"})
    for tv in nice_ticks(math.exp(lo), math.exp(hi), 5):
        if tv > 0 and lo <= math.log(tv) <= hi:
            grid.add(line(ml, py(tv), ml + pw, py(tv), cls="gridline"))
            grid.add(text(ml - 6, py(tv) + 4, f"{tv:g}", anchor="end", cls="tick"))
    root.add(grid)
    axes = El("g", {"class": "axes"})
    axes.add(line(ml, mt, ml, mt + ph, cls="axis"), line(ml, mt + ph, ml + pw, mt + ph, cls="axis"))
    axes.add(text(ml + pw / 2, H - 18, f"{len(rows)} config points (the performance table's order)", anchor="middle"))
    axes.add(text(ml + pw / 2, H - 5, "speedup \u00d7 (log scale; above 1: the candidate is better)", anchor="middle"))
    root.add(axes)
    refs = El("g", {"class": "refs"})
    if geomean is not None and geomean[1] is not None and geomean[2] is not None:
        y1, y2 = py(geomean[2]), py(geomean[1])
        refs.add(
            El(
                "rect",
                {"x": num(ml), "y": num(y1), "width": num(pw), "height": num(max(y2 - y1, 1.0)), "class": "geo-band"},
            )
        )
        refs.add(line(ml, py(geomean[0]), ml + pw, py(geomean[0]), cls="geo-line"))
    refs.add(line(ml, py(1.0), ml + pw, py(1.0), cls="parity", dash="4 3"))
    if threshold is not None and threshold > 0 and lo <= math.log(threshold) <= hi:
        refs.add(line(ml, py(threshold), ml + pw, py(threshold), cls="threshold", dash="6 3"))
        refs.add(
            text(ml + pw - 4, py(threshold) + 12, f"gate {threshold:g}", anchor="end", cls="ref-label threshold-label")
        )
    root.add(refs)
    r_dot = 3.5 if len(rows) <= 60 else 2.0
    marks = El("g", {"class": "series s0"})
    for i, r in enumerate(rows):
        cx, s = px(i), float(r.speedup)  # type: ignore[arg-type]
        mark = El("g", {"class": "mark" + (" failed" if r.verdict == "fail" else "")})
        tip = f"{r.point}: {fmt.speedup(s)}" + (
            f" [{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.ci_low is not None and r.ci_high is not None else ""
        )
        mark.add(El("title", None, tip + (f"; {r.verdict}" if r.verdict else "")))
        if r.ci_low is not None and r.ci_high is not None and r.ci_low > 0 and r.ci_high > 0:
            mark.add(line(cx, py(r.ci_low), cx, py(r.ci_high), cls="ci"))
        mark.add(El("circle", {"cx": num(cx), "cy": num(py(s)), "r": num(r_dot), "class": "dot"}))
        if r.verdict == "fail":
            mark.add(
                El(
                    "circle",
                    {"cx": num(cx), "cy": num(py(s)), "r": num(r_dot + 3), "class": "fail-ring", "fill": "none"},
                )
            )
        marks.add(mark)
    root.add(marks)
    return root.markup()
