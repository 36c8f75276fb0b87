"""Inline SVG charts: speedup with confidence intervals, eval bins, eval items.

No JavaScript and no external resources: each chart is one ``<svg>`` built with
:mod:`fasttrack.report.svg` (which escapes every text). Colours come from CSS classes
in the report's stylesheet, so the print stylesheet can adjust them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from markupsafe import Markup

from fasttrack.report import fields as F
from fasttrack.report import fmt
from fasttrack.report.svg import El, PlotArea, line, num, polyline, svg, text
from fasttrack.report.views import PerfRow

#: Series colours available in the stylesheet (classes s0..s9).
N_COLOURS = 10
MAX_SERIES = 12


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo > 1e15:
        return []  # no scale spans that (a chart only receives drawable values: fields.drawable)
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    start = math.floor(lo / step) * step
    ticks: list[float] = []
    v = start
    while v <= hi + step * 0.5 and len(ticks) < 20:
        if v >= lo - step * 0.5:
            ticks.append(round(v, 10))
        v += step
    return ticks


def _tick_label(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e5 else f"{v:.2e}"


@dataclass(frozen=True)
class _Frame(PlotArea):
    """A speedup chart's plot area (the legend in its right margin) and how values map into it."""

    n_x: int
    lo: float
    hi: float

    def px(self, i: int) -> float:
        return self.ml + (i + 0.5) * self.pw / self.n_x

    def py(self, v: float) -> float:
        return self.mt + self.ph - (v - self.lo) / (self.hi - self.lo) * self.ph


def speedup_chart(
    rows: Sequence[PerfRow],
    *,
    x: str,
    metric: str,
    threshold: float | None,
) -> Markup | None:
    """Speedup (candidate vs baseline) with its interval, one series per other dimension.

    ``x`` is ``"batch"`` or ``"context"``. Returns None when fewer than one point has both an x
    value and a speedup.
    """
    xval: Callable[[PerfRow], int | None] = (lambda r: r.batch) if x == "batch" else (lambda r: r.context)
    usable = [r for r in drawn(rows) if xval(r) is not None]
    if not usable:
        return None
    label_of = _series_labels(usable, x)
    labels = _ordered_series(usable, label_of, x)
    extra = len(labels) - MAX_SERIES
    if extra > 0:
        labels = labels[:MAX_SERIES]
        usable = [r for r in usable if label_of[id(r)] in labels]
    xs = sorted({xval(r) for r in usable})  # type: ignore[type-var]
    x_index = {v: i for i, v in enumerate(xs)}
    lo, hi, ticks = _speedup_range(usable, threshold)
    f = _Frame(680, 300, 58, 190, 16, 48, n_x=len(xs), lo=lo, hi=hi)
    xname = "batch size" if x == "batch" else "context length (tokens)"
    root = svg(f.W, f.H, label=f"{metric}: speedup of candidate over baseline by {xname}, with confidence intervals")
    root.add(_grid(f, ticks))
    root.add(_speedup_axes(f, xs, x, xname))
    root.add(_reference_lines(f, threshold))
    n = len(labels)
    off = min(10.0, f.pw / len(xs) * 0.6 / max(n, 1))
    for si, lab in enumerate(labels):
        g = El("g", {"class": f"series s{si % N_COLOURS}"})
        rs = sorted((r for r in usable if label_of[id(r)] == lab), key=lambda r: x_index[xval(r)])
        dx = (si - (n - 1) / 2) * off
        pts = [(f.px(x_index[xval(r)]) + dx, f.py(r.speedup)) for r in rs]  # type: ignore[arg-type]
        if len(pts) > 1:
            g.add(polyline(pts, cls="series-line"))
        for r, (cx, cy) in zip(rs, pts, strict=False):
            g.add(_speedup_mark(f, r, cx, cy))
        root.add(g)
    root.add(_legend(f, labels, extra))
    return root.markup()


