"""The performance view: per-point speedups with their intervals, per metric, with charts."""

from __future__ import annotations

from typing import Any

from fasttrack.bundle.manifest import Manifest
from fasttrack.report import fields as F
from fasttrack.report import fmt
from fasttrack.report.charts import speedup_chart
from fasttrack.report.check_views import PlanPoints, Tables, view_entry
from fasttrack.report.curves import curve_charts
from fasttrack.report.tableread import LoadedTable
from fasttrack.report.views import PerfCharts, PerfMetricView, PerfRow, PerfView, TailRow

#: Engine groups drawn per metric (the table lists every row).
MAX_CHART_GROUPS = 24


def _ctx_label(c: int | None, full: bool) -> str:
    if c is None:
        return "?"
    s = f"{c // 1024}k" if c >= 1024 and c % 1024 == 0 else str(c)
    return f"full ({s})" if full else s


def _perf_table(tabs: dict[str, LoadedTable]) -> tuple[str, LoadedTable] | None:
    """The per-point table: ``points`` (read through its row model), or, for an older bundle without one, the first
    table whose columns look like one (the legacy path's guessing, :mod:`fasttrack.report.fields`)."""
    if "points" in tabs:
        t = tabs["points"]
        return ("points", t) if t.error is None and t.rows and F.pick(t.columns, F.POINT) else None
    names = sorted(tabs, key=lambda n: (n not in ("perf", "point_gates", "gates"), n))
    for n in names:
        t = tabs[n]
        cols = t.columns
        if (
            t.error is None
            and F.pick(cols, F.POINT)
            and (F.pick(cols, F.SPEEDUP) or F.pick(cols, F.RATIO))
            and F.pick(cols, F.CI_LOW)
            and F.pick(cols, F.CI_HIGH)
        ):
            return n, t
    return None


def burst_by_point(runs: LoadedTable | None) -> dict[str, int]:
    """Burst-delivered requests per point from a ``runs`` table (for points tables that do not carry them)."""
    out: dict[str, int] = {}
    if runs is None or runs.error is not None:
        return out
    for r in runs.rows:
        pid, n = r.get("point"), F.as_int(F.get(r, F.BURST))
        if isinstance(pid, str) and n:
            out[pid] = out.get(pid, 0) + n
    return out


def perf_rows(t: LoadedTable, plan_pts: PlanPoints, *, bursts: dict[str, int] | None = None) -> list[PerfRow]:
    """Normalise a perf table's rows (speedup direction-aware: > 1 means the candidate is better).

    ``bursts`` (point -> burst-delivered requests, from the runs table) fills in rows without a
    ``burst_delivered`` column."""
    out = []
    has_speedup = F.pick(t.columns, F.SPEEDUP) is not None
    for r in t.rows:
        pid = r.get(F.pick(t.columns, F.POINT) or "point")
        if not isinstance(pid, str):
            continue
        pp = plan_pts.get(pid, {})
        metric = F.get(r, F.METRIC)
        metric = fmt.one_line(metric, 80) if isinstance(metric, str) else "metric"
        batch = F.as_int(F.get(r, F.BATCH))
        batch = batch if batch is not None else F.as_int(pp.get("batch"))
        ctx = F.as_int(F.get(r, F.CONTEXT))
        ctx = ctx if ctx is not None else F.as_int(pp.get("context"))
        lo_, hi_ = F.as_float(F.get(r, F.CI_LOW)), F.as_float(F.get(r, F.CI_HIGH))
        if has_speedup:
            s = F.as_float(F.get(r, F.SPEEDUP))
        else:
            s = F.as_float(F.get(r, F.RATIO))
            if F.lower_is_better(metric, F.get(r, F.DIRECTION)) and s:
                s = 1.0 / s
                lo_, hi_ = (1.0 / hi_ if hi_ else None), (1.0 / lo_ if lo_ else None)
        mde = F.as_float(F.get(r, F.MDE))
        group = pp.get("group") if isinstance(pp.get("group"), str) else r.get("group")
        group = group if isinstance(group, str) else ""
        full = pp.get("full_context") is True or r.get("full_context") is True
        direction = F.get(r, F.DIRECTION)
        burst = F.as_int(F.get(r, F.BURST))
        if burst is None:
            burst = (bursts or {}).get(pid, 0)
        out.append(
            PerfRow(
                point=fmt.one_line(pid, 160),
                metric=metric,
                batch=batch,
                context=ctx,
                context_label=_ctx_label(ctx, full),
                group=fmt.one_line(group, 60),
                direction=direction if isinstance(direction, str) else None,
                baseline=F.as_float(F.get(r, F.BASELINE)),
                candidate=F.as_float(F.get(r, F.CANDIDATE)),
                speedup=s,
                ci_low=lo_,
                ci_high=hi_,
                mde=mde,
                verdict=F.row_verdict(r),
                runs=F.as_int(F.get(r, F.RUNS)),
                client_timed=F.client_timed(r, metric),
                burst_delivered=max(0, burst),
            )
        )
    return out


