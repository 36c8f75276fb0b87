"""Build the report's view of one bundle: verify it first, then read only the bundle.

Nothing here looks at live state (engines, the scope file on disk, git): every figure comes
from the bundle's manifest, its Parquet tables (read with pyarrow) and its attestation.
A bundle that fails verification is still read and shown, marked as unverified; a bundle
whose manifest cannot be read yields a page that says why.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttrack.bundle.errors import BundleError
from fasttrack.bundle.layout import ATTESTATION
from fasttrack.bundle.manifest import CheckEntry, Manifest
from fasttrack.bundle.verify import VerifyResult, verify_bundle
from fasttrack.report import fields as F
from fasttrack.report import fmt
from fasttrack.report.charts import bins_chart, items_chart, speedup_chart
from fasttrack.report.identity import bundle_hash
from fasttrack.report.links import LinkPolicy, quote_path
from fasttrack.report.tableread import LoadedTable, read_table
from fasttrack.report.views import (
    ArtifactView,
    CheckView,
    ClaimView,
    CoverageView,
    EngineView,
    EvalChart,
    EvalView,
    GateRow,
    HeatCell,
    HeatmapView,
    PerfCharts,
    PerfMetricView,
    PerfRow,
    PerfView,
    PRView,
    ReportData,
    SignerView,
    TableView,
    Tri,
    VerifyView,
)
from fasttrack.results import ordered_checks

CHECK_TITLES = {
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
MAX_ARTIFACTS_SHOWN = 2000
MAX_HEATMAP_POINTS = 300
#: Engine groups drawn per metric (the table lists every row).
MAX_CHART_GROUPS = 24

_ITEM_LABELS = {
    "signature": "Signature",
    "hashes": "Hashes",
    "files": "File list",
    "pr_head": "PR head",
    "archive": "Archive",
    "attestation": "Attestation",
    "schema": "Schema",
    "predicate": "Signed summary",
    "verdicts": "Verdicts",
    "tables": "Tables",
}


@dataclass
class Links:
    """How the report links bundle members: a relative base (or None) and a rename rule."""

    base: str | None
    reason: str = ""
    rename: Callable[[str], str] | None = None


def default_links(bundle: Path, out_html: Path) -> Links:
    """Links from a report written at ``out_html`` straight into a bundle directory."""
    from fasttrack.report.links import relative_base

    if bundle.is_dir():
        return Links(base=relative_base(bundle, out_html.parent))
    return Links(base=None, reason="not linked: the bundle is a tarball; extract it to open its files")


# --------------------------------------------------------------------------- verification


def verify_view(vr: VerifyResult, *, trusted_keys: int) -> VerifyView:
    items = [
        Tri(name=it.name, label=_ITEM_LABELS.get(it.name, it.name), ok=it.ok, detail=fmt.one_line(it.detail, 1200))
        for it in vr.items
    ]
    by = {t.name: t for t in items}
    sig, hashes, files, head = by["signature"], by["hashes"], by["files"], by["pr_head"]
    hashes_combined = Tri(
        name="hashes",
        label="Hashes",
        ok=(hashes.ok is True and files.ok is True) if hashes.ok is not None else None,
        detail=hashes.detail if files.ok is not False else f"{hashes.detail}; {files.detail}",
    )
    if vr.verified:
        who = ", ".join(f"key {s['keyid'][:12]}" for s in vr.signatures if s.get("status") == "valid")
        head_txt = "PR head matches" if head.ok else "PR head not checked against the code host"
        headline = f"Verified: signed by {who or 'a trusted key'}; every file matches its signed hash; {head_txt}."
    else:
        bad = [t for t in items if t.ok is False]
        headline = "NOT VERIFIED: " + "; ".join(f"{t.label.lower()}: {t.detail}" for t in bad[:4])
        if len(bad) > 4:
            headline += f"; and {len(bad) - 4} more"
    signers = [
        SignerView(
            keyid=str(s.get("keyid", "")),
            status=str(s.get("status", "")),
            signer=fmt.one_line(s.get("signer") or "", 120),
        )
        for s in vr.signatures
    ]
    return VerifyView(
        verified=vr.verified,
        headline=fmt.one_line(headline, 1500),
        signature=sig,
        hashes=hashes_combined,
        pr_head=head,
        items=items,
        signers=signers,
        trusted_keys=trusted_keys,
    )


# --------------------------------------------------------------------------- tables


def _table_view(
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
    )


def _load_tables(root: Path, manifest: Manifest) -> dict[str, dict[str, LoadedTable]]:
    out: dict[str, dict[str, LoadedTable]] = {}
    for check, entry in manifest.checks.items():
        out[check] = {}
        for tname, ref in sorted(entry.tables.items()):
            out[check][tname] = read_table(root, ref.path)
    return out


# --------------------------------------------------------------------------- plan points


def _plan_points(manifest: Manifest) -> dict[str, dict[str, Any]]:
    pts = manifest.plan.plan.get("points")
    out: dict[str, dict[str, Any]] = {}
    if isinstance(pts, list):
        for p in pts[:5000]:
            if isinstance(p, dict) and isinstance(p.get("id"), str):
                out[p["id"]] = p
    return out


def _point_desc(p: dict[str, Any]) -> str:
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


# --------------------------------------------------------------------------- heatmap


def _heatmap(
    manifest: Manifest, tables: dict[str, dict[str, LoadedTable]], plan_pts: dict[str, dict[str, Any]]
) -> HeatmapView:
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
    checks = ordered_checks(manifest.checks)
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
    info = {pid: _point_desc(plan_pts[pid]) for pid in points if pid in plan_pts}
    return HeatmapView(points=points, checks=checks, cells=cells, point_info=info)


# --------------------------------------------------------------------------- perf


def _ctx_label(c: int | None, full: bool) -> str:
    if c is None:
        return "?"
    s = f"{c // 1024}k" if c >= 1024 and c % 1024 == 0 else str(c)
    return f"full ({s})" if full else s


def _perf_table(tabs: dict[str, LoadedTable]) -> tuple[str, LoadedTable] | None:
    names = sorted(tabs, key=lambda n: (n not in ("points", "perf", "point_gates", "gates"), n))
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


def perf_rows(t: LoadedTable, plan_pts: dict[str, dict[str, Any]]) -> list[PerfRow]:
    """Normalise a perf table's rows (speedup direction-aware: > 1 means the candidate is better)."""
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
            )
        )
    return out