def drawn(rows: Sequence[PerfRow]) -> list[PerfRow]:
    """The rows a speedup chart can place (:func:`fasttrack.report.fields.drawable`), an interval it cannot place
    left out: a huge or non-finite figure is shown in the table as text, never drawn."""
    out = []
    for r in rows:
        if F.drawable(r.speedup) is None or (r.speedup is not None and r.speedup <= 0):
            continue
        if F.drawable(r.ci_low) is None or F.drawable(r.ci_high) is None:
            r = replace(r, ci_low=None, ci_high=None)
        out.append(r)
    return out


def _series_labels(usable: list[PerfRow], x: str) -> dict[int, str]:
    """Each row's series (``id(row) -> label``): the dimension that is not on the x axis, and the group when there
    are several."""
    groups = sorted({r.group for r in usable})

    def series_of(r: PerfRow) -> str:
        other = r.context_label if x == "batch" else (f"batch {r.batch}" if r.batch is not None else "batch ?")
        other = f"ctx {other}" if x == "batch" else other
        return f"{r.group} \u00b7 {other}" if len(groups) > 1 else other

    return {id(r): series_of(r) for r in usable}


def _ordered_series(usable: list[PerfRow], label_of: dict[int, str], x: str) -> list[str]:
    """The series labels by group, then by the other dimension."""
    first: dict[str, PerfRow] = {}
    for r in usable:
        first.setdefault(label_of[id(r)], r)

    def sort_key(label: str) -> tuple:
        r = first[label]
        return (r.group, (r.context or 0) if x == "batch" else (r.batch or 0), label)

    return sorted(first, key=sort_key)


def _speedup_range(usable: list[PerfRow], threshold: float | None) -> tuple[float, float, list[float]]:
    """The y axis: every speedup, interval end, parity and the gate, padded; and its ticks."""
    vals: list[float] = [1.0]
    for r in usable:
        vals.append(r.speedup)  # type: ignore[arg-type]
        vals.extend(v for v in (r.ci_low, r.ci_high) if v is not None)
    if threshold is not None:
        vals.append(threshold)
    lo, hi = min(vals), max(vals)
    pad = (hi - lo) * 0.08 or 0.05
    lo, hi = lo - pad, hi + pad
    ticks = nice_ticks(lo, hi) or [lo, hi]
    return min(lo, ticks[0]), max(hi, ticks[-1]), ticks


def _grid(f: _Frame, ticks: list[float]) -> El:
    grid = El("g", {"class": "grid"})
    for t in ticks:
        grid.add(line(f.ml, f.py(t), f.ml + f.pw, f.py(t), cls="gridline"))
        grid.add(text(f.ml - 6, f.py(t) + 4, _tick_label(t), anchor="end", cls="tick"))
    return grid


def _speedup_axes(f: _Frame, xs: list[int | None], x: str, xname: str) -> El:
    ml, mt, pw, ph = f.ml, f.mt, f.pw, f.ph
    axes = El("g", {"class": "axes"})
    axes.add(line(ml, mt, ml, mt + ph, cls="axis"), line(ml, mt + ph, ml + pw, mt + ph, cls="axis"))
    for i, xv in enumerate(xs):
        axes.add(line(f.px(i), mt + ph, f.px(i), mt + ph + 4, cls="axis"))
        lab = str(xv) if x == "batch" else _ctx(xv)
        axes.add(text(f.px(i), mt + ph + 17, lab, anchor="middle", cls="tick"))
    axes.add(text(ml + pw / 2, f.H - 8, xname, anchor="middle", cls="axis-title"))
    axes.add(
        text(
            14,
            mt + ph / 2,
            "speedup (\u00d7, >1 = candidate better)",
            anchor="middle",
            cls="axis-title",
            transform=f"rotate(-90 14 {num(mt + ph / 2)})",
        )
    )
    return axes


