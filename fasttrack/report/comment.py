"""The PR comment: GitHub-flavoured Markdown under GitHub's 65,536-character limit (counted in bytes).

It leads with the gate. The headline is the verdict, and the line under it gives the four
states a maintainer acts on: verdict, verification, PR link, rehearsal. Then come the gates
(failed first), the performance table, the claims, the coverage gaps, and where the full
report is. The performance table ranks the gated metric's rows first (failing rows first,
then the largest |log speedup|). A non-gated, client-timed figure (TTFT, TPOT, ITL timed as
the stream arrived) whose runs show burst delivery is left out of the table and counted in
a note: its "speedup" measures how the stream was delivered, not the decode.

The size is counted in UTF-8 bytes, so it stays under the limit however GitHub counts.
Bundle text is escaped for Markdown and HTML (:func:`md`): punctuation is backslash-escaped,
``<``/``>``/``&`` become entities, and zero-width spaces break ``scheme://``, ``www.`` and
``@mention`` so no bundle text becomes a link or pings anyone. Text shown as code (commit SHAs, metric
names, key ids) goes through :func:`code`, whose fence the text cannot break. Every value the template
shows passes one of the two (``tests/security/test_markdown.py`` renders hostile bundles with a real
Markdown parser). When the comment would be too long, tables are cut
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


def code(s: Any, limit: int = 120, *, cell: bool = False) -> Markup:
    """Untrusted text as one inline code span whose fence it cannot break.

    The text is one line (newlines and control characters replaced), the fence is one backtick longer
    than the longest run of backticks inside, padded when the text starts or ends with one (CommonMark's
    rule), and inside a table cell (``cell``) a ``|``, which GitHub reads as a cell border even in a code
    span, is escaped. Nothing inside a code span is Markdown or HTML."""
    text = fmt.one_line(s, limit) or " "
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    if text.startswith("`") or text.endswith("`"):
        text = f" {text} "
    if cell:
        text = text.replace("|", "\\|")
    return Markup(f"{fence}{text}{fence}")


def check_url(url: str, what: str = "--report-url") -> str:
    """A URL given on the command line: plain http(s) only."""
    if not _URL_OK.match(url):
        raise FasttrackError(
            f"{what} {url[:200]!r} is not a plain http(s) URL",
            hint=f"e.g. {what} https://ci.example.org/runs/123",
        )
    return url


@dataclass
class Delta:
    row: PerfRow

    @property
    def size(self) -> float:
        s = self.row.speedup
        return abs(math.log(s)) if s and s > 0 else 0.0


def shown_perf_rows(r: ReportData) -> tuple[list[PerfRow], list[PerfRow]]:
    """(rows the comment may show, in its order; rows left out as burst-distorted).

    Order: the gated metric's rows first; within each, failing rows first, then rows measured
    slower within the margin, then the largest |log speedup|, then by point."""
    rows = [x for x in (r.perf.all_rows if r.perf else []) if x.speedup is not None]
    dropped = [x for x in rows if x.burst_distorted]
    rows = [x for x in rows if not x.burst_distorted]
    rows.sort(key=lambda x: (not x.gated, x.verdict != "fail", not x.slower_within_margin, -Delta(x).size, x.point))
    return rows, dropped


def largest_deltas(r: ReportData, n: int) -> list[PerfRow]:
    """The first ``n`` rows of :func:`shown_perf_rows` (gated metric first, failing first)."""
    return shown_perf_rows(r)[0][:n]


def pr_headline_words(r: ReportData) -> str:
    """The headline's words for the PR link: which PR and head the bundle records, its isolation word
    and whether the bundle proves the link (``r.pr.link``, the state
    :func:`fasttrack.bundle.consistency.pr_link_state` gave when the bundle was loaded); without a PR
    link, that the bundle is not PR evidence (that rule's ``none``)."""
    if r.pr is None:
        return "none, so the bundle is not PR evidence"
    where = (r.pr.repository or "repository not recorded") + (f" #{r.pr.number}" if r.pr.number else "")
    return f"{where} at {r.pr.head_sha[:12]}, isolation {r.pr.isolation.replace('_', ' ')}, link {r.pr.link}"


def rehearsal_state(r: ReportData) -> str:
    """Whether the run was a rehearsal, in words."""
    if not r.readable:
        return "unknown"
    return "yes, not valid evidence" if r.rehearsal else "no"


def _render(r: ReportData, *, report_ref: str, report_url: str | None, cap: int) -> str:
    failed = [g for g in r.gates if g.verdict == "fail"]
    others = [g for g in r.gates if g.verdict != "fail"]
    rows, dropped = shown_perf_rows(r)
    deltas = rows[: min(cap, 10)]
    gated_metrics = sorted({x.metric for x in rows if x.gated})
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
            n_deltas=len(rows),
            dropped=dropped,
            gated_metrics=gated_metrics,
            claims=r.claims[:cap],
            claims_total=len(r.claims),
            pr_link=pr_headline_words(r),
            rehearsal=rehearsal_state(r),
            gaps=gaps[:cap],
            gaps_total=len(gaps),
            fails=fails[:cap],
            fails_total=len(fails),
            report_ref=report_ref,
            report_url=report_url,
            md=md,
            code=code,
        )
    )


def render_comment(
    r: ReportData, *, report_ref: str = "report.html", report_url: str | None = None, limit: int = DEFAULT_LIMIT
) -> str:
    """The comment text; always at most ``limit`` UTF-8 bytes (and never above GitHub's limit)."""
    limit = min(limit, GITHUB_LIMIT)
    if report_url is not None:
        check_url(report_url)
    text = ""
    for cap in (200, 100, 50, 20, 10, 5, 2, 0):
        text = _render(r, report_ref=report_ref, report_url=report_url, cap=cap)
        if size(text) <= limit:
            return text
    note = "\n\n> **Truncated:** this comment hit the length limit; the full report has everything.\n"
    room = max(0, limit - size(note) - 1)
    cut = text.encode("utf-8")[:room].decode("utf-8", errors="ignore")
    cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
    return cut + note


def size(text: str) -> int:
    """The comment's size as GitHub's limit is checked here: UTF-8 bytes (never fewer than characters)."""
    return len(text.encode("utf-8"))