def _perf(
    manifest: Manifest, tables: dict[str, dict[str, LoadedTable]], plan_pts: dict[str, dict[str, Any]]
) -> PerfView:
    entry = manifest.checks.get("perf")
    if entry is None:
        return PerfView(status="not_run", reason="the bundle has no perf check entry")
    found = _perf_table(tables.get("perf", {}))
    if entry.verdict.value == "not_run" and found is None:
        return PerfView(status="not_run", reason=fmt.one_line(entry.reason, 600))
    if found is None:
        names = ", ".join(sorted(tables.get("perf", {}))) or "none"
        return PerfView(
            status="no_table",
            reason=f"the perf check wrote no per-point table with a speedup and its interval (tables: {names})",
        )
    name, t = found
    rows = perf_rows(t, plan_pts)
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
    return PerfView(status="shown", reason=reason, table=name, threshold=threshold, metrics=views)


# --------------------------------------------------------------------------- evals


def _evals(manifest: Manifest, tables: dict[str, dict[str, LoadedTable]], links: LinkPolicy) -> EvalView:
    entry = manifest.checks.get("evals")
    if entry is None:
        return EvalView(status="not_run", reason="the bundle has no evals check entry")
    tabs = tables.get("evals", {})
    view = EvalView(status="shown" if tabs else "not_run", reason=fmt.one_line(entry.reason, 600))
    discordant_rows: list[dict[str, Any]] = []

    def add(kind: str, title: str, table: str, data: list[tuple[str, float | None, float | None]], xlabel: str) -> None:
        data = sorted(data, key=lambda d: (F.as_float(d[0]) is None, F.as_float(d[0]) or 0))
        if kind == "items":
            for i, b, c in data:
                if b is not None and c is not None and abs(b - c) > 1e-12:
                    discordant_rows.append(
                        {"eval": title, "item": i, "baseline": fmt.number(b), "candidate": fmt.number(c)}
                    )
            view.items.append(
                EvalChart(
                    title=title,
                    table=table,
                    chart=items_chart(data, title=title),
                    rows=[{"item": d[0], "baseline": fmt.number(d[1]), "candidate": fmt.number(d[2])} for d in data],
                )
            )
        else:
            ymax = 1.0 if all((v is None or v <= 1.0) for d in data for v in d[1:]) else None
            view.bins.append(
                EvalChart(
                    title=title,
                    table=table,
                    chart=bins_chart(data, title=title, ymax=ymax, xlabel=xlabel),
                    rows=[{"bin": d[0], "baseline": fmt.number(d[1]), "candidate": fmt.number(d[2])} for d in data],
                )
            )

    for name, t in sorted(tabs.items()):
        if t.error:
            continue
        cols = t.columns
        lname = name.lower()
        if "discordant" in lname or "review" in lname:
            view.discordant = _table_view("evals", name, t, links=links, rows_shown=200)
            view.discordant_count = t.total_rows
            continue
        bc, cc = F.pick(cols, F.BASELINE), F.pick(cols, F.CANDIDATE)
        if bc is None or cc is None:
            continue
        evc = F.pick(cols, ("eval", "task", "name"))
        pc = F.pick(cols, F.POINT)
        points = {r.get(pc) for r in t.rows} if pc else set()
        # long format (dimension, group): one chart per eval, point and dimension
        if "dimension" in cols and "group" in cols:
            groups: dict[tuple[str, str, str], list[tuple[str, float | None, float | None]]] = {}
            for r in t.rows:
                ev = fmt.one_line(r.get(evc), 60) if evc else name
                pt = fmt.one_line(r.get(pc), 120) if pc and len(points) > 1 else ""
                dim = fmt.one_line(r.get("dimension"), 40)
                groups.setdefault((ev, pt, dim), []).append(
                    (fmt.value(r.get("group"), 40), F.as_float(r.get(bc)), F.as_float(r.get(cc)))
                )
            for (ev, pt, dim), data in groups.items():
                kind = "items" if dim in F.ITEM else "bins"
                add(kind, f"{ev} per {dim}" + (f" at {pt}" if pt else ""), name, data, dim)
            continue
        binc, itemc = F.pick(cols, F.BIN), F.pick(cols, F.ITEM)
        col = binc or itemc
        if col is None:
            view.tables.append(_table_view("evals", name, t, links=links, rows_shown=100))
            continue
        acc: dict[str, dict[str, list[tuple[float | None, float | None]]]] = {}
        for r in t.rows:
            ev = fmt.one_line(r.get(evc), 60) if evc else name
            acc.setdefault(ev, {}).setdefault(fmt.value(r.get(col), 60), []).append(
                (F.as_float(r.get(bc)), F.as_float(r.get(cc)))
            )
        for ev, keyed in acc.items():
            data = [(k, _mean([v[0] for v in vs]), _mean([v[1] for v in vs])) for k, vs in keyed.items()]
            add("bins" if binc else "items", f"{ev} per {col}", name, data, col)
    if view.discordant is None and discordant_rows:
        view.discordant = TableView(
            check="evals",
            name="discordant (from per-item scores)",
            path="",
            columns=["eval", "item", "baseline", "candidate"],
            rows=[[d["eval"], d["item"], d["baseline"], d["candidate"]] for d in discordant_rows[:200]],
            total_rows=len(discordant_rows),
        )
        view.discordant_count = len(discordant_rows)
    if entry.verdict.value == "not_run":
        view.status = "not_run"
    return view


