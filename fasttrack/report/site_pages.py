"""The dashboard's pages over the indexed records: ``index.html``, ``index.json`` and the
side-by-side ``compare/<group>.html`` pages (see :mod:`fasttrack.report.site` for the build)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup

from fasttrack import __version__, attrs
from fasttrack.report import agreement, risk
from fasttrack.report.records import BundleRecord
from fasttrack.report.render import render_page, renderer_version, static, write_text
from fasttrack.results import ordered_checks

#: Bundles listed in the review queue at most (the full list is below it).
QUEUE_LIMIT = 200


def _json_for_script(obj: Any) -> Markup:
    """JSON safe to embed in ``<script type="application/json">`` (no ``<``, ``>``, ``&``)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)


def _search_text(r: BundleRecord, rk: risk.Risk) -> str:
    bits = [
        r.id[:16],
        r.model,
        r.tier,
        r.scope_title,
        r.repository,
        str(r.pr_number or ""),
        r.head_sha[:12],
        r.verdict,
        "verified" if r.verified else "unverified",
        r.hardware,
        r.isolation,
        " ".join(r.failed_checks),
        " ".join(rk.reasons),
        r.path,
    ]
    return " ".join(b for b in bits if b).lower()[:2000]


def group_id(key: tuple[str, str]) -> str:
    return hashlib.sha256(f"{key[0]}\0{key[1]}".encode()).hexdigest()[:16]


def compare_view(g: agreement.GroupResult, *, max_bundles: int = 8, max_rows: int = 400) -> dict[str, Any]:
    """Rows of the side-by-side page: check verdicts and perf speedups per bundle."""
    bs = g.bundles[:max_bundles]
    checks = ordered_checks(n for b in bs for n in b.checks)
    check_rows = []
    for n in checks:
        vals = [b.checks.get(n, "absent") for b in bs]
        ran = {v for v in vals if v not in ("not_run", "absent")}
        check_rows.append({"name": n, "values": vals, "same": len(ran) <= 1})
    keys = sorted({(p.point, p.metric) for b in bs for p in b.perf})[:max_rows]
    per = [{(p.point, p.metric): p for p in b.perf} for b in bs]
    perf_rows = []
    for k in keys:
        cells = [m.get(k) for m in per]
        have = [c for c in cells if c is not None]
        agree = None
        if len(have) > 1:
            agree = all(
                (y.ci_low is not None and y.ci_high is not None and y.ci_low <= x.speedup <= y.ci_high)
                for x in have
                for y in have
                if x is not y
            )
        perf_rows.append({"point": k[0], "metric": k[1], "cells": cells, "agree": agree})
    return {
        "bundles": bs,
        "more": len(g.bundles) - len(bs),
        "checks": check_rows,
        "perf": perf_rows,
        "perf_total": len({(p.point, p.metric) for b in bs for p in b.perf}),
    }


