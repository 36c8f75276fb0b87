"""The interactivity-throughput chart of a concurrency sweep: both sides' curves with interval bands.

One inline ``<svg>`` per (workload, engine group) of the perf check's ``curves`` table: x is
output throughput per GPU (per engine on CPU hosts), y is P90 interactivity (tokens/s per
user, the slow tail), one point per concurrency level, each side a line through its levels
in order of concurrency. The band around each line spans the P90 interactivity interval of
every level; the horizontal bar through each point is its throughput interval. A filled
point lies on the side's Pareto frontier, a hollow one is beaten on both axes by another
level of the same side. Everything is drawn through :mod:`fasttrack.report.svg`, which
escapes every text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from fasttrack.report import fields as F
from fasttrack.report import fmt
from fasttrack.report.charts import _tick_label, nice_ticks
from fasttrack.report.svg import El, PlotArea, line, num, polyline, svg, text

SIDES = ("baseline", "candidate")
SIDE_CLASS = {"baseline": "curve-baseline", "candidate": "curve-candidate"}
MAX_CURVES = 12


@dataclass
class CurvePoint:
    side: str
    concurrency: int | None
    x: float
    x_lo: float | None
    x_hi: float | None
    y: float
    y_lo: float | None
    y_hi: float | None
    pareto: bool


@dataclass
class CurveChart:
    workload: str
    group: str
    unit: str
    chart: Markup
    points: list[CurvePoint]
    dominance: str
    """The dominance verdict per level, in words (from the ``curve_dominance`` table)."""


def _points(rows: Sequence[dict[str, Any]]) -> list[CurvePoint]:
    out = []
    for r in rows:
        side = r.get("side")
        x, y = F.drawable(r.get("throughput")), F.drawable(r.get("interactivity_p90"))
        if side not in SIDES or x is None or y is None:
            continue
        out.append(
            CurvePoint(
                side=str(side),
                concurrency=F.as_int(r.get("concurrency")),
                x=x,
                x_lo=F.drawable(r.get("throughput_ci_low")),
                x_hi=F.drawable(r.get("throughput_ci_high")),
                y=y,
                y_lo=F.drawable(r.get("interactivity_p90_ci_low")),
                y_hi=F.drawable(r.get("interactivity_p90_ci_high")),
                pareto=r.get("pareto") is True,
            )
        )
    return out


@dataclass(frozen=True)
class _Frame(PlotArea):
    """The plot area of a chart and its scales (data to SVG coordinates)."""

    x_hi: float
    y_hi: float

    def px(self, v: float) -> float:
        return self.ml + max(0.0, v) / self.x_hi * self.pw

    def py(self, v: float) -> float:
        return self.mt + self.ph - max(0.0, v) / self.y_hi * self.ph


def curve_chart(rows: Sequence[dict[str, Any]], *, title: str, unit: str) -> Markup | None:
    """The chart of one (workload, group), or None without a point on each side."""
    pts = _points(rows)
    if not any(p.side == "baseline" for p in pts) or not any(p.side == "candidate" for p in pts):
        return None
    xs = [v for p in pts for v in (p.x, p.x_lo, p.x_hi) if v is not None]
    ys = [v for p in pts for v in (p.y, p.y_lo, p.y_hi) if v is not None]
    xt, yt = nice_ticks(0.0, max(xs) * 1.05) or [0.0, max(xs)], nice_ticks(0.0, max(ys) * 1.08) or [0.0, max(ys)]
    fr = _Frame(680, 340, 64, 150, 16, 48, x_hi=max(xt[-1], max(xs)), y_hi=max(yt[-1], max(ys)))
    root = svg(
        fr.W,
        fr.H,
        label=f"{title}: P90 interactivity (tokens/s per user) against output throughput ({unit}), baseline and "
        "candidate, one point per concurrency level, with interval bands",
    )
    root.add(*_axes(fr, xt, yt, unit))
    for side in SIDES:
        mine = sorted((p for p in pts if p.side == side), key=lambda p: (p.concurrency or 0, p.x))
        root.add(_side_curve(fr, side, mine, unit))
    root.add(_legend(fr))
    return root.markup()


def _axes(fr: _Frame, xt: Sequence[float], yt: Sequence[float], unit: str) -> tuple[El, El]:
    """The grid with its tick labels, and the two axes with their titles."""
    ml, mt, pw, ph = fr.ml, fr.mt, fr.pw, fr.ph
    grid = El("g", {"class": "grid"})
    for t in yt:
        grid.add(
            line(ml, fr.py(t), ml + pw, fr.py(t), cls="gridline"),
            text(ml - 6, fr.py(t) + 4, _tick_label(t), anchor="end", cls="tick"),
        )
    for t in xt:
        grid.add(text(fr.px(t), mt + ph + 16, _tick_label(t), anchor="middle", cls="tick"))
    axes = El("g", {"class": "axes"})
    axes.add(line(ml, mt, ml, mt + ph, cls="axis"), line(ml, mt + ph, ml + pw, mt + ph, cls="axis"))
    axes.add(
        text(ml + pw / 2, fr.H - 8, f"output throughput ({fmt.one_line(unit, 50)})", anchor="middle", cls="axis-title")
    )
    axes.add(
        text(
            14,
            mt + ph / 2,
            "P90 interactivity (tokens/s/user)",
            anchor="middle",
            cls="axis-title",
            transform=f"rotate(-90 14 {num(mt + ph / 2)})",
        )
    )
    return grid, axes


def _side_curve(fr: _Frame, side: str, mine: Sequence[CurvePoint], unit: str) -> El:
    """One side's band (its P90 intervals), line and marks, levels in order of concurrency."""
    g = El("g", {"class": f"curve {SIDE_CLASS[side]}"})
    band = [p for p in mine if p.y_lo is not None and p.y_hi is not None]
    if len(band) >= 2:
        upper = [(fr.px(p.x), fr.py(p.y_hi)) for p in band]  # type: ignore[arg-type]
        lower = [(fr.px(p.x), fr.py(p.y_lo)) for p in reversed(band)]  # type: ignore[arg-type]
        g.add(
            El(
                "polygon",
                {"points": " ".join(f"{num(a)},{num(b)}" for a, b in upper + lower), "class": "curve-band"},
            )
        )
    if len(mine) >= 2:
        g.add(polyline([(fr.px(p.x), fr.py(p.y)) for p in mine], cls="curve-line"))
    for p in mine:
        g.add(_mark(fr, side, p, unit))
    return g