def _reference_lines(f: _Frame, threshold: float | None) -> El:
    """Parity, and the gate where it lies inside the y range."""
    ml, pw, py = f.ml, f.pw, f.py
    ref = El("g", {"class": "refs"})
    ref.add(line(ml, py(1.0), ml + pw, py(1.0), cls="parity", dash="4 3"))
    ref.add(text(ml + pw - 4, py(1.0) - 4, "parity 1.0", anchor="end", cls="ref-label"))
    if threshold is not None and f.lo <= threshold <= f.hi:
        ref.add(line(ml, py(threshold), ml + pw, py(threshold), cls="threshold", dash="6 3"))
        ref.add(
            text(ml + 4, py(threshold) + 12, f"gate {threshold:g}", anchor="start", cls="ref-label threshold-label")
        )
    return ref


def _speedup_mark(f: _Frame, r: PerfRow, cx: float, cy: float) -> El:
    """One point: its dot, its interval, a ring when it fails, and a tooltip."""
    mark = El("g", {"class": "mark" + (" failed" if r.verdict == "fail" else "")})
    tip = (
        f"{r.point}: speedup {fmt.speedup(r.speedup)}"
        + (f" [{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.ci_low is not None and r.ci_high is not None else "")
        + (f"; verdict {r.verdict}" if r.verdict else "")
    )
    mark.add(El("title", None, tip))
    if r.ci_low is not None and r.ci_high is not None:
        mark.add(line(cx, f.py(r.ci_low), cx, f.py(r.ci_high), cls="ci"))
        mark.add(line(cx - 3, f.py(r.ci_low), cx + 3, f.py(r.ci_low), cls="ci"))
        mark.add(line(cx - 3, f.py(r.ci_high), cx + 3, f.py(r.ci_high), cls="ci"))
    mark.add(El("circle", {"cx": num(cx), "cy": num(cy), "r": "4", "class": "dot"}))
    if r.verdict == "fail":
        mark.add(El("circle", {"cx": num(cx), "cy": num(cy), "r": "8", "class": "fail-ring", "fill": "none"}))
    return mark


def _legend(f: _Frame, labels: list[str], extra: int) -> El:
    leg = El("g", {"class": "legend"})
    lx = f.W - f.mr + 14
    for si, lab in enumerate(labels):
        ly = f.mt + 10 + si * 18
        leg.add(El("circle", {"cx": num(lx), "cy": num(ly - 4), "r": "4", "class": f"dot s{si % N_COLOURS}"}))
        leg.add(text(lx + 10, ly, fmt.one_line(lab, 26), cls="legend-label"))
    if extra > 0:
        leg.add(text(lx, f.mt + 10 + len(labels) * 18, f"+{extra} more series (see table)", cls="legend-label"))
    return leg


def _ctx(v: int | None) -> str:
    if v is None:
        return "?"
    return f"{v // 1024}k" if v >= 1024 and v % 1024 == 0 else str(v)


def bins_chart(
    bins: Sequence[tuple[str, float | None, float | None]],
    *,
    title: str,
    ymax: float | None = None,
    xlabel: str = "bin",
) -> Markup | None:
    """Grouped bars, baseline against candidate, one group per bin: ``(bin, baseline, candidate)`` (a value a chart
    cannot place is left out: :func:`fasttrack.report.fields.drawable`)."""
    bins = [(n, F.drawable(b), F.drawable(c)) for n, b, c in bins]
    bins = [b for b in bins if b[1] is not None or b[2] is not None][:40]
    if not bins:
        return None
    top = ymax if ymax is not None else max(max(v for v in (b[1], b[2]) if v is not None) for b in bins)
    top = top if top and top > 0 else 1.0
    ticks = nice_ticks(0.0, top, 4) or [0.0, top]
    top = max(top, ticks[-1])
    W, H = 680, 260
    ml, mr, mt, mb = 52, 130, 16, 56
    pw, ph = W - ml - mr, H - mt - mb

    def py(v: float) -> float:
        return mt + ph - v / top * ph

    root = svg(W, H, label=f"{title}: baseline and candidate score per bin")
    g = El("g", {"class": "grid"})
    for t in ticks:
        g.add(
            line(ml, py(t), ml + pw, py(t), cls="gridline"),
            text(ml - 6, py(t) + 4, _tick_label(t), anchor="end", cls="tick"),
        )
    root.add(g)
    root.add(line(ml, mt + ph, ml + pw, mt + ph, cls="axis"))
    slot = pw / len(bins)
    bw = min(26.0, slot * 0.38)
    for i, (name, b, c) in enumerate(bins):
        cx = ml + (i + 0.5) * slot
        grp = El("g", {"class": "bar-group"})
        grp.add(El("title", None, f"bin {name}: baseline {fmt.number(b)}, candidate {fmt.number(c)}"))
        for j, (v, cls) in enumerate(((b, "bar-baseline"), (c, "bar-candidate"))):
            if v is None:
                continue
            x0 = cx - bw + j * bw
            grp.add(
                El(
                    "rect",
                    {
                        "x": num(x0),
                        "y": num(py(max(v, 0.0))),
                        "width": num(bw - 1),
                        "height": num(max(0.0, ph - (py(max(v, 0.0)) - mt))),
                        "class": cls,
                    },
                )
            )
        grp.add(text(cx, mt + ph + 16, fmt.one_line(name, 14), anchor="middle", cls="tick"))
        root.add(grp)
    lx = W - mr + 16
    root.add(
        El("rect", {"x": num(lx), "y": num(mt + 2), "width": "12", "height": "12", "class": "bar-baseline"}),
        text(lx + 18, mt + 12, "baseline", cls="legend-label"),
        El("rect", {"x": num(lx), "y": num(mt + 22), "width": "12", "height": "12", "class": "bar-candidate"}),
        text(lx + 18, mt + 32, "candidate", cls="legend-label"),
    )
    root.add(text(ml + pw / 2, H - 8, fmt.one_line(xlabel, 40), anchor="middle", cls="axis-title"))
    return root.markup()


def items_chart(
    items: Sequence[tuple[str, float | None, float | None]], *, title: str, limit: int = 120
) -> Markup | None:
    """A strip of items (problems/samples): two cells each, baseline above candidate, shaded by
    score in [0, 1]; items where the sides differ are outlined."""
    items = list(items)[:limit]
    if not items:
        return None
    per_row = 40
    cell = 14
    rows = math.ceil(len(items) / per_row)
    ml, mt = 78, 14
    W = ml + per_row * (cell + 2) + 10
    H = mt + rows * (2 * cell + 18) + 24
    root = svg(W, H, label=f"{title}: score per item, baseline (top) and candidate (bottom)")
    for r in range(rows):
        y0 = mt + r * (2 * cell + 18)
        root.add(
            text(ml - 6, y0 + cell - 3, "baseline", anchor="end", cls="tick"),
            text(ml - 6, y0 + 2 * cell - 1, "candidate", anchor="end", cls="tick"),
        )
    for i, (name, b, c) in enumerate(items):
        r, k = divmod(i, per_row)
        x0 = ml + k * (cell + 2)
        y0 = mt + r * (2 * cell + 18)
        differs = b is not None and c is not None and abs(b - c) > 1e-12
        grp = El("g", {"class": "item" + (" discordant" if differs else "")})
        grp.add(El("title", None, f"{name}: baseline {fmt.number(b)}, candidate {fmt.number(c)}"))
        for j, v in enumerate((b, c)):
            level = "na" if v is None else str(min(4, max(0, int(round(max(0.0, min(1.0, v)) * 4)))))
            grp.add(
                El(
                    "rect",
                    {
                        "x": num(x0),
                        "y": num(y0 + j * cell),
                        "width": num(cell - 1),
                        "height": num(cell - 1),
                        "class": f"score score-{level}",
                    },
                )
            )
        if differs:
            grp.add(
                El(
                    "rect",
                    {
                        "x": num(x0 - 1),
                        "y": num(y0 - 1),
                        "width": num(cell + 1),
                        "height": num(2 * cell + 1),
                        "class": "discordant-box",
                        "fill": "none",
                    },
                )
            )
        root.add(grp)
    root.add(text(ml, H - 6, "shade: score 0 (light) to 1 (dark); outlined: the sides differ", cls="legend-label"))
    return root.markup()