def perf_view(manifest: Manifest, tables: Tables, plan_pts: PlanPoints) -> PerfView:
    picked = view_entry(manifest, "perf")
    if picked is None:
        return PerfView(status="not_run", reason="the bundle has no perf check entry")
    check, entry = picked
    found = _perf_table(tables.get(check, {}))
    if entry.verdict.value == "not_run" and found is None:
        return PerfView(status="not_run", reason=fmt.one_line(entry.reason, 600))
    if found is None:
        names = ", ".join(sorted(tables.get(check, {}))) or "none"
        return PerfView(
            status="no_table",
            reason=f"the perf check wrote no per-point table with a speedup and its interval (tables: {names})",
        )
    name, t = found
    runs_t = tables.get(check, {}).get("runs") if name != "runs" else None
    rows = perf_rows(t, plan_pts, bursts=burst_by_point(runs_t))
    thr = entry.gate.threshold if entry.gate is not None else None
    threshold = F.as_float(thr)
    metrics: dict[str, list[PerfRow]] = {}
    for r in rows:
        metrics.setdefault(r.metric, []).append(r)
    views = []
    for m, rs in metrics.items():
        rs.sort(key=lambda r: (r.group, r.batch or 0, r.context or 0, r.point))
        groups = sorted({r.group for r in rs})
        thr_m = threshold if any(r.verdict for r in rs) else None  # reported, not gated: no gate line
        charts = []
        for g in groups[:MAX_CHART_GROUPS]:
            grs = [r for r in rs if r.group == g]
            charts.append(
                PerfCharts(
                    group=g,
                    batch=speedup_chart(grs, x="batch", metric=m, threshold=thr_m),
                    context=speedup_chart(grs, x="context", metric=m, threshold=thr_m),
                )
            )
        views.append(
            PerfMetricView(metric=m, lower_is_better=F.lower_is_better(m, rs[0].direction), rows=rs, charts=charts)
        )
    reason = fmt.one_line(entry.reason, 600)
    if t.truncated:
        reason += f" (showing the first {len(t.rows)} of {t.total_rows} rows)"
    return PerfView(
        status="shown",
        reason=reason,
        table=name,
        threshold=threshold,
        metrics=views,
        **_curves_and_tails(tables.get(check, {})),
    )


def _curves_and_tails(ctabs: dict[str, LoadedTable]) -> dict[str, Any]:
    """The perf view's interactivity-throughput charts and latency-tails rows (``curves``, ``tails``,
    ``tails_total``), from the check's ``curves``, ``curve_dominance`` and ``tails`` tables (a missing or
    unreadable table: none)."""

    def rows(table: str) -> list[dict[str, Any]]:
        t = ctabs.get(table)
        return t.rows if t is not None and t.error is None else []

    curves = curve_charts(rows("curves"), rows("curve_dominance"))
    tails = tail_view(rows("tails"))
    return {
        "curves": curves,
        "tails": tails[:MAX_TAIL_ROWS],
        "tails_total": len(tails),
    }


#: Rows of the latency-tails table shown (the table file has every one).
MAX_TAIL_ROWS = 240


def _with_ci(v: Any, lo: Any, hi: Any) -> str:
    v, lo, hi = F.as_float(v), F.as_float(lo), F.as_float(hi)
    if v is None:
        return "\u2014"
    s = fmt.number(v)
    if lo is not None and hi is not None:
        s += f" [{fmt.number(lo)}, {fmt.number(hi)}]"
    return s


def tail_view(rows: list[dict[str, Any]]) -> list[TailRow]:
    """The tails table's rows as the report shows them (ms, each side with its interval, the speedup)."""
    out = []
    for r in rows:
        pid, label = r.get("point"), r.get("label")
        if not isinstance(pid, str) or not isinstance(label, str):
            continue
        slo = ""
        bound = F.as_float(r.get("slo_bound"))
        if bound is not None:
            sb, sc = fmt.one_line(r.get("slo_baseline"), 20), fmt.one_line(r.get("slo_candidate"), 20)
            slo = f"\u2264 {fmt.number(bound)} ms: baseline {sb}, candidate {sc}"
        sp = F.as_float(r.get("speedup"))
        lo, hi = F.as_float(r.get("ci_low")), F.as_float(r.get("ci_high"))
        speed = "\u2014"
        if sp is not None:
            speed = fmt.speedup(sp) + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "")
        out.append(
            TailRow(
                point=fmt.one_line(pid, 160),
                label=fmt.one_line(label, 40),
                baseline=_with_ci(r.get("baseline"), r.get("baseline_ci_low"), r.get("baseline_ci_high")),
                candidate=_with_ci(r.get("candidate"), r.get("candidate_ci_low"), r.get("candidate_ci_high")),
                speedup=speed,
                slo=slo,
            )
        )
    return out
