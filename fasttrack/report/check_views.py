"""Per-check views of a bundle: check cards, the gate table, the point x check heatmap,
path coverage and claims. Each reads the manifest and the loaded tables, nothing else."""

from __future__ import annotations

from typing import Any

from fasttrack.bundle.manifest import CheckEntry, Manifest
from fasttrack.report import fields as F
from fasttrack.report import fmt
from fasttrack.report.links import LinkPolicy
from fasttrack.report.tableread import LoadedTable
from fasttrack.report.views import (
    ArtifactView,
    CheckView,
    ClaimView,
    CoverageView,
    GateRow,
    HeatCell,
    HeatmapView,
    TableView,
)
from fasttrack.results import DEFAULT_CLAIM_TOLERANCE, claim_verdict

#: Titles of the shipped checks, for bundles written before checks recorded their own title.
CHECK_TITLES = {
    "isolation": "Isolation and PR head",
    "kernels": "Kernels",
    "equivalence": "Output equivalence",
    "features": "Serving features",
    "coverage": "Path coverage",
    "evals": "Model evaluations",
    "perf": "Performance",
}
#: Rows of one table shown in the report (the file itself is linked).
TABLE_ROWS_SHOWN = 50
MAX_COLUMNS_SHOWN = 30
MAX_FAILURES_SHOWN = 100
MAX_HEATMAP_POINTS = 300

#: Tables of all checks of one bundle: ``{check: {table name: table}}``.
Tables = dict[str, dict[str, LoadedTable]]
#: Config points of the bundle's plan by id.
PlanPoints = dict[str, dict[str, Any]]


def view_entry(manifest: Manifest, view: str) -> tuple[str, CheckEntry] | None:
    """The check the report renders with the named ``view`` (``perf``, ``evals``, ``coverage``):
    the first whose entry records that view, or, in a bundle written before checks recorded
    their view, the check of that name."""
    for name in manifest.check_order:
        if manifest.checks[name].view == view:
            return name, manifest.checks[name]
    entry = manifest.checks.get(view)
    if entry is not None and entry.view is None:
        return view, entry
    return None


def table_view(
    check: str, name: str, t: LoadedTable, *, links: LinkPolicy, rows_shown: int = TABLE_ROWS_SHOWN
) -> TableView:
    cols = t.columns[:MAX_COLUMNS_SHOWN]
    rows = [[fmt.value(r.get(c)) for c in cols] for r in t.rows[:rows_shown]]
    return TableView(
        check=check,
        name=name,
        path=t.path,
        columns=[fmt.one_line(c, 80) for c in cols],
        rows=rows,
        total_rows=t.total_rows,
        href=links.href(t.path),
        error=t.error,
        note=t.note,
    )


def check_view(name: str, e: CheckEntry, tabs: dict[str, LoadedTable], links: LinkPolicy) -> CheckView:
    gate = gate_row(name, e)
    arts = []
    for a in e.artifacts[:200]:
        href = links.href(a)
        arts.append(
            ArtifactView(
                name=fmt.one_line(a, 400), href=href, why_not="" if href else links.why_not(a), size=None, sha256=""
            )
        )
    return CheckView(
        name=fmt.one_line(name, 128),
        title=fmt.one_line(e.title, 200) if e.title else CHECK_TITLES.get(name, name),
        verdict=e.verdict.value,
        required=e.required,
        reason=fmt.one_line(e.reason),
        gate=gate,
        summary=fmt.flatten(e.summary),
        failures=[fmt.one_line(f, 1000) for f in e.failures[:MAX_FAILURES_SHOWN]],
        failures_total=len(e.failures),
        tables=[table_view(name, tn, t, links=links) for tn, t in tabs.items()],
        artifacts=arts,
    )


def gate_row(name: str, e: CheckEntry) -> GateRow:
    g = e.gate
    return GateRow(
        check=fmt.one_line(name, 128),
        verdict=e.verdict.value,
        required=e.required,
        statistic=fmt.one_line(g.statistic, 400) if g else "",
        threshold=fmt.value(g.threshold, 200) if g and g.threshold is not None else "",
        rule=fmt.one_line(g.rule, 600) if g else "",
        reason=fmt.one_line(e.reason, 1000),
    )


def point_desc(p: dict[str, Any]) -> str:
    bits = []
    for key, lab in (("tp", "TP"), ("dcp", "DCP")):
        if F.as_int(p.get(key)) is not None:
            bits.append(f"{lab}{F.as_int(p.get(key))}")
    if isinstance(p.get("spec"), str) and p["spec"] != "none":
        bits.append(fmt.one_line(p["spec"], 40))
    if F.as_int(p.get("batch")) is not None:
        bits.append(f"batch {F.as_int(p.get('batch'))}")
    if F.as_int(p.get("context")) is not None:
        bits.append(f"ctx {F.as_int(p.get('context'))}" + (" (full)" if p.get("full_context") is True else ""))
    return " \u00b7 ".join(bits)