def _mean(vs: Sequence[float | None]) -> float | None:
    xs = [v for v in vs if v is not None]
    return sum(xs) / len(xs) if xs else None


# --------------------------------------------------------------------------- coverage


def _coverage(
    manifest: Manifest,
    tables: dict[str, dict[str, LoadedTable]],
    plan_pts: dict[str, dict[str, Any]],
    links: LinkPolicy,
) -> CoverageView:
    entry = manifest.checks.get("coverage")
    if entry is None:
        return CoverageView(status="not_run", reason="the bundle has no coverage check entry")
    tabs = tables.get("coverage", {})
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
    view.table = _table_view("coverage", name, t, links=links, rows_shown=200)
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


# --------------------------------------------------------------------------- claims


def _scope_yaml(manifest: Manifest) -> dict[str, Any]:
    import yaml

    text = manifest.scope.yaml
    if len(text) > 1_000_000:
        return {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        obj = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader (C or Python)
    except yaml.YAMLError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _claims(
    manifest: Manifest, tables: dict[str, dict[str, LoadedTable]], scope_obj: dict[str, Any]
) -> tuple[list[ClaimView], str]:
    for check, tabs in tables.items():
        t = tabs.get("claims")
        if t is None or t.error:
            continue
        out = []
        for r in t.rows[:500]:
            cid = F.get(r, F.CLAIM_ID)
            status = F.get(r, F.CLAIM_STATUS)
            s = str(status).strip().lower().replace(" ", "_").replace("-", "_") if status is not None else ""
            if s in ("confirmed", "pass", "passed", "true"):
                s = "confirmed"
            elif s in ("not_confirmed", "fail", "failed", "false", "refuted"):
                s = "not_confirmed"
            else:
                s = "not_measured"
            parts = []
            for k in ("claimed", "measured", "ci_low", "ci_high", "point", "detail", "reason"):
                if r.get(k) is not None:
                    parts.append(f"{k} {fmt.value(r.get(k), 200)}")
            out.append(
                ClaimView(
                    id=fmt.one_line(cid, 120), text=fmt.one_line(r.get("text"), 600), status=s, detail="; ".join(parts)
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


# --------------------------------------------------------------------------- artifacts


def _subjects(root: Path) -> list[str] | None:
    from fasttrack.bundle.attest import read_envelope

    p = root / ATTESTATION
    try:
        st = read_envelope(p.read_bytes()).statement()
    except (BundleError, OSError):
        return None
    return [s["name"] for s in st["subject"]]


def _artifacts(
    root: Path, subjects: list[str] | None, vr: VerifyResult, links: LinkPolicy
) -> tuple[list[ArtifactView], str]:
    names = subjects if subjects is not None else []
    note = ""
    if subjects is None:
        note = "the attestation is unreadable, so no file is linked"
    out = []
    real_root = root.resolve()
    for n in sorted(names)[:MAX_ARTIFACTS_SHOWN]:
        size = None
        if quote_path(n) is not None:  # never look outside the bundle for a hostile name
            try:
                f = root / n
                if not f.is_symlink() and f.resolve().is_relative_to(real_root) and f.is_file():
                    size = f.stat().st_size
            except (OSError, ValueError):
                size = None
        href = links.href(n)
        out.append(
            ArtifactView(
                name=fmt.one_line(n, 400), href=href, why_not="" if href else links.why_not(n), size=size, sha256=""
            )
        )
    if len(names) > MAX_ARTIFACTS_SHOWN:
        note = f"showing {MAX_ARTIFACTS_SHOWN} of {len(names)} files"
    return out, note


# --------------------------------------------------------------------------- environment


def _environment(m: Manifest) -> tuple[list[tuple[str, str]], list[EngineView], str]:
    p = m.provenance
    hw = p.hardware
    if hw.kind == "gpu":
        hardware = f"{hw.gpu_count} \u00d7 {hw.gpu_model or 'unknown GPU'}"
    else:
        hardware = f"CPU: {hw.cpu_model or 'unknown'}" + (f" ({hw.cpu_count} logical CPUs)" if hw.cpu_count else "")
    env = [
        ("fasttrack", f"{p.fasttrack_version}" + (f" @ {p.fasttrack_commit}" if p.fasttrack_commit else "")),
        ("vLLM", f"{p.vllm_version or 'unknown'}" + (f" @ {p.vllm_commit}" if p.vllm_commit else "")),
        ("torch", p.torch_version or "unknown"),
        ("CUDA", p.cuda_version or "none"),
        ("driver", p.driver_version or "none"),
        ("Python", p.python_version),
        ("platform", p.platform),
        ("hardware", hardware),
        ("container image", p.container_image_digest or "none"),
        ("installed packages", f"{p.packages_count} distributions, sha256 {p.packages_sha256}"),
    ]
    for k, v in sorted(p.models.items())[:50]:
        env.append((f"model {k}", v))
    for k, v in sorted(p.datasets.items())[:50]:
        env.append((f"dataset {k}", v))
    if p.seeds:
        env.append(("seeds", ", ".join(f"{k}={v}" for k, v in sorted(p.seeds.items())[:50])))
    env = [(fmt.one_line(a, 120), fmt.one_line(b, 600)) for a, b in env]
    engines = [
        EngineView(
            side=e.side,
            group=fmt.one_line(e.group, 120),
            mode=e.mode,
            args=fmt.one_line(" ".join(e.args), 4000),
            env=fmt.one_line(" ".join(f"{k}={v}" for k, v in sorted(e.env.items())), 2000),
            url=fmt.one_line(e.url or "", 200),
        )
        for e in p.engines[:200]
    ]
    return env, engines, fmt.one_line(hardware, 300)


# --------------------------------------------------------------------------- checks


def _check_view(name: str, e: CheckEntry, tabs: dict[str, LoadedTable], links: LinkPolicy) -> CheckView:
    gate = _gate_row(name, e)
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
        title=CHECK_TITLES.get(name, name),
        verdict=e.verdict.value,
        required=e.required,
        reason=fmt.one_line(e.reason),
        gate=gate,
        summary=fmt.flatten(e.summary),
        failures=[fmt.one_line(f, 1000) for f in e.failures[:MAX_FAILURES_SHOWN]],
        failures_total=len(e.failures),
        tables=[_table_view(name, tn, t, links=links) for tn, t in tabs.items()],
        artifacts=arts,
    )


def _gate_row(name: str, e: CheckEntry) -> GateRow:
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


# --------------------------------------------------------------------------- entry point


def build_report_data(
    bundle: str | os.PathLike[str],
    *,
    keys: Sequence[Any] = (),
    trust_dir: str | os.PathLike[str] | None = None,
    pr_head: str | None = None,
    links: Links | None = None,
    verify_result: VerifyResult | None = None,
    content_hash: str | None = None,
) -> ReportData:
    """Verify ``bundle`` and read everything the report shows from it."""
    from fasttrack.bundle.reader import open_bundle
    from fasttrack.bundle.verify import resolve_keys

    path = Path(bundle)
    if not path.exists():
        raise BundleError(f"{path} does not exist; give a bundle directory or .tar.gz")
    trusted = resolve_keys(keys, trust_dir)
    vr = verify_result or verify_bundle(path, keys=trusted, pr_head=pr_head)
    vv = verify_view(vr, trusted_keys=len(trusted))
    bhash = content_hash or bundle_hash(path)
    links = links or Links(base=None, reason="not linked")
    name = fmt.one_line(path.name, 200)
    try:
        with open_bundle(path) as view:
            return _read(view.root, view.manifest, vr, vv, name, bhash, links)
    except BundleError as exc:
        return ReportData(
            bundle_name=name,
            bundle_hash=bhash,
            verification=vv,
            readable=False,
            unreadable_reason=fmt.one_line(exc.message, 2000),
        )


def _read(root: Path, m: Manifest, vr: VerifyResult, vv: VerifyView, name: str, bhash: str, links: Links) -> ReportData:
    subjects = _subjects(root)
    by = {it.name: it for it in vr.items}
    files_ok = by["hashes"].ok is True and by["files"].ok is True and subjects is not None
    signed = by["attestation"].ok is True and by["signature"].ok is True
    if links.base is None:
        policy = LinkPolicy.none(links.reason or "not linked")
    elif not files_ok:
        policy = LinkPolicy.none("not linked: the bundle's files do not match its attestation")
    elif not signed:
        policy = LinkPolicy.none("not linked: the attestation listing these files is not signed by a trusted key")
    else:
        policy = LinkPolicy(base=links.base, members=subjects or (), rename=links.rename)
    tables = _load_tables(root, m)
    plan_pts = _plan_points(m)
    scope_obj = _scope_yaml(m)
    env, engines, hardware = _environment(m)
    pr = None
    if m.pr is not None:
        pr = PRView(
            repository=fmt.one_line(m.pr.repository or "", 200),
            number=str(m.pr.number) if m.pr.number else "",
            base_sha=m.pr.base_sha or "",
            head_sha=m.pr.head_sha,
            diff_sha256=m.pr.diff_sha256 or "",
            isolation=str(getattr(m.pr.isolation, "value", m.pr.isolation)),
            isolation_reason=fmt.one_line(m.pr.isolation_reason, 1000),
        )
    order = ordered_checks(m.checks)
    checks = [_check_view(n, m.checks[n], tables.get(n, {}), policy) for n in order]
    claims, claims_note = _claims(m, tables, scope_obj)
    artifacts, art_note = _artifacts(root, subjects, vr, policy)
    if policy.base is None and not art_note:
        art_note = policy.reason
    title = scope_obj.get("title") if isinstance(scope_obj.get("title"), str) else ""
    desc = scope_obj.get("description") if isinstance(scope_obj.get("description"), str) else ""
    return ReportData(
        bundle_name=name,
        bundle_hash=bhash,
        verification=vv,
        readable=True,
        verdict=m.verdict,
        model=fmt.one_line(m.scope.model, 200),
        tier=fmt.one_line(m.scope.tier, 40),
        scope_title=fmt.one_line(title, 300),
        scope_description=fmt.one_line(desc, 2000),
        scope_sha256=m.scope.sha256,
        shard=m.plan.shard,
        created=fmt.one_line(m.created, 60),
        pr=pr,
        hardware=hardware,
        rehearsal=m.rehearsal,
        rehearsal_reason=fmt.one_line(m.rehearsal_reason or "", 1000),
        gates=[c.gate for c in checks],
        checks=checks,
        heatmap=_heatmap(m, tables, plan_pts),
        perf=_perf(m, tables, plan_pts),
        evals=_evals(m, tables, policy),
        coverage=_coverage(m, tables, plan_pts, policy),
        claims=claims,
        claims_note=claims_note,
        environment=env,
        engines=engines,
        artifacts=artifacts,
        artifacts_note=art_note,
        check_verdicts={n: m.checks[n].verdict.value for n in order},
        linkable=sorted(n for n in policy.members if policy.href(n) is not None),
    )
