"""The evaluations view: paired scores per eval as item and bin charts, and the discordant items."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fasttrack.bundle.manifest import Manifest
from fasttrack.report import fields as F
from fasttrack.report import fmt
from fasttrack.report.charts import bins_chart, items_chart
from fasttrack.report.check_views import Tables, table_view, view_entry
from fasttrack.report.links import LinkPolicy
from fasttrack.report.views import EvalChart, EvalView, TableView


def evals_view(manifest: Manifest, tables: Tables, links: LinkPolicy) -> EvalView:
    found = view_entry(manifest, "evals")
    if found is None:
        return EvalView(status="not_run", reason="the bundle has no evals check entry")
    check, entry = found
    tabs = tables.get(check, {})
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
            view.discordant = table_view(check, name, t, links=links, rows_shown=200)
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
            view.tables.append(table_view(check, name, t, links=links, rows_shown=100))
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
            check=check,
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
