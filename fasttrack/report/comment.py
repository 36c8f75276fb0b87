"""The PR comment: GitHub-flavoured Markdown under GitHub's 65,536-character limit.

Order: verdict and verification, failed gates first, the largest performance deltas,
coverage gaps, then where the full report is. Bundle text is escaped for Markdown and
HTML (:func:`md`): punctuation is backslash-escaped, ``<``/``>``/``&`` become entities,
and zero-width spaces break ``scheme://``, ``www.`` and ``@mention`` so no bundle text
becomes a link or pings anyone. When the comment would be too long, tables are cut
(with a note saying how many rows were left out) until it fits.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from fasttrack.errors import FasttrackError
from fasttrack.report import fmt
from fasttrack.report.render import environment
from fasttrack.report.views import PerfRow, ReportData

#: GitHub's limit on a comment body.
GITHUB_LIMIT = 65_536
#: What this module aims for (room for a bot's own header).
DEFAULT_LIMIT = 60_000

_MD_ESCAPE = set("\\`*_{}[]()#+!|~^$")
_HTML = {"<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;"}
_URL_OK = re.compile(
    r"^https?://[A-Za-z0-9.-]+(:[0-9]+)?(/[A-Za-z0-9._~%!$&'()*+,;=:@/-]*)?(\?[A-Za-z0-9._~%!$&'()*+,;=:@/?-]*)?(#[A-Za-z0-9._~%!$&'()*+,;=:@/?-]*)?$"
)


def md(s: Any, limit: int = 300) -> Markup:
    """Escape untrusted text for one line of GitHub Markdown (tables included)."""
    text = fmt.one_line(s, limit)
    text = re.sub(r"(?i)\bwww\.", "www\u200b.", text)
    out = []
    for ch in text:
        if ch in _HTML:
            out.append(_HTML[ch])
        elif ch in _MD_ESCAPE:
            out.append("\\" + ch)
        elif ch == ":":
            out.append(":\u200b")
        elif ch == "@":
            out.append("@\u200b")
        else:
            out.append(ch)
    return Markup("".join(out))


def check_url(url: str) -> str:
    """A report URL given on the command line: http(s) only."""
    if not _URL_OK.match(url):
        raise FasttrackError(
            f"--report-url {url[:200]!r} is not a plain http(s) URL",
            hint="e.g. --report-url https://ci.example.org/runs/123/report.html",
        )
    return url


@dataclass
class Delta:
    row: PerfRow

    @property
    def size(self) -> float:
        s = self.row.speedup
        return abs(math.log(s)) if s and s > 0 else 0.0


def largest_deltas(r: ReportData, n: int) -> list[PerfRow]:
    """Perf rows ordered by |log speedup| (largest first), failing rows first."""
    rows = [x for x in (r.perf.all_rows if r.perf else []) if x.speedup is not None]
    rows.sort(key=lambda x: (x.verdict != "fail", -Delta(x).size, x.point))
    return rows[:n]


def _render(r: ReportData, *, report_ref: str, report_url: str | None, cap: int) -> str:
    failed = [g for g in r.gates if g.verdict == "fail"]
    others = [g for g in r.gates if g.verdict != "fail"]
    deltas = largest_deltas(r, min(cap, 10))
    gaps = r.coverage.gaps if r.coverage else []
    fails = [(c.name, f) for c in r.checks if c.verdict == "fail" for f in c.failures]
    return (
        environment()
        .get_template("pr_comment.md.j2")
        .render(
            r=r,
            failed=failed,
            others=others,
            deltas=deltas,
            n_deltas=len(r.perf.all_rows) if r.perf else 0,
            gaps=gaps[:cap],
            gaps_total=len(gaps),
            fails=fails[:cap],
            fails_total=len(fails),
            report_ref=report_ref,
            report_url=report_url,
            md=md,
        )
    )


def render_comment(
    r: ReportData, *, report_ref: str = "report.html", report_url: str | None = None, limit: int = DEFAULT_LIMIT
) -> str:
    """The comment text; always at most ``limit`` characters (and never above GitHub's limit)."""
    limit = min(limit, GITHUB_LIMIT)
    if report_url is not None:
        check_url(report_url)
    text = ""
    for cap in (200, 100, 50, 20, 10, 5, 2, 0):
        text = _render(r, report_ref=report_ref, report_url=report_url, cap=cap)
        if len(text) <= limit:
            return text
    note = "\n\n> **Truncated:** this comment hit the length limit; the full report has everything.\n"
    cut = text[: max(0, limit - len(note) - 1)]
    cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
    return cut + note