def write_index(site: Path, records: list[BundleRecord], *, errors: Sequence[str] = ()) -> None:
    """index.html, index.json and compare pages from the indexed records."""
    cmp = _comparisons(records)
    risks = {r.id: risk.assess(r, disagrees=r.id in cmp.disagree) for r in records}
    ordered = risk.order([(r, risks[r.id]) for r in records])
    queue = [(r, k) for r, k in ordered if k.score > 0]
    by_model: dict[str, list[BundleRecord]] = {}
    for r in records:
        by_model.setdefault(r.model or "(unreadable)", []).append(r)
    for rs in by_model.values():
        rs.sort(key=lambda r: (r.repository, r.pr_number or 0, r.head_sha, r.created, r.id))
    css = static("report.css") + "\n" + static("dashboard.css")
    _write_compare_pages(site / "compare", cmp, risks, css)
    counts = _counts(records, cmp.multi)
    html = render_page(
        "dashboard.html.j2",
        css=css,
        script=static("dashboard.js"),
        counts=counts,
        queue=queue[:QUEUE_LIMIT],
        queue_total=len(queue),
        by_model=sorted(by_model.items()),
        risks=risks,
        **attrs(cmp, "multi", "gids", "group_of", "status_of"),
        models=sorted(by_model),
        errors=list(errors)[:200],
        data=_json_for_script(_filter_rows(records, risks)),
    )
    write_text(site / "index.html", html)
    doc = {
        "fasttrack_version": __version__,
        "counts": counts,
        "bundles": [
            {
                **r.model_dump(mode="json", exclude={"members"}),
                "files": len(r.members),
                "risk": {"score": risks[r.id].score, "level": risks[r.id].level, "reasons": risks[r.id].reasons},
                "group": cmp.group_of.get(r.id),
                "agreement": cmp.status_of.get(r.id, "single"),
            }
            for r, _ in ordered
        ],
        "groups": [
            {
                "id": cmp.gids[g.key],
                "head_sha": g.key[0],
                "model": g.key[1],
                "status": g.status,
                "bundles": [r.id for r in g.bundles],
                "differences": g.differences[:200],
            }
            for g in cmp.multi
        ],
        "errors": list(errors),
    }
    write_text(site / "index.json", json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")))


@dataclass
class _Comparisons:
    """The readable bundles grouped by (PR head, model) (:func:`fasttrack.report.agreement.group`), as the
    dashboard's pages show the groups."""

    multi: list[agreement.GroupResult]
    """The groups of several bundles, those that disagree first (each has a side-by-side page)."""
    gids: dict[tuple[str, str], str]
    """Group key -> the name of its side-by-side page."""
    group_of: dict[str, str]
    """Record id -> the side-by-side page of its group (bundles of a group of several)."""
    status_of: dict[str, str]
    """Record id -> its group's status."""
    disagree: set[str]
    """The records of a pair that disagrees."""


def _comparisons(records: list[BundleRecord]) -> _Comparisons:
    """The records' groups, each bundle's group status, and the bundles of a pair that disagrees."""
    groups = agreement.group(records)
    disagree: set[str] = set()
    status_of: dict[str, str] = {}
    for g in groups:
        for r in g.bundles:
            status_of[r.id] = g.status
        for p in g.pairs:
            if p.status == "disagree":
                disagree.update((p.a, p.b))
    multi = [g for g in groups if len(g.bundles) > 1]
    multi.sort(key=lambda g: ({"disagree": 0, "not_comparable": 1, "agree": 2}.get(g.status, 3), g.key))
    gids = {g.key: group_id(g.key) for g in multi}
    group_of = {r.id: gids[g.key] for g in multi for r in g.bundles}
    return _Comparisons(multi=multi, gids=gids, group_of=group_of, status_of=status_of, disagree=disagree)


def _write_compare_pages(compare_dir: Path, cmp: _Comparisons, risks: dict[str, risk.Risk], css: str) -> None:
    """One side-by-side page per group of several bundles; pages of groups that are gone are removed."""
    if compare_dir.is_dir():
        for old in compare_dir.glob("*.html"):
            if old.stem not in cmp.gids.values():
                old.unlink()
    # a compare page depends only on its bundles (and the renderer): re-render it when they change
    stamps_file = compare_dir / "stamps.json"
    try:
        stamps = json.loads(stamps_file.read_text()) if stamps_file.is_file() else {}
    except ValueError:
        stamps = {}
    version = renderer_version()
    new_stamps = {}
    for g in cmp.multi:
        gid = cmp.gids[g.key]
        stamp = hashlib.sha256((version + "".join(sorted(r.id for r in g.bundles))).encode()).hexdigest()
        new_stamps[gid] = stamp
        if stamps.get(gid) == stamp and (compare_dir / f"{gid}.html").is_file():
            continue
        page = render_page("compare.html.j2", css=css, g=g, risks=risks, gid=gid, cmp=compare_view(g))
        write_text(compare_dir / f"{gid}.html", page)
    write_text(stamps_file, json.dumps(new_stamps, sort_keys=True))


def _filter_rows(records: list[BundleRecord], risks: dict[str, risk.Risk]) -> list[dict[str, Any]]:
    """What the index page's filter script searches, one row per bundle."""
    return [
        {
            "id": r.short,
            "s": _search_text(r, risks[r.id]),
            "v": r.verdict,
            "ok": r.verified,
            "m": r.model,
            "iso": r.isolation,
            "risk": risks[r.id].level,
        }
        for r in records
    ]


def _counts(records: list[BundleRecord], multi: list[agreement.GroupResult]) -> dict[str, int]:
    return {
        "bundles": len(records),
        "verified": sum(r.verified for r in records),
        "unverified": sum(not r.verified for r in records),
        "pass": sum(r.verdict == "pass" for r in records),
        "fail": sum(r.verdict == "fail" for r in records),
        "incomplete": sum(r.verdict == "incomplete" for r in records),
        "rehearsal": sum(r.verdict == "rehearsal" for r in records),
        "heads": len({r.head_sha for r in records if r.head_sha}),
        "disagree": sum(1 for g in multi if g.status == "disagree"),
    }