def _interval(lo: float | None, hi: float | None) -> str:
    return f" [{fmt.number(lo)}, {fmt.number(hi)}]" if lo is not None and hi is not None else ""


def _mark(fr: _Frame, side: str, p: CurvePoint, unit: str) -> El:
    """One level's point with its tooltip, its two interval bars and its concurrency label."""
    mark = El("g", {"class": "curve-mark"})
    tip = (
        f"{side}, concurrency {p.concurrency}: {fmt.number(p.x)} {unit}"
        + _interval(p.x_lo, p.x_hi)
        + f", P90 interactivity {fmt.number(p.y)} tokens/s/user"
        + _interval(p.y_lo, p.y_hi)
        + ("" if p.pareto else "; not on the Pareto frontier")
    )
    mark.add(El("title", None, tip))
    if p.x_lo is not None and p.x_hi is not None:
        mark.add(line(fr.px(p.x_lo), fr.py(p.y), fr.px(p.x_hi), fr.py(p.y), cls="curve-ci"))
    if p.y_lo is not None and p.y_hi is not None:
        mark.add(line(fr.px(p.x), fr.py(p.y_lo), fr.px(p.x), fr.py(p.y_hi), cls="curve-ci"))
    mark.add(
        El(
            "circle",
            {
                "cx": num(fr.px(p.x)),
                "cy": num(fr.py(p.y)),
                "r": "4",
                "class": "curve-dot" + ("" if p.pareto else " dominated"),
            },
        )
    )
    if p.concurrency is not None:
        mark.add(text(fr.px(p.x) + 6, fr.py(p.y) - 6, f"c{p.concurrency}", cls="curve-label"))
    return mark


def _legend(fr: _Frame) -> El:
    leg = El("g", {"class": "legend"})
    lx, mt = fr.W - fr.mr + 14, fr.mt
    for i, side in enumerate(SIDES):
        ly = mt + 12 + i * 20
        leg.add(
            El(
                "rect",
                {
                    "x": num(lx - 4),
                    "y": num(ly - 10),
                    "width": "14",
                    "height": "10",
                    "class": f"curve-band {SIDE_CLASS[side]}",
                },
            ),
            El("circle", {"cx": num(lx + 3), "cy": num(ly - 5), "r": "3", "class": f"curve-dot {SIDE_CLASS[side]}"}),
            text(lx + 16, ly, side, cls="legend-label"),
        )
    leg.add(text(lx - 4, mt + 62, "band: P90 interval", cls="legend-label"))
    leg.add(text(lx - 4, mt + 78, "bar: throughput interval", cls="legend-label"))
    leg.add(text(lx - 4, mt + 94, "hollow: off the frontier", cls="legend-label"))
    leg.add(text(lx - 4, mt + 110, "cN: concurrency N", cls="legend-label"))
    return leg


def curve_charts(curves: Sequence[dict[str, Any]], dominance: Sequence[dict[str, Any]]) -> list[CurveChart]:
    """One chart per (workload, group) of a ``curves`` table."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in curves:
        w, g = r.get("workload"), r.get("group")
        if isinstance(w, str) and isinstance(g, str):
            groups.setdefault((w, g), []).append(r)
    out = []
    for (w, g), rows in sorted(groups.items())[:MAX_CURVES]:
        units = {str(r.get("throughput_unit")) for r in rows if r.get("throughput_unit")}
        unit = units.pop() if len(units) == 1 else "tokens/s"
        title = f"{fmt.one_line(w, 60)} on {fmt.one_line(g, 60)}"
        chart = curve_chart(rows, title=title, unit=unit)
        if chart is None:
            continue
        dom = [
            d
            for d in dominance
            if d.get("workload") == w and isinstance(d.get("point"), str) and d["point"].startswith(g)
        ]
        n_ok = sum(1 for d in dom if d.get("dominates") is True)
        words = (
            f"the candidate's curve dominates the baseline's within the margin at {n_ok} of {len(dom)} level(s)"
            if dom
            else "no dominance verdict recorded"
        )
        out.append(
            CurveChart(
                workload=fmt.one_line(w, 60),
                group=fmt.one_line(g, 60),
                unit=unit,
                chart=chart,
                points=_points(rows),
                dominance=words,
            )
        )
    return out