def heatmap_view(manifest: Manifest, tables: Tables, plan_pts: PlanPoints) -> HeatmapView:
    points: list[str] = list(plan_pts)
    seen = set(points)
    agg: dict[str, dict[str, list[str | None]]] = {}
    for check, tabs in tables.items():
        for t in tabs.values():
            pc = F.pick(t.columns, F.POINT)
            if pc is None:
                continue
            for r in t.rows:
                pid = r.get(pc)
                if not isinstance(pid, str) or not pid:
                    continue
                pid = fmt.one_line(pid, 160)
                if pid not in seen and len(points) < MAX_HEATMAP_POINTS:
                    points.append(pid)
                    seen.add(pid)
                agg.setdefault(pid, {}).setdefault(check, []).append(F.row_verdict(r))
    points = points[:MAX_HEATMAP_POINTS]
    checks = manifest.check_order
    cells: dict[str, dict[str, HeatCell]] = {}
    for pid in points:
        cells[pid] = {}
        for check in checks:
            entry = manifest.checks[check]
            vs = agg.get(pid, {}).get(check)
            if entry.verdict.value == "not_run":
                cells[pid][check] = HeatCell(
                    "not_run", "\u2013", f"{check}: not run ({fmt.one_line(entry.reason, 200)})"
                )
            elif not vs:
                cells[pid][check] = HeatCell("none", "", f"{check}: no rows for this point")
            else:
                fails = sum(1 for v in vs if v == "fail")
                passes = sum(1 for v in vs if v == "pass")
                if fails:
                    cells[pid][check] = HeatCell("fail", "\u2717", f"{check}: {fails} of {len(vs)} rows fail")
                elif passes:
                    cells[pid][check] = HeatCell("pass", "\u2713", f"{check}: {passes} of {len(vs)} rows pass")
                else:
                    cells[pid][check] = HeatCell("measured", "\u2022", f"{check}: {len(vs)} rows, no per-row verdict")
    info = {pid: point_desc(plan_pts[pid]) for pid in points if pid in plan_pts}
    return HeatmapView(points=points, checks=checks, cells=cells, point_info=info)


def coverage_view(
    manifest: Manifest,
    tables: Tables,
    plan_pts: PlanPoints,
    links: LinkPolicy,
) -> CoverageView:
    found = view_entry(manifest, "coverage")
    if found is None:
        return CoverageView(status="not_run", reason="the bundle has no coverage check entry")
    check, entry = found
    tabs = tables.get(check, {})
    if entry.verdict.value == "not_run" and not tabs:
        return CoverageView(status="not_run", reason=fmt.one_line(entry.reason, 600))
    main = None
    for name in sorted(tabs, key=lambda n: (n not in ("coverage", "points", "evidence"), n)):
        if F.pick(tabs[name].columns, F.POINT):
            main = (name, tabs[name])
            break
    view = CoverageView(status="shown", reason=fmt.one_line(entry.reason, 600))
    if main is None:
        view.gaps = [fmt.one_line(f, 400) for f in entry.failures[:MAX_FAILURES_SHOWN]]
        return view
    name, t = main
    view.table = table_view(check, name, t, links=links, rows_shown=200)
    pc = F.pick(t.columns, F.POINT) or "point"
    per_point: dict[str, list[str | None]] = {}
    for r in t.rows:
        pid = r.get(pc)
        if isinstance(pid, str) and r.get("in_plan") is not False:
            per_point.setdefault(pid, []).append(F.row_verdict(r))
    gaps = []
    for pid, vs in per_point.items():
        if any(v == "fail" for v in vs):
            gaps.append(f"{fmt.one_line(pid, 160)}: path evidence fails the gate")
        elif vs and all(v == "not_run" for v in vs):
            gaps.append(f"{fmt.one_line(pid, 160)}: path evidence missing")
    for pid in plan_pts:
        if pid not in per_point:
            gaps.append(f"{fmt.one_line(pid, 160)}: no path evidence")
    covered = sum(
        1
        for pid, vs in per_point.items()
        if vs and all(v in ("pass", None) for v in vs) and any(v == "pass" for v in vs)
    )
    view.gaps = gaps[:MAX_FAILURES_SHOWN]
    view.covered = covered
    view.total = len(set(plan_pts) | set(per_point))
    return view


def _num(v: Any) -> str:
    x = F.as_float(v)
    return f"{x:.4g}" if x is not None else ""


#: Recorded claim statuses, as the rule names them (older bundles said confirmed / contradicted / not_confirmed).
_CLAIM_WORDS = {
    "supported": "supported",
    "confirmed": "supported",
    "pass": "supported",
    "passed": "supported",
    "true": "supported",
    "refuted": "refuted",
    "contradicted": "refuted",
    "not_confirmed": "refuted",
    "fail": "refuted",
    "failed": "refuted",
    "false": "refuted",
    "inconclusive": "inconclusive",
    "undecided": "inconclusive",
}


