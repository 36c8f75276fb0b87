"""The evaluations view: paired scores per eval as item and bin charts, and the discordant items."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fasttrack.bundle.manifest import Manifest
from fasttrack.report import fields as F
from fasttrack.report import fmt
from fasttrack.report.charts import bins_chart, items_chart
from fasttrack.report.check_views import Tables, table_view, view_entry
from fasttrack.report.links import LinkPolicy
from fasttrack.report.tableread import LoadedTable
from fasttrack.report.views import EvalChart, EvalView, TableView

_Series = list[tuple[str, float | None, float | None]]
"""Chart data: (item or bin, baseline score, candidate score)."""


def evals_view(manifest: Manifest, tables: Tables, links: LinkPolicy) -> EvalView:
    found = view_entry(manifest, "evals")
    if found is None:
        return EvalView(status="not_run", reason="the bundle has no evals check entry")
    check, entry = found
    tabs = tables.get(check, {})
    view = EvalView(status="shown" if tabs else "not_run", reason=fmt.one_line(entry.reason, 600))
    discordant_rows: list[dict[str, Any]] = []
    for name, t in sorted(tabs.items()):
        if not t.error:
            _add_table(view, discordant_rows, check, name, t, links)
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


@dataclass(frozen=True)
class _ScoreTable:
    """A table of paired scores and the columns it keeps them in."""

    name: str
    table: LoadedTable
    baseline: str
    candidate: str
    eval_col: str | None
    point_col: str | None

    def eval_of(self, row: dict[str, Any]) -> str:
        """The eval a row scores (the table's name when it has no eval column)."""
        return fmt.one_line(row.get(self.eval_col), 60) if self.eval_col else self.name

    def scores(self, row: dict[str, Any]) -> tuple[float | None, float | None]:
        return F.as_float(row.get(self.baseline)), F.as_float(row.get(self.candidate))


def _add_table(
    view: EvalView, discordant: list[dict[str, Any]], check: str, name: str, t: LoadedTable, links: LinkPolicy
) -> None:
    """One table of the evals check in the view: the discordant items' table, charts of its paired scores (per
    item, bin or dimension), or, without a column to chart by, the table as it is."""
    cols = t.columns
    lname = name.lower()
    if "discordant" in lname or "review" in lname:
        view.discordant = table_view(check, name, t, links=links, rows_shown=200)
        view.discordant_count = t.total_rows
        return
    bc, cc = F.pick(cols, F.BASELINE), F.pick(cols, F.CANDIDATE)
    if bc is None or cc is None:
        return
    scored = _ScoreTable(name, t, bc, cc, F.pick(cols, ("eval", "task", "name")), F.pick(cols, F.POINT))
    if "dimension" in cols and "group" in cols:
        _dimension_charts(view, discordant, scored)
        return
    binc, itemc = F.pick(cols, F.BIN), F.pick(cols, F.ITEM)
    col = binc or itemc
    if col is None:
        view.tables.append(table_view(check, name, t, links=links, rows_shown=100))
        return
    acc: dict[str, dict[str, list[tuple[float | None, float | None]]]] = {}
    for r in t.rows:
        acc.setdefault(scored.eval_of(r), {}).setdefault(fmt.value(r.get(col), 60), []).append(scored.scores(r))
    for ev, keyed in acc.items():
        data = [(k, _mean([v[0] for v in vs]), _mean([v[1] for v in vs])) for k, vs in keyed.items()]
        _add_chart(view, discordant, "bins" if binc else "items", f"{ev} per {col}", name, data, col)


def _dimension_charts(view: EvalView, discordant: list[dict[str, Any]], scored: _ScoreTable) -> None:
    """A table in long format (``dimension`` and ``group`` columns): one chart per eval, point and dimension."""
    pc, rows = scored.point_col, scored.table.rows
    points = {r.get(pc) for r in rows} if pc else set()
    groups: dict[tuple[str, str, str], _Series] = {}
    for r in rows:
        pt = fmt.one_line(r.get(pc), 120) if pc and len(points) > 1 else ""
        dim = fmt.one_line(r.get("dimension"), 40)
        groups.setdefault((scored.eval_of(r), pt, dim), []).append((fmt.value(r.get("group"), 40), *scored.scores(r)))
    for (ev, pt, dim), data in groups.items():
        kind = "items" if dim in F.ITEM else "bins"
        _add_chart(view, discordant, kind, f"{ev} per {dim}" + (f" at {pt}" if pt else ""), scored.name, data, dim)


def _add_chart(
    view: EvalView, discordant: list[dict[str, Any]], kind: str, title: str, table: str, data: _Series, xlabel: str
) -> None:
    """A chart of paired scores per item (``kind`` ``items``: the items the sides score differently are added
    to ``discordant``) or per bin."""
    data = sorted(data, key=lambda d: (F.as_float(d[0]) is None, F.as_float(d[0]) or 0))
    if kind == "items":
        for i, b, c in data:
            if b is not None and c is not None and abs(b - c) > 1e-12:
                discordant.append({"eval": title, "item": i, "baseline": fmt.number(b), "candidate": fmt.number(c)})
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


def _mean(vs: Sequence[float | None]) -> float | None:
    xs = [v for v in vs if v is not None]
    return sum(xs) / len(xs) if xs else None