def _claim_tolerances(scope_obj: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    claims = scope_obj.get("claims")
    for c in claims if isinstance(claims, list) else []:
        if isinstance(c, dict) and isinstance(c.get("id"), str):
            tol = F.as_float(c.get("tolerance"))
            out[c["id"]] = tol if tol is not None and 0 <= tol < 1 else DEFAULT_CLAIM_TOLERANCE
    return out


def _per_gpu(r: dict[str, Any]) -> str:
    """ "not like-for-like" with both per-GPU figures, for a claim across unequal GPU counts ("" otherwise)."""
    if r.get("like_for_like") is not False:
        return ""
    bg, cg = F.as_int(r.get("baseline_gpus")), F.as_int(r.get("candidate_gpus"))
    cb, cc = F.as_float(r.get("claimed_baseline_per_gpu")), F.as_float(r.get("claimed_candidate_per_gpu"))
    sp = F.as_float(r.get("claimed_per_gpu_speedup"))
    out = "not like-for-like"
    if bg and cg:
        out += f" ({cg} candidate GPUs vs {bg} baseline)"
    if cc is not None and cb is not None:
        out += f"; per GPU: candidate {fmt.number(cc)}, baseline {fmt.number(cb)}"
    if sp is not None:
        out += f" ({sp:.3g}x per GPU)"
    return out


def claims_view(manifest: Manifest, tables: Tables, scope_obj: dict[str, Any]) -> tuple[list[ClaimView], str]:
    """The claims with what the data say about them: every claim with a claimed figure and an interval is judged
    here by :func:`fasttrack.results.claim_verdict` at its tolerance (the claims table's, else the recorded
    scope's, else the default), so a bundle written by an older rule (judged against the noise margin) reads
    as the data say; where that differs from the recorded status, the detail says so."""
    tolerances = _claim_tolerances(scope_obj)
    for check, tabs in tables.items():
        t = tabs.get("claims")
        if t is None or t.error:
            continue
        out = []
        for r in t.rows[:500]:
            cid = F.get(r, F.CLAIM_ID)
            status = F.get(r, F.CLAIM_STATUS)
            recorded = str(status).strip().lower().replace(" ", "_").replace("-", "_") if status is not None else ""
            s = _CLAIM_WORDS.get(recorded, "not_measured")
            parts = []
            for k in ("point", "detail", "reason"):
                if r.get(k) is not None:
                    parts.append(f"{k} {fmt.value(r.get(k), 200)}")
            lo, hi = F.as_float(r.get("ci_low")), F.as_float(r.get("ci_high"))
            claimed = F.as_float(r.get("claimed"))
            tol = F.as_float(r.get("tolerance"))
            if tol is None or not 0 <= tol < 1:
                tol = tolerances.get(str(cid), DEFAULT_CLAIM_TOLERANCE)
            bound = F.as_float(r.get("bound"))
            if claimed is not None and lo is not None and hi is not None:
                s, bound = claim_verdict(claimed, lo, hi, tolerance=tol)
                if recorded and _CLAIM_WORDS.get(recorded, recorded) != s:
                    parts.insert(
                        0,
                        f"the bundle recorded {fmt.one_line(recorded, 40)} (an older rule judged claims against the "
                        f"perf gate's noise margin); the interval against {claimed:.4g} x (1 - {tol:g}) says {s}",
                    )
            out.append(
                ClaimView(
                    id=fmt.one_line(cid, 120),
                    text=fmt.one_line(r.get("text"), 600),
                    status=s,
                    detail="; ".join(parts),
                    claimed=_num(r.get("claimed")),
                    measured=_num(r.get("measured")),
                    interval=f"[{lo:.4g}, {hi:.4g}]" if lo is not None and hi is not None else "",
                    bound=_num(bound),
                    tolerance=f"{tol:g}",
                    per_gpu=_per_gpu(r),
                )
            )
        return out, f"from results/{check}/claims.parquet"
    claims = scope_obj.get("claims")
    out = []
    if isinstance(claims, list):
        for c in claims[:200]:
            if isinstance(c, dict):
                cid = c.get("id") if isinstance(c.get("id"), str) else "?"
                txt = c.get("text") if isinstance(c.get("text"), str) else ""
                out.append(
                    ClaimView(
                        id=fmt.one_line(cid, 120),
                        text=fmt.one_line(txt, 600),
                        status="not_measured",
                        detail="no claims table in the bundle",
                    )
                )
    note = (
        "the scope's claims; the bundle holds no claims table, so none was measured"
        if out
        else "the scope declares no claims"
    )
    return out, note
